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
``env_cfg.dist_cfg``, a ``model_wrapper_cfg`` with ``device_ids=None``
(mmengine's wrapper with SyncBN layers, which torch runs on GPUs only,
reverted to BN as mmengine does for one process),
and the process group itself (the Runner only initialises one when none
exists). For ``cuda`` nothing is changed. The whole set-up of a run (the
decision, the GPUs hidden for ``cpu``, then :func:`setup_distributed`) is
:func:`mmseg_whitebox.engine.runner_config.run_device`.

Under ``--launcher slurm`` with ``--device cpu``, the variables torchrun
would set are first derived from the ones ``srun`` sets for every task
(:func:`slurm_environment`, as mmengine's own Slurm set-up does), so the
same gloo path serves both launchers.
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
    """A TCP port on 127.0.0.1 that nobody listens on now: the rendezvous
    port of a one-node launch that must not meet another run's."""
    with socket.socket() as sock:
        sock.bind(('127.0.0.1', 0))
        return sock.getsockname()[1]


def first_slurm_host(nodelist: str) -> str:
    """The first host of a Slurm node list (``node[01-04]`` style), as
    ``scontrol show hostnames`` expands it: the rank-0 host, where the
    rendezvous listens."""
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
    """``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``MASTER_ADDR`` and
    ``MASTER_PORT`` for a task that srun started, from ``environ``
    (default ``os.environ``): what torchrun would have set, so the gloo
    set-up reads the same variables under both launchers.

    As in mmengine's ``_init_dist_slurm``: the master is the first host of
    ``SLURM_NODELIST`` unless ``MASTER_ADDR`` is set; the port is ``port``
    (``env_cfg.dist_cfg.port``), else ``MASTER_PORT``, else 29500."""
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


def reverting_sync_batchnorm(wrapper: dict) -> dict:
    """``wrapper`` (a ``model_wrapper_cfg``) with mmengine's default
    wrapper replaced by :data:`CPU_WRAPPER`, the same with the model's
    SyncBN layers (which torch runs on GPUs only) reverted to BN first;
    another wrapper is kept."""
    from mmengine.model import MMDistributedDataParallel
    if wrapper['type'] in (DEFAULT_WRAPPER, MMDistributedDataParallel):
        wrapper = dict(wrapper, type=CPU_WRAPPER)
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
    process group is initialised here, from the environment torchrun sets
    (``--launcher pytorch``) or, under ``--launcher slurm``, the one
    :func:`slurm_environment` derives from srun's.
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
