"""Does noise change the subspaces? Principal angles and update changes.

The CBSA paper explains CBSA's flat noise curve by "perturbing subspace
bases with small noise does not significantly alter the subspaces they
span". This module measures it per subspace attention layer (CBSA, MSSA,
TSSA) and sigma, with the sweep's own noise draws: the principal angles
between ``span(U_k)`` and ``span(U_k + noise)`` per head, and the
relative change of the attention update, ``isolated`` (the clean input
through the noisy layer) and ``propagated`` (the whole noisy network).
Small angles with a large update change say the explanation does not
hold.
"""
from __future__ import annotations

import math
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence

import torch
import torch.nn as nn

from mmseg_whitebox.models.attention_sites import AttentionSite
from mmseg_whitebox.ops.subspace import SubspaceAttention

from .perturbation import ParameterNoise
from .selection import Selection


def principal_angles(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Principal angles in degrees (ascending) between the column spans of
    ``a`` (``d x p``) and ``b`` (``d x q``), columns linearly independent.

    From the cosines (singular values of ``Q1^T Q2``, QR bases in
    float64), and under 45 degrees from the sines, which keep the small
    angles that ``arccos`` rounds away (Knyazev and Argentati, 2002).
    """
    if a.dim() != 2 or b.dim() != 2 or a.shape[0] != b.shape[0]:
        raise ValueError(f'need two d x p matrices with the same d, got '
                         f'{tuple(a.shape)} and {tuple(b.shape)}')
    q1 = torch.linalg.qr(a.detach().double(), mode='reduced').Q
    q2 = torch.linalg.qr(b.detach().double(), mode='reduced').Q
    product = q1.mT @ q2
    cos = torch.linalg.svd(product).S.clamp(0, 1)  # descending
    angles = torch.arccos(cos)
    if q1.shape[1] == q2.shape[1]:
        sin = torch.linalg.svd(q2 - q1 @ product).S.clamp(0, 1).flip(0)
        small = angles < math.pi / 4
        angles = torch.where(small, torch.arcsin(sin), angles)
    return torch.rad2deg(angles)


def head_bases(attention: SubspaceAttention) -> List[torch.Tensor]:
    """``U_k`` (``d x p``) of every head, copies of the current weights."""
    weight = attention.proj.weight.detach()
    return [w.t().clone() for w in weight.view(
        attention.num_heads, attention.head_dim, attention.dim)]


def subspace_sites(selection: Selection) -> List[AttentionSite]:
    """The selection's sites with subspace bases."""
    return [s for s in selection.sites
            if isinstance(s.attention, SubspaceAttention)]


def _update(output: Any) -> torch.Tensor:
    """An operator's update (the first output when it returns more)."""
    return (output[0] if isinstance(output, tuple) else output).detach()


class _Recorder:
    """Forward hooks keeping each call's inputs (optional) and update."""

    def __init__(self, sites: Sequence[AttentionSite],
                 inputs: bool = False) -> None:
        self.sites = sites
        self.keep_inputs = inputs
        self.calls: Dict[str, List[Any]] = {s.name: [] for s in sites}
        self._handles: List[Any] = []

    def __enter__(self) -> '_Recorder':
        for site in self.sites:
            calls = self.calls[site.name]

            def hook(module, args, kwargs, output, calls=calls):
                calls.append(((args, kwargs) if self.keep_inputs else None,
                              _update(output)))

            self._handles.append(site.attention.register_forward_hook(
                hook, with_kwargs=True))
        return self

    def __exit__(self, *exc) -> bool:
        for handle in self._handles:
            handle.remove()
        self._handles.clear()
        return False


def _relative_change(noisy: Iterable[torch.Tensor],
                     clean: Iterable[torch.Tensor]) -> float:
    num = den = 0.0
    for u, c in zip(noisy, clean):
        num += float((u.double() - c.double()).pow(2).sum())
        den += float(c.double().pow(2).sum())
    return math.sqrt(num / den) if den > 0 else float('nan')


def take_batches(dataloader: Iterable, num_images: int) -> List[Any]:
    """The first batches of ``dataloader`` holding ``num_images`` images
    (at least one)."""
    batches, seen = [], 0
    for batch in dataloader:
        batches.append(batch)
        inputs = batch.get('inputs') if isinstance(batch, dict) else None
        seen += len(inputs) if inputs is not None else 1
        if seen >= num_images:
            break
    return batches


def subspace_change(model: nn.Module,
                    selection: Selection,
                    sigmas: Sequence[float],
                    batches: Sequence[Any],
                    num_seeds: int = 3,
                    mode: str = 'absolute',
                    seed: int = 0,
                    forward: Optional[Callable[[Any], Any]] = None
                    ) -> List[Dict[str, Any]]:
    """One row per subspace layer of ``selection`` and sigma > 0: mean
    and max principal angle over heads, directions and draws, and the
    update changes summed over ``batches`` (mean over draws).
    ``forward(batch)`` runs the model (default ``model.test_step``).

    Raises:
        ValueError: if the selection has no subspace attention layer.
    """
    sites = subspace_sites(selection)
    if not sites:
        raise ValueError(
            f'selection {selection.label!r} has no subspace attention layer '
            '(CBSA, MSSA or TSSA) to measure principal angles on; its '
            'layers: ' + (', '.join(s.name for s in selection.sites)
                          or 'none'))
    forward = forward or model.test_step
    model.eval()
    with torch.no_grad():
        with _Recorder(sites, inputs=True) as clean:
            for batch in batches:
                forward(batch)
        clean_bases = {s.name: head_bases(s.attention) for s in sites}
        rows = []
        for sigma in sorted({float(s) for s in sigmas if s > 0}):
            stats = {s.name: dict(angles=[], isolated=[], propagated=[])
                     for s in sites}
            for i in range(num_seeds):
                with ParameterNoise(selection.parameters, sigma, mode,
                                    seed + i):
                    with _Recorder(sites) as noisy:
                        for batch in batches:
                            forward(batch)
                    for site in sites:
                        st = stats[site.name]
                        calls = clean.calls[site.name]
                        st['angles'].extend(
                            principal_angles(u, v) for u, v in zip(
                                clean_bases[site.name],
                                head_bases(site.attention)))
                        st['isolated'].append(_relative_change(
                            (_update(site.attention(*args, **kwargs))
                             for (args, kwargs), _ in calls),
                            (u for _, u in calls)))
                        st['propagated'].append(_relative_change(
                            (u for _, u in noisy.calls[site.name]),
                            (u for _, u in calls)))
            for site in sites:
                st = stats[site.name]
                angles = torch.cat(st['angles'])
                rows.append(dict(
                    selection=selection.label, layer=site.index,
                    site=site.name, sigma=sigma, mode=mode,
                    draws=num_seeds,
                    dim=site.attention.dim,
                    heads=site.attention.num_heads,
                    head_dim=site.attention.head_dim,
                    angle_mean_deg=float(angles.mean()),
                    angle_max_deg=float(angles.max()),
                    update_change_isolated=sum(st['isolated']) / num_seeds,
                    update_change_propagated=sum(st['propagated']) /
                    num_seeds))
    return rows


def missing_sigmas(rows: Sequence[Dict[str, Any]], selection: str,
                   sigmas: Sequence[float]) -> List[float]:
    """The sigmas > 0 that the ``rows`` of :func:`subspace_change` lack
    for ``selection``."""
    done = {float(r['sigma']) for r in rows if r['selection'] == selection}
    return sorted({float(s) for s in sigmas if s > 0} - done)
