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
  contraction directions, which ``A_k^T`` broadcasts back to every token,
  and ``U_k`` takes back to ``R^d``::

      C_k = U_k^T Q softmax((U_k^T Q)^T (U_k^T Q) / sqrt(p))
      Z <- Z + sum_k kappa_k U_k C_k A_k^T

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

from typing import Tuple, Union

import torch
import torch.nn as nn
import torch.nn.functional as F

from mmseg_whitebox.utils.tool_error import InputError
from . import export, precision
from .subspace import SubspaceAttention

GridSize = Union[int, Tuple[int, int]]
REP_POOLS = ('grid', 'leading')


def _pair(value: GridSize) -> Tuple[int, int]:
    if isinstance(value, int):
        return value, value
    h, w = value
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
    """Average-pool the ``H x W`` token grid of ``(B, K, N, p)`` subspace
    coordinates (starting at token ``grid_start``) to ``rep_grid``:
    ``(B, K, rh * rw, p)``, the initial representatives (CBSA) or the
    landmarks (MiTA); ``setting`` names the operator's option for it in
    the error a grid larger than the tokens' gets."""
    b, k, _, p = z.shape
    h, w = hw
    if rep_grid[0] > h or rep_grid[1] > w:
        # adaptive pooling would silently copy tokens into several cells;
        # the input is too small for the config: a user's error
        raise InputError(
            f'{setting} {tuple(rep_grid)} is larger than the {h}x{w} token '
            f'grid: use a {setting} of at most the token grid (e.g. '
            f'{setting}=({min(rep_grid[0], h)}, {min(rep_grid[1], w)})) or '
            'larger inputs (token grid = input size / patch size)')
    # (B, N, K, p) is how the operators lay z out: the grid slice then is
    # an (H, W, K*p) channels-last image, pooled without a copy
    grid = z.transpose(1, 2)[:, grid_start:grid_start + h * w]
    grid = grid.reshape(b, h, w, k * p).permute(0, 3, 1, 2)
    if export.exporting():  # the same average, in ONNX-exportable form
        rep = export.adaptive_avg_pool2d(grid, rep_grid)
    else:
        rep = F.adaptive_avg_pool2d(grid, rep_grid)  # (B, K*p, rh, rw)
    return rep.reshape(b, k, p, -1).transpose(-1, -2)


class _SoftmaxOverOwnBuffer(torch.autograd.Function):
    """``softmax(x, dim=-1)`` written over ``x``, a fresh product that
    nothing else holds or needs: a subspace's similarities and its
    attention share one ``(B, m, N)`` buffer instead of two. The gradient
    is softmax's, which needs only the output."""

    @staticmethod
    def forward(ctx, x: torch.Tensor) -> torch.Tensor:  # type: ignore
        torch.softmax(x, dim=-1, out=x)
        ctx.mark_dirty(x)
        ctx.save_for_backward(x)
        return x

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> torch.Tensor:  # type: ignore
        attn, = ctx.saved_tensors
        # torch.softmax's own backward kernel (one fused pass)
        return torch._softmax_backward_data(grad, attn, -1, attn.dtype)


def _softmax_in_place(x: torch.Tensor) -> torch.Tensor:
    """``softmax(x, dim=-1)`` of a fresh product, over its own buffer in
    eager mode; under ``torch.compile`` the plain softmax (dynamo cannot
    trace ``mark_dirty``; the compiler plans the buffers itself)."""
    if export.compiling():
        return torch.softmax(x, dim=-1)
    return _SoftmaxOverOwnBuffer.apply(x)


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
        rep_stop_grad: stop the gradient through the pooled initial
            representatives, as eq. (5) writes (``sg``). The paper's
            Appendix D listing and the released code do not; the forward
            pass is the same either way, training gradients are not.
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
        self.rep_grid = _pair(rep_grid)
        self.rep_stop_grad = rep_stop_grad
        self.rep_pool = rep_pool
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
        """CBSA of ``(B, N, d)`` tokens whose ``H x W`` grid (row-major)
        starts at ``x[:, grid_start]`` (the number of tokens before it);
        any other tokens sit around it. Returns the update ``(B, N, d)``
        and, with ``return_attn``, the extraction attention ``A^T``,
        ``(B, K, m, N)``: which tokens each representative gathers.
        """
        check_grid(x, hw, grid_start)
        k = self.num_heads
        z = self.project(x)  # U_k^T Z, (B, K, N, p)
        q_ini = self.initial_representatives(z, hw, grid_start)
        # extraction, eq. (5), subspace by subspace (one full-width product
        # each: a batched product over 3 subspaces leaves threads idle):
        #   U_k^T Q = U_k^T Q_ini + eta_k U_k^T Z A_k
        attn_t = [self.extraction_attention(q_ini[:, i], z[:, i])
                  for i in range(k)]  # A_k^T, (B, m, N) each
        extracted = torch.stack([a @ z[:, i] for i, a in enumerate(attn_t)],
                                dim=1)
        q = q_ini + self.eta * extracted
        contraction = self.contract(q)
        # broadcast, eq. (6): kappa_k (contraction_k) A_k^T, and back to R^d.
        # Associativity: each representative's contraction is taken back
        # first, then every token gathers sum_k,m A_k[n, m] value_km,
        # subspace by subspace into one (B, N, d) sum, so no N x K*p
        # intermediate and no concatenated attention is formed
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
        """``A_k^T`` of eq. (5) for one subspace, ``(B, m, N)``, from its
        representatives ``(B, m, p)`` and token coordinates ``(B, N, p)``:
        ``A_k = softmax over tokens of (U_k^T Z)^T U_k^T Q_ini / sqrt(p)``
        (the scale on the ``m x p`` representatives, not on the ``m x N``
        similarities; the softmax over the contiguous token axis, written
        over the similarities).
        """
        if not precision.float16_autocast(z):
            return _softmax_in_place((q_ini * self.scale) @ z.mT)
        # float16 autocast: the similarities reach 65504 (inf, then NaN
        # attention) for subspace coordinates of a few hundred, so they are
        # computed in float32, shifted by their row maximum (the softmax
        # does not change) and cast back before the softmax. Shifted values
        # are <= 0 and cannot overflow (below -65504 they become -inf, of
        # weight 0 as in float32), and the attention kept for the backward
        # pass stays float16 (without the stop-gradient the float32
        # coordinates are kept too). tests/test_mixed_precision.py
        with precision.autocast_off(z):
            logits = (q_ini.float() * self.scale) @ z.float().mT
            shifted = logits - logits.detach().amax(-1, keepdim=True)
            return _softmax_in_place(shifted.to(z.dtype))

    def contract(self, q: torch.Tensor) -> torch.Tensor:
        """Contraction among the representatives ``(B, K, m, p)``, eq. (8):
        self-attention with query = key = value = ``U_k^T Q``. With the
        tokens themselves as representatives (Sec. 3.3) this is MSSA's
        attention.

        Under a float16 autocast it runs in float32: ``U_k^T Q`` is the
        pooled coordinates plus ``eta_k`` (drawn N(0, 1)) times the
        gathered ones, and its self-similarities ``|U_k^T q|^2 / sqrt(p)``
        reach 2e4 to 8e4 from tokens whose subspace coordinates are about
        30 (p = 100, four initialisations), past float16's 65504 where
        scaled-dot-product attention's math path forms them in float16
        (CUDA's math kernel before torch 2.5, or with
        ``allow_fp16_bf16_reduction_math_sdp(True)``): inf, then NaN. An
        ``m x m`` product: the float32 costs nothing that shows
        (tests/test_attention_overflow.py).
        """
        return precision.float32_under_float16(
            lambda r: F.scaled_dot_product_attention(r, r, r,
                                                     scale=self.scale), q)

    def extra_repr(self) -> str:
        text = super().extra_repr() + f', rep_grid={self.rep_grid}'
        if self.rep_pool != 'grid':
            text += f', rep_pool={self.rep_pool!r}'
        return text
