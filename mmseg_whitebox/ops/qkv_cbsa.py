"""CBSA with query, key and value projections: a pretrained ViT's attention
made linear in the number of tokens (CBSA paper, Fig. 9 and Sec. 3.3).

The paper adapts pretrained ViTs by keeping the MHSA's ``W_q, W_k, W_v``
instead of one basis ``U_k``; every step of CBSA (eq. 5-8) reads the
tokens through the projection of its role, per head::

    R_x = sg(avgpool(X_grid)),  X in {Q, K, V}
    eq. (5):  R_x <- R_x + eta_k A X,     A = softmax_tokens(R_q K^T / sqrt(p))
    eq. (8):  C = softmax(R_q R_k^T / sqrt(p)) R_v
    update = kappa_k softmax(Q R_k^T / sqrt(p)) C

then the pretrained output projection. With distinct projections the
extraction weights cannot broadcast back (footnote 8), so tokens query the
representatives' keys. With the tokens as representatives the contraction
is the replaced MHSA's attention (Sec. 3.3); cost ``O(N m p K)``. Without
it: the paper's "CBSA without contraction", an Agent Attention.
"""
from __future__ import annotations

from typing import Optional, Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F

from .cbsa import GridSize, _pair, check_grid, pool_grid
from .mhsa import QKVProjection


class QKVCBSA(QKVProjection):
    """CBSA over query/key/value projections; returns the update.

    Args:
        dim, num_heads, head_dim, qkv_bias, init_std: as :class:`~.MHSA`
            (whose weights it takes over one to one).
        rep_grid: ``(rh, rw)`` representatives (8x8 at 224, as the paper).
        step_init: initial ``eta_k``, ``kappa_k`` (1: the released
            fine-tuning code's unit steps); ``None`` draws N(0, 1).
        rep_stop_grad: eq. (5)'s ``sg`` on the pooled representatives.
    """

    #: parameters a converted ViT checkpoint does not have
    added_parameters = ('eta', 'kappa')

    def __init__(self,
                 dim: int,
                 num_heads: int = 6,
                 head_dim: Optional[int] = None,
                 rep_grid: GridSize = (8, 8),
                 qkv_bias: bool = True,
                 step_init: Optional[float] = 1.0,
                 rep_stop_grad: bool = True,
                 init_std: float = 0.02) -> None:
        super().__init__(dim, num_heads, head_dim, qkv_bias, init_std)
        self.rep_grid = _pair(rep_grid, 'rep_grid')
        self.step_init = step_init
        self.rep_stop_grad = rep_stop_grad
        self.eta = nn.Parameter(torch.empty(num_heads, 1, 1))
        self.kappa = nn.Parameter(torch.empty(num_heads, 1, 1))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        super().reset_parameters()
        for step in (self.eta, self.kappa):
            if self.step_init is None:
                nn.init.normal_(step)
            else:
                nn.init.constant_(step, self.step_init)

    def contract(self, r_q: torch.Tensor, r_k: torch.Tensor,
                 r_v: torch.Tensor) -> torch.Tensor:
        """Eq. (8) with distinct projections: ``softmax(R_q R_k^T /
        sqrt(p)) R_v``, ``(B, K, m, p)``."""
        return F.scaled_dot_product_attention(r_q, r_k, r_v,
                                              scale=self.scale)

    def forward(self,
                x: torch.Tensor,
                hw: Tuple[int, int],
                grid_start: int = 0) -> torch.Tensor:
        """``(B, N, d)`` tokens whose ``H x W`` grid starts at
        ``x[:, grid_start]`` -> the update ``(B, N, d)``."""
        check_grid(x, hw, grid_start)
        q, k, v = self.project(x)
        qkv = torch.cat([q, k, v], dim=-1)  # (B, K, N, 3p): every role
        init = qkv.detach() if self.rep_stop_grad else qkv
        reps = pool_grid(init, hw, grid_start, self.rep_grid)
        # extraction, eq. (5): R_x + eta A X, A = softmax(R_q K^T) over tokens
        p = self.head_dim
        gathered = F.scaled_dot_product_attention(reps[..., :p], k, qkv,
                                                  scale=self.scale)
        r_q, r_k, r_v = (reps + self.eta * gathered).split(p, dim=-1)
        contraction = self.contract(r_q, r_k, r_v)
        # broadcast: tokens query the representatives' keys. Under autocast
        # the step sizes make r_k and the contraction float32: cast to q's
        # dtype (torch 2.1 refuses mixed dtypes)
        out = F.scaled_dot_product_attention(
            q, r_k.to(q.dtype), (self.kappa * contraction).to(q.dtype),
            scale=self.scale)
        return self.merge(out)

    def extra_repr(self) -> str:
        return super().extra_repr() + f', rep_grid={self.rep_grid}'
