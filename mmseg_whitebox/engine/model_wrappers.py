"""The model wrapper of a distributed run on CPU processes (gloo).

Torch runs ``SyncBatchNorm`` on GPUs only (DDP refuses to wrap a CPU
module with one), so :class:`CPUDistributedDataParallel` reverts SyncBN
to BN first, as mmengine's Runner does for one process: each process
normalises with its own batch statistics, rank 0's running statistics
are saved.
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
    """mmengine's ``MMDistributedDataParallel`` with the module's SyncBN
    layers reverted to BN first (logged)."""

    def __init__(self, module: nn.Module, **kwargs: Any) -> None:
        synced = count_sync_batchnorm(module)
        if synced:
            module = revert_sync_batchnorm(module)
            print_log(f'CPU processes: {synced} SyncBN layers reverted to BN '
                      '(torch runs SyncBN on GPUs only): batch statistics '
                      'per process, rank 0\'s running statistics saved',
                      logger='current')
        super().__init__(module=module, **kwargs)
