"""TSSA: token statistics self-attention (ToST, Wu et al., ICLR 2025),
eq. (10) and Algorithm 1 (Appendix E)::

    TSSA(Z | U) = -(tau / n) sum_k U_k D(Z, pi_k | U_k) U_k^T Z Diag(pi_k)

``pi``: each token's soft assignment to the ``K`` subspaces (softmax of its
normalised energy in each, learnable temperature per subspace);
``D = 1 / (1 + E_pi[(U_k^T z)^2])`` per direction. Tokens are rescaled,
never compared pairwise: linear in ``N``. The way back is the published
``to_out`` Linear. The released vision code (``AttentionTSSA``,
``qkv_bias=True``) also biases ``U^T z``, which eq. (10) does not:
``proj_bias=True`` (the ToST encoder configs).
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
        eps: added to the membership mass (published: 1e-8).
        proj_bias: the released code's bias on ``U^T z`` (module doc).
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
        """``pi``: ``(B, K, N)``, a softmax over subspaces of each token's
        energy, every direction normalised over the tokens first (the
        published ``normalize(w, dim=-2)``)."""
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
        """``(B, N, d)`` -> the update ``(B, N, d)``; ``hw`` and
        ``grid_start`` are unused. The rescaling is folded into the
        projection back, not applied to every token."""
        w = self.project(x)  # (B, K, N, p)
        if precision.float16_autocast(w):
            # the sums of squares overflow float16 (module precision)
            with precision.autocast_off(w):
                pi, gain = self.statistics(w.float())
            pi = pi.to(w.dtype)
        else:
            pi, gain = self.statistics(w)
        return self.project_back(w * pi.unsqueeze(-1), gain=gain)

    def statistics(self, w: torch.Tensor
                   ) -> Tuple[torch.Tensor, torch.Tensor]:
        """``pi`` ``(B, K, N)`` and the rescaling ``-1 / (1 +
        E_pi[(U_k^T z)^2])`` ``(B, K, 1, p)`` of ``w`` ``(B, K, N, p)``."""
        w_squared = w * w
        pi = self.memberships(w, w_squared)
        weights = pi / (pi.sum(-1, keepdim=True) + self.eps)
        # E_pi[(U_k^T z)^2] per direction: (B, K, 1, p)
        second_moment = torch.matmul(weights.unsqueeze(-2), w_squared)
        return pi, -1 / (1 + second_moment)
