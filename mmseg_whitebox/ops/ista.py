"""ISTA: the sparse-coding block of white-box encoders (CRATE eq. (17))::

    Z^{l+1} = ReLU(Z + eta D^T (Z - D Z) - eta lambda 1)

one proximal-gradient step towards a sparse code in a learnable dictionary
``D`` (``d x d``; ``eta = lambda = 0.1`` as CRATE). It replaces the MLP and
has no residual of its own.
"""
from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F


class ISTA(nn.Module):
    """One ISTA step on ``(B, N, d)`` tokens (returns the new tokens)."""

    def __init__(self, dim: int, step_size: float = 0.1,
                 lambd: float = 0.1) -> None:
        super().__init__()
        self.dim = dim
        self.step_size = step_size
        self.lambd = lambd
        self.weight = nn.Parameter(torch.empty(dim, dim))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """``kaiming_uniform_`` defaults, as CRATE and CBT draw ``D``."""
        nn.init.kaiming_uniform_(self.weight)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # D^T (x - D x) with tokens as rows: x D - x D^T D
        residual = F.linear(x, self.weight.t()) - F.linear(
            F.linear(x, self.weight), self.weight.t())
        return F.relu(x + self.step_size * residual -
                      self.step_size * self.lambd)

    def extra_repr(self) -> str:
        return (f'dim={self.dim}, step_size={self.step_size}, '
                f'lambd={self.lambd}')
