"""Keep torch's random state in checkpoints, so that ``--resume`` continues
a run exactly as if it had never stopped."""
from __future__ import annotations

from typing import Any, Dict

import torch
from mmengine.hooks import Hook
from mmseg.registry import HOOKS

KEY = 'rng_state'


@HOOKS.register_module()
class RNGStateCheckpointHook(Hook):
    """Save torch's (CPU and CUDA) random state with every checkpoint and
    restore it when a run resumes from one.

    mmengine's resume restores weights, optimizer, schedulers and the data
    order, but not the random state that the model's own randomness draws
    from during training (e.g. stochastic depth, ``drop_path_rate`` of
    Segmenter's head), so a resumed run diverges from an uninterrupted one.
    numpy's and Python's states are left alone: they drive the data
    pipeline, which mmengine replays when it skips the trained batches.
    Loading weights without resuming (``load_from``, tests) restores
    nothing.
    """

    priority = 'NORMAL'  # before WeightsOnlyCheckpointHook (LOWEST)

    def before_save_checkpoint(self, runner: Any,
                               checkpoint: Dict[str, Any]) -> None:
        state = {'torch': torch.get_rng_state()}
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            state['cuda'] = torch.cuda.get_rng_state_all()
        checkpoint[KEY] = state

    def after_load_checkpoint(self, runner: Any,
                              checkpoint: Dict[str, Any]) -> None:
        state = checkpoint.get(KEY)
        if not getattr(runner, '_resume', False) or not state:
            return
        torch.set_rng_state(state['torch'])
        cuda = state.get('cuda')
        if cuda and torch.cuda.is_available() and \
                len(cuda) == torch.cuda.device_count():
            torch.cuda.set_rng_state_all(cuda)
