"""Float32 statistics under a float16 autocast.

Mixed-precision training (mmengine's ``AmpOptimWrapper``, ``torch.autocast``)
runs matrix products in the autocast dtype. bfloat16 has float32's exponent
range; float16 overflows above 65504. Two white-box statistics exceed that
long before the features look unusual, and their overflow is not caught by
the loss scaler (it happens in the forward pass):

* CBSA's token-by-representative similarities (``U_k^T Q_ini`` against
  ``U_k^T Z``, eq. 5): subspace coordinates of a few hundred give
  similarities past 65504, ``inf`` in the softmax and NaN attention;
* TSSA's per-direction sums of squares over the tokens (the normalisation
  of the memberships and the second moments, ToST eq. 10): coordinates
  above 256, or sums over many tokens, overflow.

Those two are computed in float32 under a float16 autocast
(``tests/test_mixed_precision.py`` shows the NaN without it), and so is
CBSA's contraction among its representatives (below).

The softmax attentions computed by ``F.scaled_dot_product_attention``
(MSSA, CrossMSSA, MHSA, QKVCBSA, CBSA's contraction) depend on the
backend it picks. The fused kernels (CPU flash; CUDA flash,
memory-efficient, cuDNN) accumulate the similarities in float32. The math
path (CUDA's math kernel, taken where no fused kernel takes the shapes or
when asked for; CPU attention on torch 2.1) forms ``Q K^T`` in the
inputs' dtype after scaling ``q`` and ``k`` by ``sqrt(scale)`` each,
unless torch >= 2.5 upcasts it to float32 (its default; not with
``torch.backends.cuda.allow_fp16_bf16_reduction_math_sdp(True)``). So a
similarity overflows there only when the scaled logit itself passes
65504. ``tests/test_attention_overflow.py`` runs every operator on that
path in float16 and bfloat16, with tokens whose query coordinates have a
mean square of 1e2 and 1e3 (features of a few tens; unscaled ``q . k``
up to about 1e5): everything stays finite but CBSA's contraction, whose
representatives (pooled plus ``eta`` times gathered coordinates) reach
self-similarities of 2e4-8e4, hence its float32 step (an ``m x m``
product). MSSA's self-similarities ``|U_k^T z|^2 / sqrt(p)`` pass 65504
from a mean square between 3e3 and 5e3 (coordinates of 55 to 70), and
CrossMSSA's where its queries are as close to the tokens: on that path
both then overflow in float16 (the fused CPU kernel and bfloat16 do not). A
limit left as it is: their ``N x N`` attention in float32 would give up
the fused float16 kernels wherever they run.
Without autocast, and under a bfloat16 one, the operators compute exactly
as before.
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
    outside autocast. One query for every torch the package supports:
    torch 2.4 took a device type in ``is_autocast_enabled`` and added
    ``get_autocast_dtype``; torch 2.1-2.3 have one function pair for CUDA
    and one for the CPU (and deprecate nothing)."""
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
    """Why this torch cannot autocast ``device_type`` in ``dtype``, or None.
    torch 2.1's CPU autocast takes only bfloat16 (its ``__enter__`` raises
    a RuntimeError for float16); the default stack's torch takes both.
    Probed once per pair (the benchmarks ask before every timed call)."""
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
    """Whether ``x``'s device runs under a float16 autocast (then the
    operators keep the statistics above in float32)."""
    return autocast_dtype(x.device.type) == torch.float16


@contextlib.contextmanager
def autocast_off(x: torch.Tensor) -> Iterator[None]:
    """No autocast on ``x``'s device inside the block: products of float32
    tensors stay float32."""
    with torch.autocast(x.device.type, enabled=False):
        yield


def float32_under_float16(fn: Callable[..., torch.Tensor],
                          *tensors: torch.Tensor) -> torch.Tensor:
    """``fn(*tensors)``, but under a float16 autocast on float32 copies
    with autocast off, the result cast back to the first tensor's dtype:
    a product that could pass 65504 in float16 stays finite."""
    first = tensors[0]
    if not float16_autocast(first):
        return fn(*tensors)
    with autocast_off(first):
        out = fn(*(t.float() for t in tensors))
    return out.to(first.dtype)
