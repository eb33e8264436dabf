from .hooks import WeightsOnlyCheckpointHook

__all__ = ['WeightsOnlyCheckpointHook']
