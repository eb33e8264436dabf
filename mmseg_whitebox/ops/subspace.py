"""What every white-box attention operator shares: subspace bases.

MSSA, TSSA and CBSA all read tokens through ``K`` learnable subspace bases
``U_k in R^{d x p}`` (CRATE Sec. 2.3, CBSA Sec. 2): one ``Linear(d -> K*p)``
without bias computes every ``U_k^T z`` at once. The way back to ``R^d`` is
either the rigorous one, ``sum_k U_k (.)`` through the same bases (tied), or
the over-parameterised independent ``Linear(K*p -> d)`` that CRATE, ToST and
CBSA use by default for accuracy (CBSA paper, Sec. 4 "Implementation
detail").
"""
from __future__ import annotations

import math
from typing import Optional

import torch
import torch.nn as nn
import torch.nn.functional as F

OUT_PROJ_MODES = ('linear', 'tied')
BASIS_INITS = ('trunc_normal', 'scaled_normal', 'orthogonal')


def autocast_on(device_type: str) -> bool:
    """Whether autocast is on for ``device_type`` (any torch version)."""
    try:
        return torch.is_autocast_enabled(device_type)
    except TypeError:  # torch < 2.4 takes no device type
        return device_type == 'cpu' and torch.is_autocast_cpu_enabled()


def _compiling() -> bool:
    is_compiling = getattr(getattr(torch, 'compiler', None), 'is_compiling',
                           None)
    return bool(is_compiling is not None and is_compiling())


def eager_inference(*tensors: torch.Tensor) -> bool:
    """Whether an operation on ``tensors`` runs eagerly and unrecorded: no
    autograd graph, no tracing, scripting or compiling. Only then may
    results be written into existing buffers (``out=``)."""
    if torch.is_grad_enabled() and any(t.requires_grad for t in tensors):
        return False
    return not (torch.jit.is_tracing() or torch.jit.is_scripting()
                or _compiling())


def sums_in_place(target: torch.Tensor, *operands: torch.Tensor) -> bool:
    """Whether a product of ``operands`` may be summed into ``target``'s
    memory: eager inference (:func:`eager_inference`) without autocast,
    ``target`` contiguous and of the operands' dtype."""
    return (target.is_contiguous()
            and all(t.dtype == target.dtype for t in operands)
            and eager_inference(target, *operands)
            and not autocast_on(target.device.type))


def _two_d_products(a: torch.Tensor, b: torch.Tensor) -> bool:
    return (a.device.type == 'cpu' and a.dtype == b.dtype
            and eager_inference(a, b) and not autocast_on('cpu'))


def per_subspace_matmul(a: torch.Tensor,
                        b: torch.Tensor,
                        out: Optional[torch.Tensor] = None) -> torch.Tensor:
    """``a @ b`` for ``(B, K, x, y)`` and ``(B, K, y, z)`` tensors.

    On a CPU, torch's batched matmul gives each of the ``B*K`` matrices to
    one thread, so a few large ones (3 subspaces of an image on 2 or 16
    cores) leave threads idle. For eager inference there (no gradient,
    autocast, tracing or compiling), each product is one 2-D ``mm`` on all
    threads, written straight into the result; otherwise this is
    ``torch.matmul`` (which FLOP counters and exporters also see).

    ``out``: for inference only, a ``(B, K, x, z)`` tensor, contiguous per
    image (it may be a view into a larger buffer), to write into.
    """
    fast = _two_d_products(a, b)
    if out is None and not fast:
        return torch.matmul(a, b)
    batch, heads = torch.broadcast_shapes(a.shape[:2], b.shape[:2])
    a = a.expand(batch, heads, *a.shape[2:])
    b = b.expand(batch, heads, *b.shape[2:])
    if out is None:
        out = a.new_empty(batch, heads, a.shape[2], b.shape[3])
    elif not all(out[i].is_contiguous() for i in range(batch)):
        raise ValueError('out must be contiguous per image')
    for i in range(batch):
        if not fast:
            torch.matmul(a[i], b[i], out=out[i])
            continue
        for k in range(heads):
            torch.mm(a[i, k], b[i, k], out=out[i, k])
    return out


class SubspaceAttention(nn.Module):
    """Base class: bases ``proj`` (U) and the projection back.

    Args:
        dim: token width ``d``.
        num_heads: number of subspaces ``K``.
        head_dim: subspace dimension ``p``.
        out_proj: ``'linear'`` (an independent ``Linear(K*p, d)`` with bias,
            named ``out_proj``) or ``'tied'`` (back through ``U``; no extra
            parameters).
        basis_init: ``'trunc_normal'`` (std ``init_std``, as mmseg/Segmenter
            initialise Linear layers), ``'scaled_normal'`` (N(0, 1/d), as
            the DEPICT code), or ``'orthogonal'`` (orthonormal bases, the
            paper's ``U_k in O(d, p)``; needs ``K*p <= d`` for exact
            orthogonality, otherwise rows are orthonormal).
        init_std: std for ``'trunc_normal'`` and for ``out_proj``.
    """

    def __init__(self,
                 dim: int,
                 num_heads: int,
                 head_dim: int,
                 out_proj: str = 'linear',
                 basis_init: str = 'trunc_normal',
                 init_std: float = 0.02) -> None:
        super().__init__()
        if out_proj not in OUT_PROJ_MODES:
            raise ValueError(f'out_proj must be one of {OUT_PROJ_MODES}, '
                             f'got {out_proj!r}')
        if basis_init not in BASIS_INITS:
            raise ValueError(f'basis_init must be one of {BASIS_INITS}, '
                             f'got {basis_init!r}')
        if min(dim, num_heads, head_dim) < 1:
            raise ValueError('dim, num_heads and head_dim must be >= 1')
        self.dim = dim
        self.num_heads = num_heads
        self.head_dim = head_dim
        self.inner_dim = num_heads * head_dim
        self.scale = head_dim**-0.5
        self.out_proj_mode = out_proj
        self.basis_init = basis_init
        self.init_std = init_std
        self.proj = nn.Linear(dim, self.inner_dim, bias=False)
        self.out_proj = (nn.Linear(self.inner_dim, dim)
                         if out_proj == 'linear' else None)

    def reset_parameters(self) -> None:
        """Initialise the bases and the output projection."""
        weight = self.proj.weight
        if self.basis_init == 'trunc_normal':
            nn.init.trunc_normal_(weight, std=self.init_std)
        elif self.basis_init == 'scaled_normal':
            nn.init.normal_(weight, std=1.0 / math.sqrt(self.dim))
        else:
            nn.init.orthogonal_(weight)
        if self.out_proj is not None:
            nn.init.trunc_normal_(self.out_proj.weight, std=self.init_std)
            nn.init.zeros_(self.out_proj.bias)

    def project(self, x: torch.Tensor) -> torch.Tensor:
        """``(B, N, d) -> (B, K, N, p)``: every ``U_k^T z``."""
        b, n, _ = x.shape
        w = self.proj(x).view(b, n, self.num_heads, self.head_dim)
        return w.transpose(1, 2)

    def back_weight(self) -> torch.Tensor:
        """``(K*p, d)``: the way from the subspace coordinates back to
        ``R^d``: the bases ``U`` themselves when tied, the transposed
        weight of the output linear otherwise."""
        if self.out_proj is None:
            return self.proj.weight
        return self.out_proj.weight.t()

    def project_back(self,
                     z: torch.Tensor,
                     gain: Optional[torch.Tensor] = None) -> torch.Tensor:
        """``(B, K, N, p) -> (B, N, d)``: ``sum_k U_k z_k`` when tied, the
        over-parameterised linear map otherwise.

        ``gain`` (broadcastable to ``(B, K, 1, p)``: a step size, or a
        per-direction rescaling) multiplies the coordinates first; it is
        folded into the ``K*p x d`` weights, so no ``N``-sized tensor is
        scaled.
        """
        b, k, n, p = z.shape
        flat = z.transpose(1, 2).reshape(b, n, k * p)
        weight = self.back_weight()
        bias = None if self.out_proj is None else self.out_proj.bias
        if gain is None:
            return F.linear(flat, weight.t(), bias)
        gain = torch.broadcast_to(
            gain, torch.broadcast_shapes(gain.shape, (1, k, 1, p)))
        weight = gain.reshape(gain.shape[0], k * p, 1) * weight  # (B|1,Kp,d)
        if weight.shape[0] == 1:
            return F.linear(flat, weight[0].t(), bias)
        if bias is None:
            return torch.bmm(flat, weight)
        return torch.baddbmm(bias, flat, weight)

    def broadcast_back(self,
                       gather: torch.Tensor,
                       values: torch.Tensor,
                       residual: Optional[torch.Tensor] = None
                       ) -> torch.Tensor:
        """``(B, K*m, N)`` gather weights (each subspace's ``m x N``
        weights, stacked), ``(B, K, m, p)`` values -> ``(B, N, d)``:
        ``project_back(weights^T @ values)``, plus ``residual`` if given.

        Each of the ``m`` values per subspace is first taken back to
        ``R^d``, then the tokens gather them in one product over all
        subspaces: ``N*K*m*d`` multiply-adds instead of ``N*K*m*p +
        N*K*p*d``, and no ``N x K*p`` intermediate.

        Two passes over the ``(B, N, d)`` output can be saved: ``gather``
        may end with one more row per image, of ones, whose gathered value
        is then the output bias; and where :func:`sums_in_place` allows
        (inference), the product itself sums into ``residual``, which is
        overwritten and returned (otherwise an ordinary sum).
        """
        b, rows, n = gather.shape
        k, m = values.shape[1:3]
        back = self.back_weight().view(k, self.head_dim, self.dim)
        per_value = torch.matmul(values, back).reshape(b, k * m, self.dim)
        bias = None if self.out_proj is None else self.out_proj.bias
        if rows == k * m + 1 and bias is not None:
            per_value = torch.cat([per_value, bias.expand(b, 1, -1)], dim=1)
            bias = None
        elif rows != k * m:
            raise ValueError(
                f'gather has {rows} rows per image; expected {k * m} '
                f'(K*m){" or K*m+1" if bias is not None else ""}')
        gather = gather.transpose(1, 2)
        if residual is not None and sums_in_place(residual, gather,
                                                  per_value):
            out = residual.baddbmm_(gather, per_value)
        else:
            out = torch.bmm(gather, per_value)
            if residual is not None:
                out = out + residual
        # bias not gathered: added afterwards, in place (baddbmm(bias, ...)
        # would first copy it into every row of the output)
        return out if bias is None else out.add_(bias)

    def extra_repr(self) -> str:
        return (f'dim={self.dim}, num_heads={self.num_heads}, '
                f'head_dim={self.head_dim}, out_proj={self.out_proj_mode!r}')
