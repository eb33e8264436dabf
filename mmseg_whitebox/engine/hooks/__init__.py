from mmseg_whitebox.compat import LAST_CHECKPOINT

from .atomic_checkpoint_hook import AtomicCheckpointHook
from .checkpoint_check_hooks import CheckpointCheckHook, ResumeCheckHook
from .compile_hook import CompileHook
from .freeze_backbone_hook import FreezeBackboneHook, freeze_backbone
from .grad_layout_hook import GradLayoutHook
from .main_process_logger_hook import MainProcessLoggerHook
from .non_finite_counter import NonFiniteCounter, count_nonfinite
from .release_workers_hook import ReleaseDataloaderWorkersHook
from .rng_state_hook import RNGStateCheckpointHook
from .weights_only_checkpoint_hook import WeightsOnlyCheckpointHook

__all__ = [
    'LAST_CHECKPOINT', 'AtomicCheckpointHook', 'CheckpointCheckHook',
    'CompileHook',
    'FreezeBackboneHook', 'GradLayoutHook',
    'MainProcessLoggerHook', 'NonFiniteCounter',
    'RNGStateCheckpointHook', 'ReleaseDataloaderWorkersHook',
    'ResumeCheckHook', 'WeightsOnlyCheckpointHook', 'count_nonfinite',
    'freeze_backbone'
]
