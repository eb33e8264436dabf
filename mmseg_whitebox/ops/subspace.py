"""What every white-box attention operator shares: subspace bases.

MSSA, TSSA and CBSA read tokens through ``K`` learnable bases
``U_k in R^{d x p}`` (CRATE Sec. 2.3, CBSA Sec. 2), one bias-free
``Linear(d -> K*p)``. The way back to ``R^d`` is the rigorous
``sum_k U_k (.)`` (tied) or the over-parameterised ``Linear(K*p -> d)``
that CRATE, ToST and CBSA use by default (CBSA paper, Sec. 4).
"""
from __future__ import annotations

import math
from typing import Optional

import torch
import torch.nn as nn
import torch.nn.functional as F

OUT_PROJ_MODES = ('linear', 'tied')
BASIS_INITS = ('trunc_normal', 'scaled_normal', 'orthogonal')


class SubspaceAttention(nn.Module):
    """Base class: bases ``proj`` (U) and the projection back.

    Args:
        dim: token width ``d``.
        num_heads: number of subspaces ``K``.
        head_dim: subspace dimension ``p``.
        out_proj: ``'linear'`` (``Linear(K*p, d)`` named ``out_proj``) or
            ``'tied'`` (back through ``U``).
        basis_init: ``'trunc_normal'`` (std ``init_std``, as mmseg and
            Segmenter), ``'scaled_normal'`` (N(0, 1/d), as DEPICT) or
            ``'orthogonal'`` (the paper's ``U_k in O(d, p)``; exact for
            ``K*p <= d``).
        init_std: std for ``'trunc_normal'`` and for ``out_proj``.
        proj_bias: a zero-initialised bias on ``U^T z`` (ToST's released
            code, :class:`~.tssa.TSSA`).
    """

    def __init__(self,
                 dim: int,
                 num_heads: int,
                 head_dim: int,
                 out_proj: str = 'linear',
                 basis_init: str = 'trunc_normal',
                 init_std: float = 0.02,
                 proj_bias: bool = False) -> None:
        super().__init__()
        if out_proj not in OUT_PROJ_MODES:
            raise ValueError(f'out_proj must be one of {OUT_PROJ_MODES}, '
                             f'got {out_proj!r}')
        if basis_init not in BASIS_INITS:
            raise ValueError(f'basis_init must be one of {BASIS_INITS}, '
                             f'got {basis_init!r}')
        if min(dim, num_heads, head_dim) < 1:
            raise ValueError('dim, num_heads and head_dim must be >= 1')
        self.dim = dim
        self.num_heads = num_heads
        self.head_dim = head_dim
        self.inner_dim = num_heads * head_dim
        self.scale = head_dim**-0.5
        self.out_proj_mode = out_proj
        self.basis_init = basis_init
        self.init_std = init_std
        self.proj = nn.Linear(dim, self.inner_dim, bias=proj_bias)
        self.out_proj = (nn.Linear(self.inner_dim, dim)
                         if out_proj == 'linear' else None)

    def reset_parameters(self) -> None:
        weight = self.proj.weight
        if self.basis_init == 'trunc_normal':
            nn.init.trunc_normal_(weight, std=self.init_std)
        elif self.basis_init == 'scaled_normal':
            nn.init.normal_(weight, std=1.0 / math.sqrt(self.dim))
        else:
            nn.init.orthogonal_(weight)
        if self.proj.bias is not None:
            nn.init.zeros_(self.proj.bias)
        if self.out_proj is not None:
            nn.init.trunc_normal_(self.out_proj.weight, std=self.init_std)
            nn.init.zeros_(self.out_proj.bias)

    def project(self, x: torch.Tensor) -> torch.Tensor:
        """``(B, N, d) -> (B, K, N, p)``: every ``U_k^T z``."""
        b, n, _ = x.shape
        z = self.proj(x).view(b, n, self.num_heads, self.head_dim)
        return z.transpose(1, 2)

    def back_weight(self) -> torch.Tensor:
        """``(K*p, d)``: ``U`` when tied, else the output linear's
        transposed weight."""
        if self.out_proj is None:
            return self.proj.weight
        return self.out_proj.weight.t()

    def back_per_subspace(self, z: torch.Tensor) -> torch.Tensor:
        """``(B, K, M, p) -> (B, K, M, d)``, per subspace: no sum over
        ``k``, no bias."""
        back = self.back_weight().view(self.num_heads, self.head_dim,
                                       self.dim)
        return torch.matmul(z, back)

    def project_back(self,
                     z: torch.Tensor,
                     gain: Optional[torch.Tensor] = None) -> torch.Tensor:
        """``(B, K, N, p) -> (B, N, d)`` through :meth:`back_weight`.
        ``gain`` (broadcastable to ``(B, K, 1, p)``) multiplies the
        coordinates first, folded into the weights (no ``N``-sized
        product)."""
        b, k, n, p = z.shape
        flat = z.transpose(1, 2).reshape(b, n, k * p)
        weight = self.back_weight()
        bias = None if self.out_proj is None else self.out_proj.bias
        if gain is None:
            return F.linear(flat, weight.t(), bias)
        gain = torch.broadcast_to(
            gain, torch.broadcast_shapes(gain.shape, (1, k, 1, p)))
        weight = gain.reshape(gain.shape[0], k * p, 1) * weight  # (B|1,Kp,d)
        if weight.shape[0] == 1:
            return F.linear(flat, weight[0].t(), bias)
        if bias is None:
            return torch.bmm(flat, weight)
        return torch.baddbmm(bias, flat, weight)

    def extra_repr(self) -> str:
        return (f'dim={self.dim}, num_heads={self.num_heads}, '
                f'head_dim={self.head_dim}, out_proj={self.out_proj_mode!r}')
