"""MSSA: multi-head subspace self-attention (CRATE, Yu et al. 2023).

CRATE eq. (11)-(12)::

    SSA(Z | U_k)  = (U_k^T Z) softmax((U_k^T Z)^T (U_k^T Z))
    MSSA(Z | U)   = p/(N eps^2) [U_1, ..., U_K] [SSA(Z | U_1); ...; SSA(Z | U_K)]

and eq. (10), the residual gradient step ``Z + MSSA(Z)`` it unrolls. Query,
key and value are all ``U_k^T Z`` (scaled by ``1/sqrt(p)`` inside the softmax,
as the published code). DEPICT (Wen & Li, NeurIPS 2024) uses it as a
segmentation decoder with the tied projection back through ``U`` and one
learnable scalar step size (which absorbs ``p/(N eps^2)``);
:class:`CrossMSSA` is DEPICT-CA's cross-attention form, in which class
embeddings query the patch tokens through the same bases.
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
            :class:`SubspaceAttention`. Defaults follow DEPICT: tied
            projection, bases initialised N(0, 1/d).
        step_size: learn a scalar step size multiplying the attention
            output before the projection back (with the tied projection:
            the whole update; DEPICT's ``step_size``, initialised N(0, 1)
            as published).
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
        """``x``: ``(B, N, d)`` -> the MSSA update ``(B, N, d)``. Every
        token attends alike: the grid arguments of the operator interface
        (``hw``, ``grid_start``) are not needed."""
        w = self.project(x)
        return self._attend(w, w)


class CrossMSSA(MSSA):
    """MSSA with separate queries (DEPICT-CA): ``query`` tokens attend to
    ``x`` tokens, both read through the same bases ``U``."""

    def forward(self, query: torch.Tensor,  # type: ignore[override]
                x: torch.Tensor) -> torch.Tensor:
        """``query``: ``(B, M, d)``, ``x``: ``(B, N, d)`` -> ``(B, M, d)``."""
        return self._attend(self.project(query), self.project(x))
