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
(``tests/test_mixed_precision.py`` shows the NaN without it). The softmax
attentions computed by ``F.scaled_dot_product_attention`` (MSSA, MHSA,
QKVCBSA, CBSA's contraction) need nothing: on the same inputs its fused
CPU kernel, which accumulates the similarities in float32, stays finite.
Without autocast, and under a bfloat16 one, the operators compute exactly
as before.
"""
from __future__ import annotations

import contextlib
from typing import Iterator

import torch


def float16_autocast(x: torch.Tensor) -> bool:
    """Whether ``x``'s device runs under a float16 autocast (then the
    operators keep the statistics above in float32)."""
    device = x.device.type
    return (torch.is_autocast_enabled(device)
            and torch.get_autocast_dtype(device) == torch.float16)


@contextlib.contextmanager
def autocast_off(x: torch.Tensor) -> Iterator[None]:
    """No autocast on ``x``'s device inside the block: products of float32
    tensors stay float32."""
    with torch.autocast(x.device.type, enabled=False):
        yield
