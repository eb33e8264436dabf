"""Checkpoints that exist under their name only when complete.

mmengine's ``CheckpointHook`` removes the checkpoints beyond
``max_keep_ckpts`` (and the previous best) before it writes the new one,
and writes the new one straight under its name (``LocalBackend.put``:
``open(path, 'wb')``). A run killed while saving then leaves a truncated
``iter_N.pth`` and, with ``max_keep_ckpts=1``, no complete checkpoint at
all, while ``last_checkpoint`` names one that is gone.

:class:`AtomicCheckpointHook` is that hook with two changes: the file is
written to a temporary name in the same folder and renamed once complete
(the :data:`ATOMIC_BACKEND` file backend), and older checkpoints are
removed only after the new one and ``last_checkpoint`` (which mmengine
writes after the save returns) are in place. ``last_checkpoint`` itself,
which mmengine writes with ``open(path, 'w')`` (emptying it first), is
written through a temporary file too. A killed save leaves the previous
checkpoint, still named by ``last_checkpoint``.
:func:`~mmseg_whitebox.engine.runner_config.runner_config` puts it in
place of mmengine's hook.
"""
from __future__ import annotations

import builtins
import contextlib
import os.path as osp
from typing import Any, Callable, Iterator, List, Optional, Tuple

from mmengine.fileio import LocalBackend, register_backend
from mmengine.hooks import CheckpointHook
from mmengine.hooks import checkpoint_hook as mmengine_checkpoint_hook
from mmseg.registry import HOOKS

from mmseg_whitebox.utils.atomic import atomic_path

#: the name of the file backend that writes through a temporary file
ATOMIC_BACKEND = 'mmseg_whitebox_atomic_local'


class AtomicLocalBackend(LocalBackend):
    """mmengine's local file backend whose writes replace the target only
    once complete (:func:`~mmseg_whitebox.utils.atomic.atomic_path`)."""

    def put(self, obj: bytes, filepath: Any) -> None:
        with atomic_path(str(filepath)) as tmp:
            super().put(obj, tmp)

    def put_text(self, obj: str, filepath: Any,
                 encoding: str = 'utf-8') -> None:
        with atomic_path(str(filepath)) as tmp:
            super().put_text(obj, tmp, encoding)


register_backend(ATOMIC_BACKEND, AtomicLocalBackend, force=True)


class _DeferredRemoval:
    """A file backend whose ``remove``/``rmtree`` wait, inside
    :meth:`deferring`, until the block has ended without an error."""

    def __init__(self, backend: Any) -> None:
        self._backend = backend
        self._pending: Optional[List[Tuple[Callable, str]]] = None

    def __getattr__(self, name: str) -> Any:
        return getattr(self._backend, name)

    @contextlib.contextmanager
    def deferring(self) -> Iterator[None]:
        outer = self._pending is None
        if outer:
            self._pending = []
        try:
            yield
        except BaseException:
            if outer:
                self._pending = None  # keep what was to be removed
            raise
        if outer:
            pending, self._pending = self._pending, None
            for remove, path in pending:
                remove(path)

    def remove(self, path: str) -> None:
        self._later(self._backend.remove, path)

    def rmtree(self, path: str) -> None:
        self._later(self._backend.rmtree, path)

    def _later(self, remove: Callable, path: str) -> None:
        if self._pending is None:
            remove(path)
        else:
            self._pending.append((remove, path))


#: the file mmengine names the latest checkpoint in (in the work dir)
LAST_CHECKPOINT = 'last_checkpoint'


@contextlib.contextmanager
def _text_written_atomically(path: str) -> Iterator[Any]:
    with atomic_path(path) as tmp, builtins.open(tmp, 'w') as file:
        yield file


def _open_last_checkpoint_atomically(file: Any, mode: str = 'r', *args: Any,
                                     **kwargs: Any) -> Any:
    """``open`` for mmengine's checkpoint hook module: its ``open(
    last_checkpoint, 'w')`` writes through a temporary file."""
    if mode == 'w' and not args and not kwargs and \
            osp.basename(str(file)) == LAST_CHECKPOINT:
        return _text_written_atomically(str(file))
    return builtins.open(file, mode, *args, **kwargs)


@contextlib.contextmanager
def _atomic_last_checkpoint() -> Iterator[None]:
    """Within the block, mmengine's checkpoint hook module writes
    ``last_checkpoint`` atomically (its name ``open`` resolves to
    :func:`_open_last_checkpoint_atomically` before the builtin)."""
    module = mmengine_checkpoint_hook
    if 'open' in vars(module):  # an enclosing block put it there
        yield
        return
    module.open = _open_last_checkpoint_atomically
    try:
        yield
    finally:
        del module.open


@HOOKS.register_module()
class AtomicCheckpointHook(CheckpointHook):
    """mmengine's ``CheckpointHook`` (same arguments) that never leaves a
    partly written checkpoint under a checkpoint's name, nor removes the
    previous one before the new one is complete (see the module
    docstring). Checkpoints to a storage other than a local folder (a
    ``backend_args`` or ``file_client_args`` of their own, a URL) are
    written as mmengine writes them."""

    def before_train(self, runner: Any) -> None:
        folder = str(self.out_dir or runner.work_dir)
        if self.backend_args is None and self.file_client_args is None \
                and '://' not in folder:
            self.backend_args = dict(backend=ATOMIC_BACKEND)
        super().before_train(runner)
        if not isinstance(self.file_backend, _DeferredRemoval):
            self.file_backend = _DeferredRemoval(self.file_backend)

    def _save_checkpoint_with_step(self, runner: Any, step: int,
                                   meta: dict) -> None:
        with self.file_backend.deferring(), _atomic_last_checkpoint():
            super()._save_checkpoint_with_step(runner, step, meta)

    def _save_best_checkpoint(self, runner: Any, metrics: dict) -> None:
        with self.file_backend.deferring():
            super()._save_best_checkpoint(runner, metrics)

