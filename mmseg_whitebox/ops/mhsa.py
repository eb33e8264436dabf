"""MHSA: standard multi-head softmax self-attention (Vaswani et al. 2017;
ViT) with the white-box operator interface: the quadratic baseline, and
standard layers in white-box encoders. Parameter names follow timm's ViT
(``qkv``; ``out_proj`` for ``proj``), so pretrained weights map one to one
(:mod:`mmseg_whitebox.converters.vit`).
"""
from __future__ import annotations

from typing import Optional, Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F


class QKVProjection(nn.Module):
    """Query, key and value in one ``Linear(d -> 3*K*p)`` (timm's and
    mmseg's layout) and the output projection."""

    def __init__(self,
                 dim: int,
                 num_heads: int = 6,
                 head_dim: Optional[int] = None,
                 qkv_bias: bool = True,
                 init_std: float = 0.02) -> None:
        super().__init__()
        head_dim = head_dim or dim // num_heads
        if min(dim, num_heads, head_dim) < 1:
            raise ValueError('dim, num_heads and head_dim must be >= 1')
        self.dim = dim
        self.num_heads = num_heads
        self.head_dim = head_dim
        self.scale = head_dim**-0.5
        self.init_std = init_std
        self.qkv = nn.Linear(dim, 3 * num_heads * head_dim, bias=qkv_bias)
        self.out_proj = nn.Linear(num_heads * head_dim, dim)

    def reset_parameters(self) -> None:
        for linear in (self.qkv, self.out_proj):
            nn.init.trunc_normal_(linear.weight, std=self.init_std)
            if linear.bias is not None:
                nn.init.zeros_(linear.bias)

    def project(self, x: torch.Tensor
                ) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(B, N, d)`` -> query, key, value, each ``(B, K, N, p)``."""
        b, n, _ = x.shape
        qkv = self.qkv(x).view(b, n, 3, self.num_heads, self.head_dim)
        q, k, v = qkv.permute(2, 0, 3, 1, 4).unbind(0)
        return q, k, v

    def merge(self, out: torch.Tensor) -> torch.Tensor:
        """``(B, K, N, p)`` -> ``(B, N, d)`` through the output projection."""
        b, k, n, p = out.shape
        return self.out_proj(out.transpose(1, 2).reshape(b, n, k * p))

    def extra_repr(self) -> str:
        return (f'dim={self.dim}, num_heads={self.num_heads}, '
                f'head_dim={self.head_dim}')


class MHSA(QKVProjection):
    """Multi-head softmax self-attention; returns the update.

    Args:
        dim: token width ``d``.
        num_heads: ``K``.
        head_dim: ``p`` (default ``d // K``).
        qkv_bias: biases on the query/key/value projection (as timm).
        init_std: std of the truncated-normal initialisation.
    """

    def __init__(self,
                 dim: int,
                 num_heads: int = 6,
                 head_dim: Optional[int] = None,
                 qkv_bias: bool = True,
                 init_std: float = 0.02) -> None:
        super().__init__(dim, num_heads, head_dim, qkv_bias, init_std)
        self.reset_parameters()

    def forward(self,
                x: torch.Tensor,
                hw: Optional[Tuple[int, int]] = None,
                grid_start: int = 0) -> torch.Tensor:
        """``(B, N, d)`` -> ``(B, N, d)``; ``hw``, ``grid_start`` unused."""
        q, k, v = self.project(x)
        return self.merge(
            F.scaled_dot_product_attention(q, k, v, scale=self.scale))
