"""Where a training or test run goes: ``cuda`` or ``cpu``, decided once,
before any work, and never silently the CPU for a launched run.

mmseg's tools train on the GPU whenever torch sees one. Under a launcher
(``--launcher pytorch``, ``slurm``, ``mpi``) a run without a visible CUDA
device is almost always a mistake (a CPU wheel of torch in the active
environment, a driver that does not match, an empty
``CUDA_VISIBLE_DEVICES``): :func:`resolve_device` stops it with one line
that says what torch sees, unless ``device='cpu'`` asks for CPU
processes. One process (``--launcher none``) keeps mmseg's rule: the GPU
when there is one, else the CPU.

``device='cpu'`` on a machine with GPUs must really run on the CPU, but
mmengine decides its device once, when it is imported: the run hides the
GPUs from this process while it runs
(:func:`mmseg_whitebox.compat.cuda_hidden`). (The launch scripts set
``CUDA_VISIBLE_DEVICES=''`` for ``--device cpu`` before Python starts,
which hides them at the source.)
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
    """What torch sees of CUDA, for a message: the torch version, whether
    it was built with CUDA, ``CUDA_VISIBLE_DEVICES`` and how many devices
    are visible."""
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
    """``device``, or when it is None the rule of every tool's
    ``--device``: ``'cuda'`` when torch sees a GPU, else ``'cpu'``
    (:func:`resolve_device` adds a launched run's refusal)."""
    if device is not None:
        return device
    import torch
    return 'cuda' if torch.cuda.is_available() else 'cpu'


def resolve_device(launcher: Optional[str], device: Optional[str]) -> str:
    """The device of a run started with ``launcher`` (``'none'``,
    ``'pytorch'``, ``'slurm'``, ``'mpi'``) when the user asked for
    ``device`` (``'cuda'``, ``'cpu'`` or None for the default).

    ``'cpu'`` is always granted. ``'cuda'`` needs a visible CUDA device.
    None is :func:`auto_device`'s choice (``'cuda'`` when one is visible,
    else ``'cpu'``) for one process; for a launched run without a GPU it is
    a :class:`ToolError` saying what torch sees and what to do, so that no
    launched run falls back to the CPU unasked."""
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
