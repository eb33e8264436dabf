"""Distributed runs (``--launcher pytorch``) on GPUs and on CPU processes.

The device is decided first (:func:`~.device.resolve_device`): a launched
run without a visible GPU stops unless ``--device cpu`` asks for CPU
processes. mmengine 0.10.7 assumes GPUs once a launcher is set: its
``init_dist`` always calls ``torch.cuda.set_device`` (which a CPU torch
does not have) and its default model wrapper passes
``device_ids=[LOCAL_RANK]`` to ``DistributedDataParallel`` (which only
accepts them for GPU modules). For ``--device cpu``
:func:`setup_distributed` therefore sets up what mmengine would, through
the settings the Runner reads: the ``gloo`` backend in
``env_cfg.dist_cfg``, a ``model_wrapper_cfg`` with ``device_ids=None``,
and the process group itself (the Runner only initialises one when none
exists). For ``cuda`` nothing is changed. :func:`run_device` is the whole
set-up of a run: the decision, the GPUs hidden for ``cpu``
(:func:`~.device.cuda_hidden`), then :func:`setup_distributed`.
"""
from __future__ import annotations

import contextlib
import datetime
import os
from typing import Any, Iterator, Optional

from .device import cuda_hidden, resolve_device
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


def setup_distributed(cfg: Any, device: Optional[str] = None
                      ) -> Optional[str]:
    """Prepare ``cfg`` (with ``cfg.launcher`` set) for a distributed run on
    ``device`` (``'cuda'``, ``'cpu'``; None: decided by
    :func:`~.device.resolve_device`, which refuses a launched run without
    a GPU).

    Returns the communication backend, or None when ``cfg.launcher`` is
    ``'none'``. For ``cuda`` the config is left as it is (mmengine's NCCL
    set-up); for ``cpu`` the run uses gloo on CPU processes and the
    process group is initialised here, from the environment torchrun sets.
    """
    launcher = cfg.get('launcher', 'none')
    if launcher in (None, 'none'):
        return None
    if device is None:
        device = resolve_device(launcher, device)
    env_cfg = cfg.get('env_cfg', None) or {}
    dist_cfg = dict(env_cfg.get('dist_cfg', None) or {})
    if device == 'cuda':
        return dist_cfg.get('backend', 'nccl')
    if launcher != 'pytorch':
        raise ToolError(
            f'--launcher {launcher} --device cpu is not supported; start CPU '
            'processes with tools/dist_train.sh or tools/dist_test.sh '
            '(--launcher pytorch) and --device cpu, which use gloo')
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
        print_log(f'--device cpu: distributed backend {requested!r} -> '
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


@contextlib.contextmanager
def run_device(cfg: Any, device: Optional[str] = None) -> Iterator[str]:
    """The device set-up of a training or test run of ``cfg`` (its
    ``launcher`` set), for the block that runs it: the device decided
    (:func:`~.device.resolve_device`: a :class:`ToolError` before any work
    when it cannot be had), the GPUs hidden from this process for ``cpu``
    (:func:`~.device.cuda_hidden`), then :func:`setup_distributed`.
    Yields ``'cuda'`` or ``'cpu'``."""
    chosen = resolve_device(cfg.get('launcher', 'none'), device)
    with contextlib.ExitStack() as stack:
        if chosen == 'cpu':
            stack.enter_context(cuda_hidden())
        setup_distributed(cfg, chosen)
        yield chosen
