"""Where a training or test run goes: ``cuda`` or ``cpu``, decided once,
before any work, and never silently the CPU for a launched run (a
launched run without a visible GPU is almost always a mistake: a CPU
wheel, a driver, an empty ``CUDA_VISIBLE_DEVICES``). One process keeps
mmseg's rule: the GPU when there is one.
"""
from __future__ import annotations

import os
from typing import Optional

from .tool_error import ToolError

#: the devices a training or test run takes (``--device``)
RUN_DEVICES = ('cuda', 'cpu')
#: the environment variable CUDA reads the visible GPUs from
VISIBLE_DEVICES = 'CUDA_VISIBLE_DEVICES'


def cuda_seen() -> str:
    """What torch sees of CUDA, for a message."""
    import torch
    built = (f'built with CUDA {torch.version.cuda}' if torch.version.cuda
             else 'built without CUDA (a CPU-only wheel)')
    visible = os.environ.get(VISIBLE_DEVICES)
    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    return (f'torch {torch.__version__} {built}, {VISIBLE_DEVICES}='
            f'{"unset" if visible is None else repr(visible)}, '
            f'{count} CUDA device(s) visible')


def _cuda_advice() -> str:
    """What to do for a GPU run on a machine where torch sees no GPU."""
    import torch
    if not torch.version.cuda:
        return ('install a CUDA build of torch in this environment '
                '(https://pytorch.org/get-started/locally/) or start the '
                'run with the environment that has one')
    return ('check the NVIDIA driver (nvidia-smi) and '
            f'{VISIBLE_DEVICES}')


def auto_device(device: Optional[str] = None) -> str:
    """``device``, or when it is None ``'cuda'`` if torch sees a GPU, else
    ``'cpu'``."""
    if device is not None:
        return device
    import torch
    return 'cuda' if torch.cuda.is_available() else 'cpu'


def resolve_device(launcher: Optional[str], device: Optional[str]) -> str:
    """The device of a run started with ``launcher`` (``'none'``,
    ``'pytorch'``, ``'slurm'``, ``'mpi'``) for the requested ``device``
    (``'cuda'``, ``'cpu'``, None): ``'cpu'`` is always granted, ``'cuda'``
    needs a visible GPU, None is :func:`auto_device`'s choice except that
    a launched run without a GPU is a :class:`ToolError`."""
    if device not in (None, ) + RUN_DEVICES:
        raise ToolError(f'--device must be one of {", ".join(RUN_DEVICES)}, '
                        f'got {device!r}')
    if device == 'cpu':
        return 'cpu'
    import torch
    if torch.cuda.is_available():
        return 'cuda'
    if device == 'cuda':
        raise ToolError(
            f'--device cuda: no CUDA device is visible ({cuda_seen()}); '
            f'{_cuda_advice()}, or use --device cpu')
    if launcher in (None, 'none'):
        return 'cpu'
    raise ToolError(
        f'--launcher {launcher} without --device: no CUDA device is visible '
        f'({cuda_seen()}), and a launched run does not fall back to the '
        'CPU unasked. For CPU processes (gloo) pass --device cpu; for GPUs '
        f'{_cuda_advice()}')
