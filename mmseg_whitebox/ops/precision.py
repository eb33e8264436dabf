"""Float32 statistics under a float16 autocast.

float16 overflows above 65504 (bfloat16 has float32's range), in the
forward pass, where the loss scaler does not catch it. Under a float16
autocast the operators therefore compute in float32: CBSA's
token-by-representative similarities (eq. 5) and its contraction among the
representatives, and TSSA's per-direction sums of squares over the tokens
(ToST eq. 10). Without autocast, or under a bfloat16 one, nothing changes.
MSSA's and CrossMSSA's ``N x N`` attention stay in float16 (a float32 one
would give up the fused kernels): on the math path of
``scaled_dot_product_attention`` they overflow for coordinates above about
55. tests/test_mixed_precision.py, tests/test_attention_overflow.py.
"""
from __future__ import annotations

import contextlib
import functools
import warnings
from typing import Callable, Iterator, Optional

import torch

from mmseg_whitebox.utils import capabilities


def autocast_dtype(device_type: str) -> Optional[torch.dtype]:
    """The dtype autocast runs ``device_type``'s products in, ``None``
    outside autocast, on every supported torch (torch < 2.4 has one query
    pair for CUDA and one for the CPU)."""
    if capabilities.AUTOCAST_DEVICE_QUERIES:
        if not torch.is_autocast_enabled(device_type):
            return None
        return torch.get_autocast_dtype(device_type)
    if device_type == 'cpu':
        return (torch.get_autocast_cpu_dtype()
                if torch.is_autocast_cpu_enabled() else None)
    if device_type == 'cuda':
        return (torch.get_autocast_gpu_dtype()
                if torch.is_autocast_enabled() else None)
    return None  # no autocast query for other devices before torch 2.4


@functools.lru_cache(maxsize=None)
def autocast_problem(device_type: str, dtype: torch.dtype) -> Optional[str]:
    """Why this torch cannot autocast ``device_type`` in ``dtype`` (torch
    2.1's CPU autocast takes only bfloat16), or None; probed once per
    pair."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter('ignore')  # torch 2.1 warns, then raises
            with torch.autocast(device_type, dtype=dtype):
                pass
    except RuntimeError:
        return (f'torch {capabilities.TORCH_VERSION} cannot autocast on '
                f'{device_type} in {str(dtype).rpartition(".")[2]} '
                '(CPU float16 autocast needs a newer torch than 2.1; the '
                'default stack\'s 2.13 has it): use bfloat16 there')
    return None


def float16_autocast(x: torch.Tensor) -> bool:
    """Whether ``x``'s device runs under a float16 autocast."""
    return autocast_dtype(x.device.type) == torch.float16


@contextlib.contextmanager
def autocast_off(x: torch.Tensor) -> Iterator[None]:
    """No autocast on ``x``'s device inside the block."""
    with torch.autocast(x.device.type, enabled=False):
        yield


def float32_under_float16(fn: Callable[..., torch.Tensor],
                          *tensors: torch.Tensor) -> torch.Tensor:
    """``fn(*tensors)``; under a float16 autocast on float32 copies with
    autocast off, the result cast back to the first tensor's dtype."""
    first = tensors[0]
    if not float16_autocast(first):
        return fn(*tensors)
    with autocast_off(first):
        out = fn(*(t.float() for t in tensors))
    return out.to(first.dtype)
