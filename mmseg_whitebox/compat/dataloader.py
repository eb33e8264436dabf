"""The dataloader-workers fix of :mod:`mmseg_whitebox.compat`, applied by
``ReleaseDataloaderWorkersHook`` when a run ends (torch 2.1 and 2.13
checked).

*What it patches.* A ``torch.utils.data.DataLoader``'s private
``_iterator``: the iterator, with its worker processes, that a loader with
``persistent_workers=True`` keeps between epochs. Its workers are stopped
(the iterator's ``_shutdown_workers``) and the loader forgets it.

*Why.* torch offers no public way to stop those workers; they stop when
the loader is garbage-collected. In a process that runs a second Runner,
the collector finds the first run's loaders late, while the new run's
workers, forked meanwhile, hold the old workers' pipes: the old workers
then miss their shutdown signal and torch waits its timeout (5 s) for
each.

*What it does.* :func:`stop_persistent_workers`; a loader used again
starts new workers, as on its first epoch.
"""
from __future__ import annotations

from typing import Any


def stop_persistent_workers(loader: Any) -> bool:
    """Stop the worker processes that ``loader`` (a ``DataLoader``) keeps;
    whether it had any."""
    iterator = getattr(loader, '_iterator', None)
    if iterator is None or not hasattr(iterator, '_shutdown_workers'):
        return False
    iterator._shutdown_workers()
    loader._iterator = None
    return True
