"""Distributed runs (``--launcher pytorch`` or ``slurm``) on GPUs and on
CPU processes.

mmengine assumes GPUs once a launcher is set (``init_dist`` calls
``torch.cuda.set_device``, its wrapper passes ``device_ids``). For
``--device cpu`` :func:`setup_distributed` sets up what mmengine would
through the settings the Runner reads: gloo, a ``model_wrapper_cfg``
without device ids and SyncBN reverted, and the process group itself.
Under Slurm the torchrun variables are first derived from srun's
(:func:`slurm_environment`).
"""
from __future__ import annotations

import datetime
import os
import socket
import subprocess
from typing import Any, Dict, Mapping, Optional

from .device import resolve_device
from .tool_error import ToolError

#: what torchrun (``python -m torch.distributed.run``) sets for every process
TORCHRUN_ENV = ('RANK', 'WORLD_SIZE', 'MASTER_ADDR', 'MASTER_PORT')
DEFAULT_WRAPPER = 'MMDistributedDataParallel'
#: mmengine's default wrapper for CPU processes, SyncBN reverted to BN
#: (registered by ``mmseg_whitebox.engine.model_wrappers``)
CPU_WRAPPER = 'CPUDistributedDataParallel'
#: what srun sets for every task, and :func:`slurm_environment` reads
SLURM_ENV = ('SLURM_PROCID', 'SLURM_NTASKS', 'SLURM_LOCALID',
             'SLURM_NODELIST')
#: torch.distributed's default port, mmengine's default under Slurm
DEFAULT_PORT = 29500


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nobody listens on now (a one-node
    launch's rendezvous)."""
    with socket.socket() as sock:
        sock.bind(('127.0.0.1', 0))
        return sock.getsockname()[1]


def first_slurm_host(nodelist: str) -> str:
    """The first host of a Slurm node list, as ``scontrol show hostnames``
    expands it (the rank-0 host)."""
    try:
        proc = subprocess.run(['scontrol', 'show', 'hostnames', nodelist],
                              capture_output=True, text=True, check=False)
    except FileNotFoundError:
        raise ToolError(
            '--launcher slurm: the scontrol command is not on PATH, so the '
            f'first host of SLURM_NODELIST={nodelist!r} is unknown; run on a '
            'Slurm node or set MASTER_ADDR') from None
    hosts = proc.stdout.split()
    if proc.returncode != 0 or not hosts:
        raise ToolError(
            f'--launcher slurm: `scontrol show hostnames {nodelist}` failed '
            f'({proc.stderr.strip() or "no hosts"}); set MASTER_ADDR to the '
            'first node of the job')
    return hosts[0]


def slurm_environment(environ: Optional[Mapping[str, str]] = None,
                      port: Optional[int] = None) -> Dict[str, str]:
    """The torchrun variables (``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``,
    ``MASTER_ADDR``, ``MASTER_PORT``) of a task srun started, from
    ``environ`` (default ``os.environ``). As in mmengine's Slurm set-up:
    the master is ``MASTER_ADDR`` or the first host of ``SLURM_NODELIST``,
    the port ``port``, else ``MASTER_PORT``, else 29500."""
    environ = os.environ if environ is None else environ
    missing = [k for k in SLURM_ENV if not environ.get(k)]
    if missing:
        raise ToolError(
            f'--launcher slurm: {", ".join(missing)} not set (srun sets '
            'them for every task); start the processes with '
            'tools/slurm_train.sh / tools/slurm_test.sh or srun, or use '
            '--launcher pytorch under torchrun')
    numbers = {}
    for key in ('SLURM_PROCID', 'SLURM_NTASKS', 'SLURM_LOCALID'):
        try:
            numbers[key] = int(environ[key])
        except ValueError:
            raise ToolError(f'--launcher slurm: {key}={environ[key]!r} is '
                            'not a number; start the tasks with srun') \
                from None
    if port is None:
        port = environ.get('MASTER_PORT') or DEFAULT_PORT
    addr = environ.get('MASTER_ADDR') or first_slurm_host(
        environ['SLURM_NODELIST'])
    return dict(RANK=str(numbers['SLURM_PROCID']),
                WORLD_SIZE=str(numbers['SLURM_NTASKS']),
                LOCAL_RANK=str(numbers['SLURM_LOCALID']),
                MASTER_ADDR=addr, MASTER_PORT=str(port))


def cpu_model_wrapper_cfg(cfg: Any) -> dict:
    """``cfg.model_wrapper_cfg`` (or mmengine's default) with
    ``device_ids=None`` for the ``DistributedDataParallel`` kinds."""
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


def reverting_sync_batchnorm(wrapper: dict) -> dict:
    """``wrapper`` (a ``model_wrapper_cfg``) with mmengine's default
    wrapper replaced by :data:`CPU_WRAPPER`; another wrapper is kept."""
    from mmengine.model import MMDistributedDataParallel
    if wrapper['type'] in (DEFAULT_WRAPPER, MMDistributedDataParallel):
        wrapper = dict(wrapper, type=CPU_WRAPPER)
    return wrapper


def setup_distributed(cfg: Any, device: Optional[str] = None
                      ) -> Optional[str]:
    """Prepare ``cfg`` (``cfg.launcher`` set) for a distributed run on
    ``device`` (``'cuda'``, ``'cpu'``; None: :func:`~.device.resolve_device`
    decides). Returns the backend, or None for ``--launcher none``. For
    ``cuda`` the config is left to mmengine; for ``cpu`` gloo is set up and
    the process group initialised here (see the module docstring).
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
    if launcher == 'slurm':
        os.environ.update(slurm_environment(port=dist_cfg.get('port')))
    elif launcher != 'pytorch':
        raise ToolError(
            f'--launcher {launcher} --device cpu is not supported; start CPU '
            'processes with tools/dist_train.sh / tools/dist_test.sh '
            '(--launcher pytorch) or tools/slurm_train.sh / '
            'tools/slurm_test.sh (--launcher slurm) and --device cpu, which '
            'use gloo')
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
    cfg.model_wrapper_cfg = reverting_sync_batchnorm(
        cpu_model_wrapper_cfg(cfg))

    from torch import distributed as dist
    if not dist.is_initialized():
        # 'port' is mmengine's Slurm setting, read above, not torch's
        kwargs = {k: v for k, v in dist_cfg.items()
                  if k not in ('backend', 'port')}
        if kwargs.get('timeout') is not None:  # seconds, as in mmengine
            kwargs['timeout'] = datetime.timedelta(seconds=kwargs['timeout'])
        kwargs.pop('init_backend', None)
        dist.init_process_group(backend='gloo', **kwargs)
    return 'gloo'


def unwrap_model(model: Any) -> Any:
    """The model inside its wrappers: mmengine's model wrappers (DDP and
    the like, :func:`mmengine.model.is_model_wrapper`) and TTA models,
    whose ``.module`` holds the segmentor."""
    from mmengine.model import BaseTTAModel, is_model_wrapper
    while is_model_wrapper(model) or isinstance(model, BaseTTAModel):
        model = model.module
    return model
