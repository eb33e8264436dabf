"""The resume fix of :mod:`mmseg_whitebox.compat` (onedl-mmengine only).

``resume replays skipped batches`` (onedl-mmengine only)
    On ``--resume`` the fork's iteration loop fast-forwards the sampler (or
    advances it index by index) without loading the batches already
    trained on, so the data pipeline's random transforms draw different
    numbers than in the uninterrupted run and a resumed run is no longer
    bitwise equal to it; its lazily created DataLoader iterator also draws
    from torch's random state after the resume restored it. The fix loads
    and discards each skipped batch and keeps the restored state, as
    mmengine 0.10.7 does. Skipped on mmengine 0.10.7 (no ``skip_iter``).
"""
from __future__ import annotations

from typing import Any

import torch


def _replay_skipped_batches(self: Any, num_iters: int) -> None:
    """``_InfiniteDataloaderIterator.skip_iter`` as mmengine 0.10.7 resumes:
    each skipped batch is loaded, so the pipeline's random transforms
    advance exactly as in the uninterrupted run. Creating the DataLoader
    iterator draws its base seed from torch's generator; 0.10.7 does that
    before the resume restores torch's random state (see
    :class:`RNGStateCheckpointHook`), so here the draw must leave that
    restored state as it was."""
    state = torch.get_rng_state()
    self._ensure_iterator()
    torch.set_rng_state(state)
    for _ in range(num_iters):
        next(self)


def patch_resume_skip() -> bool:
    """Make onedl-mmengine's resume load the skipped batches.

    Returns True if this mmengine's loop iterator has ``skip_iter`` (the
    fork) and it is replaced, False otherwise (0.10.7).
    """
    from mmengine.runner import loops
    iterator_cls = getattr(loops, '_InfiniteDataloaderIterator', None)
    if iterator_cls is None or not hasattr(iterator_cls, 'skip_iter'):
        return False
    iterator_cls.skip_iter = _replay_skipped_batches
    return True
