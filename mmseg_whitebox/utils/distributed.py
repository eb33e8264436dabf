"""Distributed runs (``--launcher pytorch``) on GPUs and on CPU-only machines.

mmengine 0.10.7 assumes GPUs once a launcher is set: its ``init_dist``
always calls ``torch.cuda.set_device`` (which a CPU torch does not have) and
its default model wrapper passes ``device_ids=[LOCAL_RANK]`` to
``DistributedDataParallel`` (which only accepts them for GPU modules).
Without CUDA, :func:`setup_distributed` therefore sets up what mmengine
would, through the settings the Runner reads: the ``gloo`` backend in
``env_cfg.dist_cfg``, a ``model_wrapper_cfg`` with ``device_ids=None``, and
the process group itself (the Runner only initialises one when none
exists). With CUDA nothing is changed.
"""
from __future__ import annotations

import datetime
import os
from typing import Any, Optional

from .tool_error import ToolError

#: what torchrun (``python -m torch.distributed.run``) sets for every process
TORCHRUN_ENV = ('RANK', 'WORLD_SIZE', 'MASTER_ADDR', 'MASTER_PORT')
DEFAULT_WRAPPER = 'MMDistributedDataParallel'


def cpu_model_wrapper_cfg(cfg: Any) -> dict:
    """``cfg.model_wrapper_cfg`` for CPU processes: as the config has it (or
    mmengine's default wrapper), with ``device_ids=None`` for the
    ``DistributedDataParallel`` kinds, which refuse device ids on CPU."""
    from mmengine.registry import MODEL_WRAPPERS
    from torch.nn.parallel import DistributedDataParallel
    wrapper = dict(cfg.get('model_wrapper_cfg', None) or dict(
        type=DEFAULT_WRAPPER,
        broadcast_buffers=False,
        find_unused_parameters=cfg.get('find_unused_parameters', False)))
    wrapper.setdefault('type', DEFAULT_WRAPPER)
    wrapper_type = wrapper['type']
    if isinstance(wrapper_type, str):
        wrapper_type = MODEL_WRAPPERS.get(wrapper_type)
    if isinstance(wrapper_type, type) and issubclass(
            wrapper_type, DistributedDataParallel):
        wrapper.setdefault('device_ids', None)
    return wrapper


def setup_distributed(cfg: Any) -> Optional[str]:
    """Prepare ``cfg`` (with ``cfg.launcher`` set) for a distributed run.

    Returns the communication backend, or None when ``cfg.launcher`` is
    ``'none'``. With CUDA the config is left as it is (mmengine's NCCL
    set-up); without CUDA the run uses gloo on CPU processes and the
    process group is initialised here, from the environment torchrun sets.
    """
    launcher = cfg.get('launcher', 'none')
    if launcher in (None, 'none'):
        return None
    import torch
    env_cfg = cfg.get('env_cfg', None) or {}
    dist_cfg = dict(env_cfg.get('dist_cfg', None) or {})
    if torch.cuda.is_available():
        return dist_cfg.get('backend', 'nccl')
    if launcher != 'pytorch':
        raise ToolError(
            f'--launcher {launcher} needs CUDA GPUs (mmengine sets a GPU per '
            'process) and none is available here; on a CPU-only machine '
            'start the processes with tools/dist_train.sh or '
            'tools/dist_test.sh (--launcher pytorch), which use gloo')
    missing = [k for k in TORCHRUN_ENV if k not in os.environ]
    if missing:
        raise ToolError(
            f'--launcher pytorch: {", ".join(missing)} not set; start the '
            'processes with tools/dist_train.sh / tools/dist_test.sh or '
            '`python -m torch.distributed.run --nproc_per_node N TOOL ... '
            '--launcher pytorch`, or use --launcher none for one process')
    requested = dist_cfg.get('backend', 'gloo')
    if requested != 'gloo' and os.environ.get('RANK') == '0':
        from mmengine.logging import print_log
        print_log(f'no CUDA here: distributed backend {requested!r} -> '
                  "'gloo' (CPU processes)", logger='current')
    dist_cfg['backend'] = 'gloo'
    cfg.env_cfg = dict(env_cfg, dist_cfg=dist_cfg)
    cfg.model_wrapper_cfg = cpu_model_wrapper_cfg(cfg)

    from torch import distributed as dist
    if not dist.is_initialized():
        kwargs = {k: v for k, v in dist_cfg.items() if k != 'backend'}
        if kwargs.get('timeout') is not None:  # seconds, as in mmengine
            kwargs['timeout'] = datetime.timedelta(seconds=kwargs['timeout'])
        kwargs.pop('init_backend', None)
        dist.init_process_group(backend='gloo', **kwargs)
    return 'gloo'
