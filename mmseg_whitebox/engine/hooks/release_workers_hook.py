"""Dataloader worker processes stopped when a run ends, not when the
garbage collector finds them.

With ``persistent_workers=True`` (every dataset base of this project, as
mmseg's) a DataLoader keeps its worker processes until it is collected.
In a process that runs a second Runner (a library user's
``train_model`` then ``evaluate_checkpoint``, the demo, a noise sweep
after a test) the collector finds the first run's loaders later, while
the new run's workers, forked meanwhile, hold the old workers' pipes; the
old workers then no longer exit on their shutdown signal and PyTorch
waits its timeout (5 s) for each one. Measured with the demo config's 2
test workers: a second ``evaluate_checkpoint`` in one process took 11.9 s
against 2.3 s for the first; stopping the workers when the run ends took
0.03 s.
"""
from __future__ import annotations

from typing import Any

from mmengine.hooks import Hook
from mmengine.runner import BaseLoop
from mmseg.registry import HOOKS

#: the Runner's attributes that hold its loops (a dict until built)
LOOPS = ('_train_loop', '_val_loop', '_test_loop')


def release_dataloader_workers(runner: Any) -> int:
    """Stop the worker processes of the persistent dataloaders of
    ``runner``'s built loops; returns how many loaders had workers. A
    loader used again starts new workers."""
    released = 0
    for name in LOOPS:
        loop = vars(runner).get(name)
        if not isinstance(loop, BaseLoop):
            continue  # never built: no workers
        loader = getattr(loop, 'dataloader', None)
        # PyTorch keeps a persistent loader's iterator (and its workers)
        # here; it has no public way to stop them
        workers = getattr(loader, '_iterator', None)
        if workers is not None and hasattr(workers, '_shutdown_workers'):
            workers._shutdown_workers()
            loader._iterator = None
            released += 1
    return released


@HOOKS.register_module()
class ReleaseDataloaderWorkersHook(Hook):
    """Stops the persistent dataloader workers when the run ends
    (:func:`release_dataloader_workers`; see the module docstring)."""

    priority = 'VERY_LOW'  # after every other hook's after_run

    def after_run(self, runner: Any) -> None:
        release_dataloader_workers(runner)
