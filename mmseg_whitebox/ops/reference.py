"""Straightforward versions of the operators, for tests and benchmarks.

Written the way the papers' listings write them, not the way the library
computes them: they serve as the baseline the library's operators are
checked and timed against (``tests/test_ops.py``,
``tools/analysis_tools/benchmark_decoders.py``).
"""
from __future__ import annotations

from typing import Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F


def softmax_attention(query: torch.Tensor, key: torch.Tensor,
                      value: torch.Tensor,
                      scale: float) -> Tuple[torch.Tensor, torch.Tensor]:
    """``softmax(q k^T * scale) v`` and the attention matrix."""
    attn = torch.softmax(query @ key.transpose(-1, -2) * scale, dim=-1)
    return attn @ value, attn


def straightforward_cbsa(op: nn.Module, x: torch.Tensor, h: int,
                         w: int) -> torch.Tensor:
    """CBSA on ``(B, N, d)`` tokens whose first ``h*w`` form the patch grid,
    as the CBSA paper's Appendix D listing writes it (generalised from a
    square grid to ``h x w``, with the stop-gradient of eq. 5), with the
    parameters of the library operator ``op`` (a :class:`~.CBSA`)."""
    b, n, _ = x.shape
    heads, p = op.num_heads, op.head_dim
    z = op.proj(x)  # U_k^T z for every subspace, (B, N, heads * p)
    grid = z[:, :h * w].reshape(b, h, w, heads * p).permute(0, 3, 1, 2)
    rep = F.adaptive_avg_pool2d(grid, op.rep_grid)
    rep = rep.reshape(b, heads * p, -1).permute(0, 2, 1)
    z = z.reshape(b, n, heads, p).permute(0, 2, 1, 3)
    rep = rep.reshape(b, -1, heads, p).permute(0, 2, 1, 3).detach()
    scale = p**-0.5
    rep_delta, attn = softmax_attention(rep, z, z, scale)  # extraction, eq. 5
    rep = rep + op.eta * rep_delta
    contraction, _ = softmax_attention(rep, rep, rep, scale)  # eq. 8
    delta = op.kappa * (attn.transpose(-1, -2) @ contraction)  # broadcast
    delta = delta.permute(0, 2, 1, 3).reshape(b, n, heads * p)
    if op.out_proj is None:  # tied: back through the same bases
        return delta @ op.proj.weight
    return op.out_proj(delta)
