from .weights_only_checkpoint_hook import WeightsOnlyCheckpointHook

__all__ = ['WeightsOnlyCheckpointHook']
