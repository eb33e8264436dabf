"""MSSA: multi-head subspace self-attention (CRATE, Yu et al. 2023),
eq. (11)-(12)::

    SSA(Z | U_k) = (U_k^T Z) softmax((U_k^T Z)^T (U_k^T Z))
    MSSA(Z | U)  = p/(N eps^2) [U_1 .. U_K] [SSA(Z | U_1); ..; SSA(Z | U_K)]

the residual step ``Z + MSSA(Z)`` of eq. (10); scaled by ``1/sqrt(p)``
inside the softmax, as published. DEPICT (Wen & Li, NeurIPS 2024) decodes
with it: tied projection back and a learnable step size absorbing
``p/(N eps^2)``; :class:`CrossMSSA` is DEPICT-CA's cross-attention form.
"""
from __future__ import annotations

from typing import Optional, Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F

from .subspace import SubspaceAttention


class MSSA(SubspaceAttention):
    """Multi-head subspace self-attention; returns the update (no residual).

    Args:
        dim, num_heads, head_dim, out_proj, basis_init, init_std: see
            :class:`SubspaceAttention` (defaults: DEPICT's).
        step_size: a learnable scalar on the attention output (DEPICT's
            ``step_size``, N(0, 1)).
    """

    def __init__(self,
                 dim: int,
                 num_heads: int = 3,
                 head_dim: int = 100,
                 out_proj: str = 'tied',
                 basis_init: str = 'scaled_normal',
                 init_std: float = 0.02,
                 step_size: bool = True) -> None:
        super().__init__(dim, num_heads, head_dim, out_proj, basis_init,
                         init_std)
        self.step_size = nn.Parameter(torch.empty(1)) if step_size else None
        self.reset_parameters()

    def reset_parameters(self) -> None:
        super().reset_parameters()
        if self.step_size is not None:
            nn.init.normal_(self.step_size)

    def _attend(self, query: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        out = F.scaled_dot_product_attention(query, w, w, scale=self.scale)
        return self.project_back(out, gain=self.step_size)

    def forward(self,
                x: torch.Tensor,
                hw: Optional[Tuple[int, int]] = None,
                grid_start: int = 0) -> torch.Tensor:
        """``(B, N, d)`` -> the update ``(B, N, d)``; ``hw`` and
        ``grid_start`` are unused."""
        w = self.project(x)
        return self._attend(w, w)


class CrossMSSA(MSSA):
    """MSSA with separate queries (DEPICT-CA): ``query`` tokens attend to
    ``x`` tokens, both read through the same bases ``U``."""

    def forward(self, query: torch.Tensor,  # type: ignore[override]
                x: torch.Tensor) -> torch.Tensor:
        """``query``: ``(B, M, d)``, ``x``: ``(B, N, d)`` -> ``(B, M, d)``."""
        return self._attend(self.project(query), self.project(x))
