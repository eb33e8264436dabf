"""The model wrapper of a distributed run on CPU processes (gloo).

Torch runs ``SyncBatchNorm`` on GPUs only: DDP refuses to wrap a CPU
module that has one ("SyncBatchNorm layers only work with GPU modules"),
and its forward has no CPU kernels (``batch_norm_stats``), in torch 2.13
as in 2.1. mmengine's Runner reverts SyncBN to BN for one process
(``revert_sync_batchnorm``, logged); :class:`CPUDistributedDataParallel`
does the same for CPU processes, before DDP registers the parameters,
with one logged line. Each process then normalises with its own batch
statistics and keeps its own running statistics (rank 0's are saved), as
a GPU run with plain BN would.
"""
from __future__ import annotations

from typing import Any

import torch.nn as nn
from mmengine.logging import print_log
from mmengine.model import MMDistributedDataParallel, revert_sync_batchnorm
from mmengine.registry import MODEL_WRAPPERS


def count_sync_batchnorm(module: nn.Module) -> int:
    """How many SyncBN layers ``module`` has."""
    return sum(isinstance(m, nn.SyncBatchNorm) for m in module.modules())


@MODEL_WRAPPERS.register_module()
class CPUDistributedDataParallel(MMDistributedDataParallel):
    """mmengine's ``MMDistributedDataParallel`` for CPU processes: the
    module's SyncBN layers are first reverted to BN (mmengine's
    ``revert_sync_batchnorm``), with a note in the log."""

    def __init__(self, module: nn.Module, **kwargs: Any) -> None:
        synced = count_sync_batchnorm(module)
        if synced:
            module = revert_sync_batchnorm(module)
            print_log(f'CPU processes: {synced} SyncBN layers reverted to BN '
                      '(torch runs SyncBN on GPUs only): batch statistics '
                      'per process, rank 0\'s running statistics saved',
                      logger='current')
        super().__init__(module=module, **kwargs)
