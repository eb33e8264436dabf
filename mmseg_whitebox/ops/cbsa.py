"""CBSA: contract-and-broadcast self-attention (Wen, Huang & Li, NeurIPS
2025, "Towards Interpretable and Efficient Attention: Compressing All by
Contracting a Few"), Sec. 3.2.

A gradient step on the coding rate of ``m`` representatives instead of all
``N`` tokens, per subspace ``k``, with ``Q_ini = sg(avgpool(U_k^T Z))``
(the token grid pooled to ``rh x rw``)::

    eq. (5):    U_k^T Q = U_k^T Q_ini + eta_k U_k^T Z A_k,
                A_k = softmax_tokens((U_k^T Z)^T U_k^T Q_ini / sqrt(p))
    eq. (6)-(8): C_k = U_k^T Q softmax((U_k^T Q)^T U_k^T Q / sqrt(p))
                Z <- Z + sum_k kappa_k U_k C_k A_k^T

``eta_k``, ``kappa_k`` are learnable with free sign; cost ``O(N m p K)``.
The way back is the over-parameterised linear (default) or the bases ``U``
(``out_proj='tied'``, the paper's CBT-dagger). Unlike the published
listing, the grid may be any ``H x W`` and extra tokens (class embeddings,
CLS) may sit around it: they take part in extraction and receive the
broadcast, but not in the pooling.
"""
from __future__ import annotations

from typing import Tuple, Union

import torch
import torch.nn as nn
import torch.nn.functional as F

from mmseg_whitebox.utils.tool_error import InputError
from . import export, precision
from .subspace import SubspaceAttention

GridSize = Union[int, Tuple[int, int]]
REP_POOLS = ('grid', 'leading')


def _pair(value: GridSize, name: str) -> Tuple[int, int]:
    """``value`` as a positive ``(h, w)`` grid size."""
    h, w = (value, value) if isinstance(value, int) else value
    if min(int(h), int(w)) < 1:
        raise ValueError(f'{name} must be positive, got {value}')
    return int(h), int(w)


def check_grid(x: torch.Tensor, hw: Tuple[int, int],
               grid_start: int) -> None:
    """Raise unless an ``H x W`` token grid starting at token
    ``grid_start`` fits in the ``(B, N, d)`` tokens ``x``."""
    h, w = hw
    if grid_start < 0 or grid_start + h * w > x.shape[1]:
        raise ValueError(f'a {h}x{w} token grid starting at {grid_start} '
                         f'does not fit in {x.shape[1]} tokens')


def pool_grid(z: torch.Tensor, hw: Tuple[int, int], grid_start: int,
              rep_grid: Tuple[int, int],
              setting: str = 'rep_grid') -> torch.Tensor:
    """Average-pool the ``H x W`` grid of ``(B, K, N, p)`` coordinates
    to ``(B, K, rh * rw, p)``: CBSA's initial representatives, MiTA's
    landmarks. ``setting`` names the option in the error message."""
    b, k, _, p = z.shape
    h, w = hw
    if rep_grid[0] > h or rep_grid[1] > w:
        # adaptive pooling would silently copy tokens into several cells
        raise InputError(
            f'{setting} {tuple(rep_grid)} is larger than the {h}x{w} token '
            f'grid: use a {setting} of at most the token grid (e.g. '
            f'{setting}=({min(rep_grid[0], h)}, {min(rep_grid[1], w)})) or '
            'larger inputs (token grid = input size / patch size)')
    # z is laid out (B, N, K, p): the grid is a channels-last image, no copy
    grid = z.transpose(1, 2)[:, grid_start:grid_start + h * w]
    grid = grid.reshape(b, h, w, k * p).permute(0, 3, 1, 2)
    if export.exporting():  # the same average, in ONNX-exportable form
        rep = export.adaptive_avg_pool2d(grid, rep_grid)
    else:
        rep = F.adaptive_avg_pool2d(grid, rep_grid)  # (B, K*p, rh, rw)
    return rep.reshape(b, k, p, -1).transpose(-1, -2)


class _SoftmaxOverOwnBuffer(torch.autograd.Function):
    """``softmax(x, dim=-1)`` written over ``x``, a fresh product nothing
    else needs: similarities and attention share one ``(B, m, N)``
    buffer."""

    @staticmethod
    def forward(ctx, x: torch.Tensor) -> torch.Tensor:  # type: ignore
        torch.softmax(x, dim=-1, out=x)
        ctx.mark_dirty(x)
        ctx.save_for_backward(x)
        return x

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> torch.Tensor:  # type: ignore
        attn, = ctx.saved_tensors
        return torch._softmax_backward_data(grad, attn, -1, attn.dtype)


def _softmax_in_place(x: torch.Tensor) -> torch.Tensor:
    """In place in eager mode; plain under ``torch.compile`` (dynamo cannot
    trace ``mark_dirty``)."""
    if export.compiling():
        return torch.softmax(x, dim=-1)
    return _SoftmaxOverOwnBuffer.apply(x)


class CBSA(SubspaceAttention):
    """Contract-and-broadcast self-attention; returns the update.

    Args:
        dim, num_heads, head_dim, out_proj, basis_init, init_std: see
            :class:`SubspaceAttention`.
        rep_grid: ``(rh, rw)`` representatives per subspace (published
            decoder 10x10, classification model 8x8).
        rep_stop_grad: eq. (5)'s ``sg`` on the pooled representatives
            (the Appendix D listing and released code have none; only
            gradients differ).
        rep_pool: ``'grid'`` pools the patch grid, ``'leading'`` the first
            ``H x W`` tokens (the released classification code).
    """

    def __init__(self,
                 dim: int,
                 num_heads: int = 3,
                 head_dim: int = 100,
                 rep_grid: GridSize = (10, 10),
                 out_proj: str = 'linear',
                 basis_init: str = 'trunc_normal',
                 init_std: float = 0.02,
                 rep_stop_grad: bool = True,
                 rep_pool: str = 'grid') -> None:
        super().__init__(dim, num_heads, head_dim, out_proj, basis_init,
                         init_std)
        if rep_pool not in REP_POOLS:
            raise ValueError(f'rep_pool must be one of {REP_POOLS}, got '
                             f'{rep_pool!r}')
        self.rep_grid = _pair(rep_grid, 'rep_grid')
        self.rep_stop_grad = rep_stop_grad
        self.rep_pool = rep_pool
        self.eta = nn.Parameter(torch.empty(num_heads, 1, 1))
        self.kappa = nn.Parameter(torch.empty(num_heads, 1, 1))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        super().reset_parameters()
        # step sizes: standard normal, sign free, as published
        nn.init.normal_(self.eta)
        nn.init.normal_(self.kappa)

    def initial_representatives(self, z: torch.Tensor, hw: Tuple[int, int],
                                grid_start: int) -> torch.Tensor:
        """``sg(avgpool(U^T Z_grid))``: ``(B, K, m, p)``."""
        if self.rep_stop_grad:
            z = z.detach()
        if self.rep_pool == 'leading':
            grid_start = 0
        return pool_grid(z, hw, grid_start, self.rep_grid)

    def forward(self,
                x: torch.Tensor,
                hw: Tuple[int, int],
                grid_start: int = 0,
                return_attn: bool = False
                ) -> Union[torch.Tensor, Tuple[torch.Tensor, torch.Tensor]]:
        """``(B, N, d)`` tokens whose ``H x W`` grid starts at
        ``x[:, grid_start]`` -> the update ``(B, N, d)`` and, with
        ``return_attn``, the extraction attention ``A^T`` ``(B, K, m, N)``.
        """
        check_grid(x, hw, grid_start)
        k = self.num_heads
        z = self.project(x)  # U_k^T Z, (B, K, N, p)
        q_ini = self.initial_representatives(z, hw, grid_start)
        # extraction, eq. (5), subspace by subspace (a batched product over
        # 3 subspaces leaves threads idle)
        attn_t = [self.extraction_attention(q_ini[:, i], z[:, i])
                  for i in range(k)]  # A_k^T, (B, m, N) each
        extracted = torch.stack([a @ z[:, i] for i, a in enumerate(attn_t)],
                                dim=1)
        q = q_ini + self.eta * extracted
        contraction = self.contract(q)
        # broadcast, eq. (6): the contractions are taken back to R^d first,
        # then summed into (B, N, d): no N x K*p intermediate
        values = self.back_per_subspace(self.kappa * contraction)  # B,K,m,d
        if self.out_proj is None:
            update = attn_t[0].mT @ values[:, 0]
        else:  # + the output bias
            update = torch.baddbmm(self.out_proj.bias, attn_t[0].mT,
                                   values[:, 0])
        for i in range(1, k):
            update = update.baddbmm_(attn_t[i].mT, values[:, i])
        if return_attn:
            return update, torch.stack(attn_t, dim=1)
        return update

    def extraction_attention(self, q_ini: torch.Tensor,
                             z: torch.Tensor) -> torch.Tensor:
        """``A_k^T`` of eq. (5) for one subspace, ``(B, m, N)``, from
        ``(B, m, p)`` representatives and ``(B, N, p)`` coordinates."""
        if not precision.float16_autocast(z):
            return _softmax_in_place((q_ini * self.scale) @ z.mT)
        # float16 would overflow (module precision): float32 similarities,
        # shifted by their row maximum (<= 0) and cast back
        with precision.autocast_off(z):
            logits = (q_ini.float() * self.scale) @ z.float().mT
            shifted = logits - logits.detach().amax(-1, keepdim=True)
            return _softmax_in_place(shifted.to(z.dtype))

    def contract(self, q: torch.Tensor) -> torch.Tensor:
        """Eq. (8) on ``(B, K, m, p)`` representatives: self-attention with
        query = key = value = ``U_k^T Q`` (MSSA's with the tokens as
        representatives, Sec. 3.3); float32 under a float16 autocast
        (module precision)."""
        return precision.float32_under_float16(
            lambda r: F.scaled_dot_product_attention(r, r, r,
                                                     scale=self.scale), q)

    def extra_repr(self) -> str:
        text = super().extra_repr() + f', rep_grid={self.rep_grid}'
        if self.rep_pool != 'grid':
            text += f', rep_pool={self.rep_pool!r}'
        return text
