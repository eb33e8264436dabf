"""Checkpoints that exist under their name only when complete.

mmengine's ``CheckpointHook`` removes old checkpoints before it writes the
new one, straight under its name: a run killed while saving leaves a
truncated ``iter_N.pth`` and, with ``max_keep_ckpts=1``, no complete
checkpoint at all. :class:`AtomicCheckpointHook` writes the file (and
``last_checkpoint``) through a temporary file and removes older ones only
once both are in place, so a killed save leaves the previous checkpoint,
still named by ``last_checkpoint``.
"""
from __future__ import annotations

import contextlib
from typing import Any, Callable, Iterator, List, Optional, Tuple

from mmengine.fileio import LocalBackend, register_backend
from mmengine.hooks import CheckpointHook
from mmseg.registry import HOOKS

from mmseg_whitebox.compat import last_checkpoint_written_atomically
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


@HOOKS.register_module()
class AtomicCheckpointHook(CheckpointHook):
    """mmengine's ``CheckpointHook`` (same arguments) with atomic saves
    (see the module docstring). Checkpoints to other storage (their own
    ``backend_args``/``file_client_args``, a URL) are written as mmengine
    writes them."""

    def before_train(self, runner: Any) -> None:
        folder = str(self.out_dir or runner.work_dir)
        if self.backend_args is None and self.file_client_args is None \
                and '://' not in folder:
            self.backend_args = dict(backend=ATOMIC_BACKEND)
        super().before_train(runner)
        if not isinstance(self.file_backend, _DeferredRemoval):
            self.file_backend = _DeferredRemoval(self.file_backend)

    @contextlib.contextmanager
    def _saving(self) -> Iterator[None]:
        """Around a hook point that may save: removals wait for the new
        checkpoint, ``last_checkpoint`` is written atomically."""
        backend = getattr(self, 'file_backend', None)
        with (backend.deferring() if isinstance(backend, _DeferredRemoval)
              else contextlib.nullcontext()), \
                last_checkpoint_written_atomically():
            yield

    def after_train_iter(self, runner: Any, batch_idx: int,
                         data_batch: Any = None, outputs: Any = None) -> None:
        with self._saving():
            super().after_train_iter(runner, batch_idx, data_batch, outputs)

    def after_train_epoch(self, runner: Any) -> None:
        with self._saving():
            super().after_train_epoch(runner)

    def after_val_epoch(self, runner: Any, metrics: dict) -> None:
        with self._saving():
            super().after_val_epoch(runner, metrics)
