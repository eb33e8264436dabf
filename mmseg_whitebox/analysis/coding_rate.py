"""Coding rates of the tokens a white-box layer produces.

The white-box operators are gradient steps on the compression term of the
MCR^2 objective (CRATE eq. 8, CBSA paper eq. 2)::

    R_c(Z | U_[K]) = sum_k R(U_k^T Z),
    R(W) = 1/2 logdet(I + p / (N eps^2) W W^T)      (W = U_k^T Z, p x N)

measured with each layer's *own* subspaces ``U_k`` on that layer's output
``Z^l + update`` (CRATE's Fig. 3, the CBSA paper's Fig. 5). The
normalised variant scales every token to unit length first (angles only).
``logdet`` is taken on the ``p x p`` side (Sylvester's identity): linear
in the number of tokens.
"""
from __future__ import annotations

from typing import Any, Dict, List

import torch
import torch.nn.functional as F

from mmseg_whitebox.models.attention_sites import find_attention_sites
from mmseg_whitebox.ops import SubspaceAttention
from mmseg_whitebox.utils.tool_error import InputError


def coding_rate(w: torch.Tensor, eps: float = 0.1) -> torch.Tensor:
    """``R(W) = 1/2 logdet(I + p/(N eps^2) W W^T)`` for ``W``: ``(..., p,
    N)`` (tokens as columns); batched over leading dims."""
    p, n = w.shape[-2:]
    gram = w.double() @ w.double().transpose(-1, -2)
    eye = torch.eye(p, dtype=torch.float64, device=w.device)
    return 0.5 * torch.logdet(eye + (p / (n * eps**2)) * gram)


def compression_term(tokens: torch.Tensor,
                     op: SubspaceAttention,
                     eps: float = 0.1,
                     normalize: bool = False) -> torch.Tensor:
    """``R_c(Z | U_[K])`` per image for ``tokens``: ``(B, N, d)``, with the
    subspaces of ``op`` (its ``proj`` rows, ``K`` blocks of ``p``)."""
    if normalize:
        tokens = F.normalize(tokens, dim=-1)
    w = op.project(tokens)  # (B, K, N, p)
    return coding_rate(w.transpose(-1, -2), eps).sum(dim=1)


class CompressionProbe:
    """Context manager measuring, per white-box layer and image, ``R_c``
    and its normalised variant of the tokens entering and leaving the
    layer, with its own subspaces (``in - out``: what it compressed);
    :meth:`summary` gives the per-layer means and stds over images.
    """

    KEYS = ('rate_in', 'rate_out', 'normalized_in', 'normalized_out')

    def __init__(self, model: torch.nn.Module, eps: float = 0.1,
                 scope: str = 'decode_head') -> None:
        self.eps = eps
        self.sites = [s for s in find_attention_sites(model, scope)
                      if isinstance(s.attention, SubspaceAttention)]
        if not self.sites:
            raise InputError(
                f'no white-box (subspace) attention layers under {scope!r}: '
                'the coding rate is measured with a layer\'s own subspaces')
        self.values: Dict[str, Dict[str, List[float]]] = {
            s.name: {k: [] for k in self.KEYS} for s in self.sites}
        self._handles: List[Any] = []

    def _record(self, store: Dict[str, List[float]], which: str,
                tokens: torch.Tensor, op: SubspaceAttention) -> None:
        with torch.no_grad():
            tokens = tokens.detach()
            store[f'rate_{which}'].extend(
                compression_term(tokens, op, self.eps).tolist())
            store[f'normalized_{which}'].extend(
                compression_term(tokens, op, self.eps, True).tolist())

    def __enter__(self) -> 'CompressionProbe':
        for site in self.sites:
            store, op = self.values[site.name], site.attention
            self._handles.append(site.block.register_forward_pre_hook(
                lambda m, args, store=store, op=op: self._record(
                    store, 'in', args[0], op)))
            self._handles.append(site.block.register_forward_hook(
                lambda m, args, out, store=store, op=op: self._record(
                    store, 'out', out, op)))
        return self

    def __exit__(self, *exc) -> bool:
        for handle in self._handles:
            handle.remove()
        self._handles = []
        return False

    def summary(self) -> List[Dict[str, Any]]:
        rows = []
        for site in self.sites:
            v = self.values[site.name]
            if not v['rate_out']:
                continue
            row: Dict[str, Any] = dict(layer=site.index, site=site.name,
                                       images=len(v['rate_out']))
            for key in self.KEYS:
                t = torch.tensor(v[key], dtype=torch.float64)
                row[f'{key}_mean'] = float(t.mean())
                row[f'{key}_std'] = float(t.std()) if len(t) > 1 else 0.0
            rows.append(row)
        return rows
