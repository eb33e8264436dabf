"""CBSA: contract-and-broadcast self-attention (Wen, Huang & Li, NeurIPS
2025, "Towards Interpretable and Efficient Attention: Compressing All by
Contracting a Few").

A gradient step on the coding rate of a few *representatives* instead of
all ``N`` tokens, in every subspace ``k`` (CBSA paper, Sec. 3.2):

* initialisation: ``Q_ini = sg(avgpool(U_k^T Z))`` -- the projected patch
  tokens average-pooled over the token grid to an ``rh x rw`` grid of
  ``m`` representatives, with stop-gradient;
* extraction, eq. (5)::

      U_k^T Q = U_k^T Q_ini + eta_k U_k^T Z A_k,
      A_k = softmax over tokens of (U_k^T Z)^T (U_k^T Q_ini) / sqrt(p)

* contraction and broadcast, eq. (6)-(8): self-attention among the
  representatives (query = key = value = ``U_k^T Q``) gives their
  contraction directions, which ``A_k^T`` broadcasts back to every token::

      Z <- Z + kappa_k * [U_k^T Q softmax((U_k^T Q)^T (U_k^T Q) / sqrt(p))] A_k^T

``eta_k`` and ``kappa_k`` are learnable per subspace with free sign. Cost is
``O(N m p K)``: linear in the number of tokens for a fixed grid of
representatives. The projection back is the over-parameterised linear map
(default) or, for the rigorous variant (the paper's CBT-dagger), the same
bases ``U`` (``out_proj='tied'``).

Unlike the published listing, the token grid may be any ``H x W`` (not only
square) and any number of extra non-grid tokens (class embeddings, a CLS
token) may sit before or after it: they take part in extraction and
receive the broadcast, but not in the pooled initialisation.
"""
from __future__ import annotations

from typing import Optional, Tuple, Union

import torch
import torch.nn as nn
import torch.nn.functional as F

from .subspace import SubspaceAttention, per_subspace_matmul, sums_in_place

GridSize = Union[int, Tuple[int, int]]


def _pair(value: GridSize) -> Tuple[int, int]:
    if isinstance(value, int):
        return value, value
    h, w = value
    return int(h), int(w)


class CBSA(SubspaceAttention):
    """Contract-and-broadcast self-attention; returns the update.

    Args:
        dim, num_heads, head_dim, out_proj, basis_init, init_std: see
            :class:`SubspaceAttention` (defaults: 3 heads x 100 dims, the
            over-parameterised output, bases initialised as the published
            decoder's Linear layers).
        rep_grid: ``(rh, rw)`` grid of representatives per subspace
            (``m = rh * rw``; the published decoder uses 10x10, the
            classification model 8x8).
    """

    #: ``forward`` can return ``residual + update`` itself (see there)
    accepts_residual = True

    def __init__(self,
                 dim: int,
                 num_heads: int = 3,
                 head_dim: int = 100,
                 rep_grid: GridSize = (10, 10),
                 out_proj: str = 'linear',
                 basis_init: str = 'trunc_normal',
                 init_std: float = 0.02) -> None:
        super().__init__(dim, num_heads, head_dim, out_proj, basis_init,
                         init_std)
        self.rep_grid = _pair(rep_grid)
        if min(self.rep_grid) < 1:
            raise ValueError(f'rep_grid must be positive, got {rep_grid}')
        self.eta = nn.Parameter(torch.empty(num_heads, 1, 1))
        self.kappa = nn.Parameter(torch.empty(num_heads, 1, 1))
        self.reset_parameters()

    @property
    def num_representatives(self) -> int:
        return self.rep_grid[0] * self.rep_grid[1]

    def reset_parameters(self) -> None:
        super().reset_parameters()
        # step sizes: standard normal, sign free, as published
        nn.init.normal_(self.eta)
        nn.init.normal_(self.kappa)

    def initial_representatives(self, w: torch.Tensor, hw: Tuple[int, int],
                                grid_start: int) -> torch.Tensor:
        """``sg(avgpool(U^T Z_grid))``: ``(B, K, m, p)``."""
        b, k, _, p = w.shape
        h, wd = hw
        # (B, N, K, p) is how project() lays w out: the grid slice then is
        # an (H, W, K*p) channels-last image, pooled without a copy
        grid = w.detach().transpose(1, 2)[:, grid_start:grid_start + h * wd]
        grid = grid.reshape(b, h, wd, k * p).permute(0, 3, 1, 2)
        rep = F.adaptive_avg_pool2d(grid, self.rep_grid)  # (B, K*p, rh, rw)
        return rep.reshape(b, k, p, -1).transpose(-1, -2)

    def forward(self,
                x: torch.Tensor,
                hw: Tuple[int, int],
                grid_start: int = 0,
                return_attn: bool = False,
                residual: Optional[torch.Tensor] = None
                ) -> Union[torch.Tensor, Tuple[torch.Tensor, torch.Tensor]]:
        """Apply CBSA.

        Args:
            x: ``(B, N, d)`` tokens: an ``H x W`` grid of patch tokens in
                row-major order at ``x[:, grid_start:grid_start + H*W]``,
                any other tokens around it.
            hw: the grid size ``(H, W)``.
            grid_start: index of the first grid token.
            return_attn: also return the extraction attention ``A``,
                ``(B, K, m, N)`` (which tokens each representative gathers).
            residual: ``(B, N, d)``: return ``residual + update`` instead
                of the update. For inference, the last product sums into
                ``residual``'s memory, which is overwritten (as by ``+=``):
                no token-sized output buffer, no separate passes for the
                sum and the output bias.

        Returns:
            The update ``(B, N, d)`` (or ``residual + update``; and ``A``).

        Every product runs over all subspaces at once (for inference on a
        CPU, one multi-threaded product per subspace:
        :func:`~mmseg_whitebox.ops.subspace.per_subspace_matmul`), and
        nothing larger than ``m x N`` per subspace is formed: the
        extraction weights are materialised once (linear in ``N``),
        unnormalised, and serve the extraction, the broadcast and the
        backward pass; the softmax normalisation, scale factors and step
        sizes are applied to ``m``-sized tensors, never to ``N``-sized
        ones; the broadcast and the projection back are one product
        (:meth:`~SubspaceAttention.broadcast_back`).
        """
        b, n, _ = x.shape
        h, wd = hw
        if grid_start < 0 or grid_start + h * wd > n:
            raise ValueError(
                f'a {h}x{wd} token grid starting at {grid_start} does not '
                f'fit in {n} tokens')
        if residual is not None and residual.shape != x.shape:
            raise ValueError(f'residual has shape {tuple(residual.shape)}, '
                             f'the tokens {tuple(x.shape)}')
        k, m = self.num_heads, self.num_representatives
        w = self.project(x)  # (B, K, N, p)
        rep0 = self.initial_representatives(w, (h, wd), grid_start)
        # extraction, eq. (5): A = E / s (B, K, m, N), softmax over tokens,
        # kept unnormalised: 1/s is applied to the m-sized products
        # instead, so A costs one N-sized buffer, written in place. When
        # the residual is summed in place, that buffer gets a row of ones
        # per image, which gathers the output bias in the broadcast
        in_place = residual is not None and sums_in_place(residual, w)
        gather = logits = None
        if in_place:
            gather = w.new_empty(b, k * m + int(self.out_proj is not None),
                                 n)
            gather[:, k * m:] = 1
            logits = gather[:, :k * m].view(b, k, m, n)
        logits = per_subspace_matmul(rep0 * self.scale,
                                     w.transpose(-1, -2), out=logits)
        shift = logits.detach().amax(dim=-1, keepdim=True)
        weights = logits.sub_(shift).exp_()  # E, (B, K, m, N)
        # (summed in at least fp32, also under fp16/bf16 autocast)
        sum_dtype = torch.promote_types(weights.dtype, torch.float32)
        inv_sum = weights.sum(dim=-1, keepdim=True,
                              dtype=sum_dtype).reciprocal()
        rep = rep0 + (self.eta * inv_sum) * per_subspace_matmul(weights, w)
        # contraction among the m representatives, eq. (8)
        contraction = F.scaled_dot_product_attention(
            rep, rep, rep, scale=self.scale)
        # broadcast with the transposed extraction attention, and back
        values = ((self.kappa * inv_sum) * contraction).to(weights.dtype)
        if gather is None:
            gather = weights.reshape(b, k * m, n)
        out = self.broadcast_back(gather, values, residual)
        if not return_attn:
            return out
        return out, weights * inv_sum.to(weights.dtype)

    def extra_repr(self) -> str:
        return super().extra_repr() + f', rep_grid={self.rep_grid}'

