from .rng_state_hook import RNGStateCheckpointHook
from .weights_only_checkpoint_hook import WeightsOnlyCheckpointHook

__all__ = ['RNGStateCheckpointHook', 'WeightsOnlyCheckpointHook']
