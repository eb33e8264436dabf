"""TSSA: token statistics self-attention (ToST, Wu et al., ICLR 2025).

ToST eq. (10) (the TSSA operator) and Algorithm 1 (Appendix E)::

    TSSA(Z | U) = -(tau / n) sum_k U_k D(Z, pi_k | U_k) U_k^T Z Diag(pi_k)

with ``pi`` the soft assignment of each token to the ``K`` subspaces
(softmax over subspaces of the token's normalised energy in each, with a
learnable temperature per subspace) and ``D`` a diagonal matrix
``1 / (1 + E_pi[(U_k^T z)^2])`` of per-direction second moments: tokens are
rescaled per channel, never compared pairwise, so cost is linear in ``N``.
The projection back is the over-parameterised ``Linear`` of the published
code (its ``to_out``). The released vision code (``tost_vision/tost.py``,
``AttentionTSSA``, built with ``qkv_bias=True`` by every ``tost_cab_*``
model) also adds a bias to ``U^T z``, which eq. (10) does not have:
``proj_bias=True`` gives it (the ToST encoder configs set it).
"""
from __future__ import annotations

from typing import Optional, Tuple

import torch
import torch.nn as nn

from . import precision
from .subspace import SubspaceAttention


class TSSA(SubspaceAttention):
    """Token statistics self-attention; returns the update (no residual).

    Args:
        dim, num_heads, head_dim, out_proj, basis_init, init_std: see
            :class:`SubspaceAttention`.
        eps: added to the membership mass, as the published code (1e-8).
        proj_bias: a bias on ``U^T z`` (the released ``qkv`` bias); off
            by default, as eq. (10).
    """

    def __init__(self,
                 dim: int,
                 num_heads: int = 3,
                 head_dim: int = 100,
                 out_proj: str = 'linear',
                 basis_init: str = 'trunc_normal',
                 init_std: float = 0.02,
                 eps: float = 1e-8,
                 proj_bias: bool = False) -> None:
        super().__init__(dim, num_heads, head_dim, out_proj, basis_init,
                         init_std, proj_bias)
        self.eps = eps
        self.temp = nn.Parameter(torch.empty(num_heads, 1))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        super().reset_parameters()
        nn.init.ones_(self.temp)

    def memberships(self, w: torch.Tensor,
                    w_squared: Optional[torch.Tensor] = None
                    ) -> torch.Tensor:
        """``pi``: ``(B, K, N)``, each token's soft assignment to the
        subspaces (sums to 1 over ``K``): a softmax over subspaces of the
        token's energy in each, with every direction normalised over the
        tokens first (the published ``normalize(w, dim=-2)``)."""
        if w_squared is None:
            w_squared = w * w
        # sum_p w_np^2 / ||w_:p||^2, the squared norms clamped as normalize
        inv_norm = w_squared.sum(-2, keepdim=True).clamp_min(1e-24)
        energy = torch.matmul(w_squared, inv_norm.reciprocal().transpose(
            -1, -2)).squeeze(-1)
        return torch.softmax(energy * self.temp, dim=1)

    def forward(self,
                x: torch.Tensor,
                hw: Optional[Tuple[int, int]] = None,
                grid_start: int = 0) -> torch.Tensor:
        """``x``: ``(B, N, d)`` -> the TSSA update ``(B, N, d)`` (token
        statistics need no grid: ``hw`` and ``grid_start`` are unused).

        Linear in ``N``: the statistics are ``p``-vectors per subspace, and
        the per-direction rescaling ``-1 / (1 + E_pi[(U_k^T z)^2])`` is
        folded into the projection back rather than applied to every
        token."""
        w = self.project(x)  # (B, K, N, p)
        if precision.float16_autocast(w):
            # float16 autocast: the squares and their sums over the tokens
            # overflow 65504 (coordinates above 256, or many tokens), so the
            # statistics are computed in float32; the memberships, in
            # [0, 1], are cast back. tests/test_mixed_precision.py
            with precision.autocast_off(w):
                pi, gain = self.statistics(w.float())
            pi = pi.to(w.dtype)
        else:
            pi, gain = self.statistics(w)
        return self.project_back(w * pi.unsqueeze(-1), gain=gain)

    def statistics(self, w: torch.Tensor
                   ) -> Tuple[torch.Tensor, torch.Tensor]:
        """The memberships ``pi`` ``(B, K, N)`` and the per-direction
        rescaling ``-1 / (1 + E_pi[(U_k^T z)^2])`` ``(B, K, 1, p)`` of the
        subspace coordinates ``w`` ``(B, K, N, p)``."""
        w_squared = w * w
        pi = self.memberships(w, w_squared)
        weights = pi / (pi.sum(-1, keepdim=True) + self.eps)
        # E_pi[(U_k^T z)^2] per direction: (B, K, 1, p)
        second_moment = torch.matmul(weights.unsqueeze(-2), w_squared)
        return pi, -1 / (1 + second_moment)
