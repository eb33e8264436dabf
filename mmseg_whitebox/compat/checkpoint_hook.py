"""The ``last_checkpoint`` fix of :mod:`mmseg_whitebox.compat`, applied by
``AtomicCheckpointHook`` while it saves (mmengine 0.10.7 and
onedl-mmengine 0.10.8+; 0.10.7 and 0.10.12 checked).

*What it patches.* The name ``open`` in ``mmengine.hooks.checkpoint_hook``
(the builtin is found there only because the module defines no ``open``),
inside :func:`last_checkpoint_written_atomically` only.

*Why.* ``CheckpointHook._save_checkpoint_with_step`` names the new
checkpoint with ``open(<work dir>/last_checkpoint, 'w')``, which empties
the file first, and not through a file backend that a hook could replace:
a run killed then leaves no name of its latest checkpoint.

*What it does.* That module's ``open(<...>/last_checkpoint, 'w')`` writes
a temporary file that replaces ``last_checkpoint`` once closed
(:func:`~mmseg_whitebox.utils.atomic.atomic_path`); every other call is
the builtin ``open``.
"""
from __future__ import annotations

import builtins
import contextlib
import os.path as osp
from typing import Any, Iterator

from mmseg_whitebox.utils.atomic import atomic_path

#: the file mmengine names the latest checkpoint in (in the work dir)
LAST_CHECKPOINT = 'last_checkpoint'


@contextlib.contextmanager
def _text_written_atomically(path: str) -> Iterator[Any]:
    with atomic_path(path) as tmp, builtins.open(tmp, 'w') as file:
        yield file


def open_last_checkpoint_atomically(file: Any, mode: str = 'r', *args: Any,
                                    **kwargs: Any) -> Any:
    """``open`` as mmengine's checkpoint hook module sees it inside
    :func:`last_checkpoint_written_atomically`."""
    if mode == 'w' and not args and not kwargs and \
            osp.basename(str(file)) == LAST_CHECKPOINT:
        return _text_written_atomically(str(file))
    return builtins.open(file, mode, *args, **kwargs)


@contextlib.contextmanager
def last_checkpoint_written_atomically() -> Iterator[None]:
    """Within the block, mmengine's checkpoint hook module writes
    ``last_checkpoint`` through a temporary file (module docstring);
    nested blocks are one."""
    from mmengine.hooks import checkpoint_hook as module
    if 'open' in vars(module):  # an enclosing block put it there
        yield
        return
    module.open = open_last_checkpoint_atomically
    try:
        yield
    finally:
        del module.open
