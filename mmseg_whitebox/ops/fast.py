"""The inference fast path: the same functions as the operators' equations,
computed with fewer passes over token-sized memory. One switch turns it
on, in the manner of timm's ``use_fused_attn()``:

    from mmseg_whitebox.ops import fast
    fast.set_fast_path(True)            # or MMSEG_WHITEBOX_FAST_PATH=1
    with fast.fast_path(True): ...      # for a block of code

Off by default: the operators then run their equations as written. Even
when switched on, it applies only to eager inference (eval mode, no
autograd graph, no tracing, scripting, compiling or ONNX export, no
autocast) of a module without forward hooks (robustness ablation, usage
ratios and probes see the default path), so training, export and analysis
never take it.

What it does, all for CBSA:

* per-subspace 2-D products on a CPU: torch's batched matmul hands each of
  the ``B*K`` matrices to one thread, so 3 subspaces of one image leave
  cores idle; one ``mm`` per matrix uses all of them;
* the extraction weights stay unnormalised (``1/sum`` is applied to
  ``m``-sized products), in one ``N``-sized buffer that also serves the
  broadcast;
* :func:`residual_step`: the broadcast product sums the update straight
  into the residual stream (``baddbmm_``), the output bias gathered through
  one extra row of ones. This writes into the block's *input*, so only the
  owner of that token stream may ask for it (a head's or backbone's own
  loop over its blocks, on a tensor it allocated, and not while
  checkpointing those blocks).

Default and fast results agree to 1e-5 (tests/test_ops.py).
"""
from __future__ import annotations

import contextlib
import os
from typing import Iterator, Optional, Tuple

import torch
import torch.nn as nn
from torch.nn.modules import module as _module

_ENABLED = os.environ.get('MMSEG_WHITEBOX_FAST_PATH', '0').lower() in (
    '1', 'true', 'yes', 'on')


def use_fast_path() -> bool:
    """Whether the fast path is switched on."""
    return _ENABLED


def set_fast_path(enable: bool = True) -> None:
    """Switch the fast path on or off for the whole process."""
    global _ENABLED
    _ENABLED = bool(enable)


@contextlib.contextmanager
def fast_path(enable: bool = True) -> Iterator[None]:
    """Switch the fast path on (or off) inside a ``with`` block."""
    before = use_fast_path()
    set_fast_path(enable)
    try:
        yield
    finally:
        set_fast_path(before)


def _autocast_on(device_type: str) -> bool:
    try:
        return torch.is_autocast_enabled(device_type)
    except TypeError:  # torch < 2.4 takes no device type
        return device_type == 'cpu' and torch.is_autocast_cpu_enabled()


def _recording(*tensors: torch.Tensor) -> bool:
    """Whether autograd, a tracer, a compiler or an exporter sees this."""
    if torch.is_grad_enabled() and any(t.requires_grad for t in tensors):
        return True
    compiler = getattr(torch, 'compiler', None)
    onnx = getattr(torch, 'onnx', None)
    return bool(torch.jit.is_tracing() or torch.jit.is_scripting()
                or (compiler is not None and compiler.is_compiling())
                or (onnx is not None and onnx.is_in_onnx_export()))


def _hooked(*modules: nn.Module) -> bool:
    if _module._global_forward_hooks or _module._global_forward_pre_hooks:
        return True
    return any(m._forward_hooks or m._forward_pre_hooks for m in modules)


def applies(module: nn.Module, x: torch.Tensor) -> bool:
    """Whether ``module`` may take the fast path on input ``x``: switched
    on, inference (eval mode, nothing recorded) without autocast, no
    forward hooks."""
    return (_ENABLED and not module.training
            and not _recording(x, *module.parameters())
            and not _autocast_on(x.device.type) and not _hooked(module))


def may_sum_in_place(block: nn.Module, x: torch.Tensor) -> bool:
    """Whether a pre-norm residual ``block`` (``norm``, ``attn``,
    ``drop_path``) may sum its update into ``x`` itself: the fast path
    applies to the block and its parts (so it is in eval mode: no drop
    path), and ``x`` is contiguous."""
    return (x.is_contiguous() and applies(block, x)
            and not _hooked(*block.children()))


def per_subspace_matmul(a: torch.Tensor,
                        b: torch.Tensor,
                        out: Optional[torch.Tensor] = None) -> torch.Tensor:
    """``a @ b`` for ``(B, K, x, y)`` and ``(B, K, y, z)`` tensors, one
    2-D product per matrix on a CPU (all threads on each), batched
    ``matmul`` elsewhere; written into ``out`` (contiguous per image, e.g.
    a view into a larger buffer) if given."""
    batch, heads = torch.broadcast_shapes(a.shape[:2], b.shape[:2])
    a = a.expand(batch, heads, *a.shape[2:])
    b = b.expand(batch, heads, *b.shape[2:])
    if out is None:
        out = a.new_empty(batch, heads, a.shape[2], b.shape[3])
    elif not all(out[i].is_contiguous() for i in range(batch)):
        raise ValueError('out must be contiguous per image')
    for i in range(batch):
        if a.device.type != 'cpu':
            torch.matmul(a[i], b[i], out=out[i])
            continue
        for k in range(heads):
            torch.mm(a[i, k], b[i, k], out=out[i, k])
    return out


def cbsa(op: nn.Module,
         x: torch.Tensor,
         hw: Tuple[int, int],
         grid_start: int = 0,
         residual: Optional[torch.Tensor] = None) -> torch.Tensor:
    """:meth:`CBSA.forward <mmseg_whitebox.ops.CBSA.forward>`'s update
    (eq. 5-8), or ``residual + update`` summed into ``residual``'s memory
    when ``residual`` is given (see :func:`residual_step`)."""
    b, n, _ = x.shape
    k, m, d = op.num_heads, op.num_representatives, op.dim
    bias = None if op.out_proj is None else op.out_proj.bias
    z = op.project(x)  # (B, K, N, p)
    q_ini = op.initial_representatives(z, hw, grid_start)
    # exp-weights E of the extraction (B, K, m, N), in a buffer of K*m rows
    # per image; with a residual and a bias, one more row of ones gathers
    # the bias in the broadcast product
    extra = int(residual is not None and bias is not None)
    gather = z.new_empty(b, k * m + extra, n)
    if extra:
        gather[:, k * m:] = 1
    weights = gather[:, :k * m].view(b, k, m, n)
    per_subspace_matmul(q_ini * op.scale, z.transpose(-1, -2), out=weights)
    weights.sub_(weights.amax(dim=-1, keepdim=True)).exp_()
    sum_dtype = torch.promote_types(weights.dtype, torch.float32)
    inv_sum = weights.sum(-1, keepdim=True, dtype=sum_dtype).reciprocal()
    q = q_ini + (op.eta * inv_sum) * per_subspace_matmul(weights, z)
    contraction = torch.nn.functional.scaled_dot_product_attention(
        q, q, q, scale=op.scale)
    # broadcast and back in one product: each representative's value in
    # R^d, gathered by every token (A = E / sum, kappa folded in)
    values = op.back_per_subspace((op.kappa * inv_sum) * contraction)
    values = values.to(weights.dtype).reshape(b, k * m, d)
    if extra:
        values = torch.cat([values, bias.expand(b, 1, d)], dim=1)
    gather_t = gather.transpose(1, 2)
    if residual is not None:  # (any bias was gathered by the row of ones)
        return residual.baddbmm_(gather_t, values)
    out = torch.bmm(gather_t, values)
    return out if bias is None else out.add_(bias)


def residual_step(block: nn.Module, x: torch.Tensor,
                  **kwargs) -> torch.Tensor:
    """``x += block.attn(block.norm(x), **kwargs)``, in ``x``'s memory.

    Only for the owner of the token stream ``x`` (see the module
    docstring), after :func:`may_sum_in_place` said yes."""
    from .cbsa import CBSA  # (cbsa.py imports this module)
    normed = block.norm(x)
    attn = block.attn
    if isinstance(attn, CBSA) and normed.dtype == x.dtype:
        # the sum happens inside CBSA's last product
        grid_start = kwargs.get('grid_start', 0)
        attn.check_grid(normed, kwargs['hw'], grid_start)
        return cbsa(attn, normed, kwargs['hw'], grid_start, residual=x)
    update = attn(normed, **kwargs)
    if update.dtype != x.dtype:
        return x + update
    return x.add_(update)
