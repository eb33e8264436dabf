"""Mixed-precision training for ``tools/train.py --amp [--amp-dtype]``:
mmseg's ``--amp`` (``AmpOptimWrapper``, dynamic loss scale, float16), or
bfloat16 autocast (docs/training.md, "Mixed precision")."""
from __future__ import annotations

import logging
from typing import Any, Optional

import torch

from .tool_error import ToolError

#: the autocast dtypes ``--amp-dtype`` takes (``AmpOptimWrapper.dtype``)
AMP_DTYPES = ('float16', 'bfloat16')


def amp_device_problem(dtype: str) -> Optional[str]:
    """Why this machine cannot train in ``dtype``, or None: mmengine's
    ``AmpOptimWrapper`` refuses to start without an accelerator, and its
    autocast fails on a GPU without bfloat16 only at the first step."""
    if not torch.cuda.is_available():
        return ('--amp needs a CUDA GPU (mmengine\'s AmpOptimWrapper); '
                'train without it on CPU')
    if dtype == 'bfloat16' and not torch.cuda.is_bf16_supported():
        return ('this GPU has no bfloat16: use --amp-dtype float16 (with '
                'its dynamic loss scale)')
    return None


def enable_amp(cfg: Any, dtype: Optional[str] = None) -> None:
    """Switch ``cfg.optim_wrapper`` to ``AmpOptimWrapper`` autocasting in
    ``dtype`` (default float16) with a dynamic loss scale. An
    ``AmpOptimWrapper`` keeps its settings (and takes ``dtype`` if given);
    another wrapper type is refused, as mmseg refuses it."""
    if dtype is not None and dtype not in AMP_DTYPES:
        raise ToolError(f'--amp-dtype must be one of {AMP_DTYPES}, got '
                        f'{dtype!r}')
    wrapper = cfg.optim_wrapper
    kind = wrapper.get('type', 'OptimWrapper')
    if kind == 'AmpOptimWrapper':
        from mmengine.logging import print_log
        print_log('AMP is already enabled in the config',
                  logger='current', level=logging.WARNING)
        if dtype is not None:
            wrapper.dtype = dtype
        return
    if kind != 'OptimWrapper':
        raise ToolError('--amp works with optim_wrapper.type=OptimWrapper, '
                        f'not {kind}')
    wrapper.type = 'AmpOptimWrapper'
    wrapper.loss_scale = 'dynamic'
    wrapper.dtype = dtype or 'float16'
