"""The hidden-GPU fix of :mod:`mmseg_whitebox.compat`, applied by a
training or test run with ``device='cpu'`` on a machine with GPUs
(mmengine 0.10.7 and onedl-mmengine 0.10.12, torch 2.1 and 2.13
checked).

*What it patches.* ``torch.cuda.is_available``,
``torch.cuda.device_count`` and ``mmengine.device.utils.DEVICE``, inside
:func:`cuda_hidden` only.

*Why.* mmengine decides its device once, when it is imported
(``DEVICE``, from ``torch.cuda.is_available()``, after which torch has
read ``CUDA_VISIBLE_DEVICES`` for good), and moves the model there; torch
offers no way to hide a GPU from a process that has seen it.

*What it does.* Inside the block ``torch.cuda.is_available()`` answers
False, ``torch.cuda.device_count()`` 0, mmengine's device is ``cpu`` and
``CUDA_VISIBLE_DEVICES`` is empty for the processes the run starts; all
is restored afterwards. Nothing is changed where torch sees no GPU.
"""
from __future__ import annotations

import contextlib
import os
from typing import Iterator

from mmseg_whitebox.utils.device import VISIBLE_DEVICES


def _no_cuda() -> bool:
    return False


def _no_devices() -> int:
    return 0


@contextlib.contextmanager
def cuda_hidden() -> Iterator[None]:
    """Inside the block this process sees no GPU (module docstring)."""
    import torch
    if not torch.cuda.is_available():
        yield
        return
    import mmengine.device.utils as engine
    saved_env = os.environ.get(VISIBLE_DEVICES)
    saved = (torch.cuda.is_available, torch.cuda.device_count, engine.DEVICE)
    os.environ[VISIBLE_DEVICES] = ''
    torch.cuda.is_available, torch.cuda.device_count = _no_cuda, _no_devices
    engine.DEVICE = 'cpu'
    try:
        yield
    finally:
        (torch.cuda.is_available, torch.cuda.device_count,
         engine.DEVICE) = saved
        if saved_env is None:
            os.environ.pop(VISIBLE_DEVICES, None)
        else:
            os.environ[VISIBLE_DEVICES] = saved_env
