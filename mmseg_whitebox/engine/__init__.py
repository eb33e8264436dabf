"""What runs a model: mmengine hooks made safe or added (:mod:`.hooks`),
and a run's config: a config file or model name read and checked
(:mod:`.config`), the model-name index (:mod:`.model_index`) and the
config of a Runner (:mod:`.runner_config`); the model wrapper of CPU
processes (:mod:`.model_wrappers`)."""
from .hooks import WeightsOnlyCheckpointHook
from .model_wrappers import CPUDistributedDataParallel

__all__ = ['CPUDistributedDataParallel', 'WeightsOnlyCheckpointHook']
