"""Which parameters a noise sweep perturbs.

Named targets: ``decoder-attention`` (default; the CBSA paper's setting:
every parameter of the decode head's attention layers), ``decoder`` (the
whole decode head) and ``encoder-attention`` (the backbone's attention
layers); anything else is a regular expression searched in the full
parameter names. ``layers`` restricts a selection to some attention
layers, by index among the target's sites.
"""
from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from typing import List, Optional, Sequence, Tuple, Union

import torch.nn as nn

from mmseg_whitebox.models.attention_sites import (AttentionSite,
                                                   find_attention_sites,
                                                   unregistered_attention)
from mmseg_whitebox.utils.distributed import unwrap_model
from mmseg_whitebox.utils.tool_error import InputError

NAMED_TARGETS = ('decoder-attention', 'decoder', 'encoder-attention')


@dataclass
class Selection:
    """Parameters to perturb and the attention sites they belong to (the
    sites are what the ablation reference removes)."""

    label: str
    target: str
    parameters: List[Tuple[str, nn.Parameter]]
    sites: List[AttentionSite]

    @property
    def numel(self) -> int:
        return sum(p.numel() for _, p in self.parameters)

    def describe(self) -> str:
        lines = [f'selection {self.label!r} (target {self.target!r}): '
                 f'{len(self.parameters)} tensors, {self.numel:,} values']
        for name, p in self.parameters:
            lines.append(f'  {name:<60} {tuple(p.shape)!s:<16} '
                         f'{p.numel():>10,}')
        if self.sites:
            lines.append('  attention layers: ' + ', '.join(
                f'[{s.index}] {s.name}' for s in self.sites))
        return '\n'.join(lines)


def _scope(target: str) -> str:
    return 'backbone' if target == 'encoder-attention' else 'decode_head'


def _part(scope: str) -> str:
    return ('the encoder (backbone)' if scope == 'backbone' else
            'the decode head')


def check_registered(model: nn.Module, scope: str,
                     sites: Optional[List[AttentionSite]] = None) -> None:
    """Refuse a part of the model holding attention the registry does not
    know: the sweep would miss it, and its removal and usage with it
    (``sites``: the part's sites, if already found)."""
    missing = unregistered_attention(model, scope, sites)
    if not missing:
        return
    counts = Counter(cls for _, cls in missing)
    what = ', '.join(f'{n} {cls}' for cls, n in counts.items())
    raise InputError(
        f'{what} in {_part(scope)} ({missing[0][0]}, ...) look like attention '
        'but have no attention entry: register one (docs/extending.md, '
        '"Registering an attention") or use a regular expression as '
        '--target (no ablation or usage)')


def select_parameters(model: nn.Module,
                      target: str = 'decoder-attention',
                      layers: Optional[Sequence[int]] = None) -> Selection:
    """Resolve a target (and optional layer indices) to parameters.

    Raises:
        InputError: naming the choices, if nothing is selected or a layer
            index does not exist.
    """
    model = unwrap_model(model)
    named = [(n, p) for n, p in model.named_parameters()]
    if target in NAMED_TARGETS:
        scope = _scope(target)
        sites = find_attention_sites(model, scope)
        check_registered(model, scope, sites)
        if target == 'decoder':
            params = [(n, p) for n, p in named
                      if n.startswith('decode_head.')]
        else:
            params = [np for s in sites for np in s.named_parameters()]
    else:
        try:
            pattern = re.compile(target)
        except re.error as exc:
            raise InputError(
                f'--target {target!r} is neither one of {NAMED_TARGETS} nor '
                f'a valid regular expression ({exc})') from exc
        params = [(n, p) for n, p in named if pattern.search(n)]
        selected = {id(p) for _, p in params}
        sites = [s for s in find_attention_sites(model, '')
                 if any(id(p) in selected for _, p in s.named_parameters())]
    if layers is not None:
        all_sites = {s.index: s for s in sites}
        missing = [i for i in layers if i not in all_sites]
        if missing:
            raise InputError(
                f'--layers: no attention layer {missing} for target '
                f'{target!r}; '
                f'layers: ' + ', '.join(f'[{i}] {s.name}'
                                        for i, s in all_sites.items()))
        sites = [all_sites[i] for i in layers]
        keep = {id(p) for s in sites for _, p in s.named_parameters()}
        params = [(n, p) for n, p in params if id(p) in keep]
    if not params:
        available = find_attention_sites(model, '')
        msg = f'--target {target!r} selects no parameters'
        if target in NAMED_TARGETS and target != 'decoder':
            scope = _scope(target)
            if not sites:
                msg += (f': {_part(scope)} has no attention layers; use '
                        + ('--target decoder' if scope == 'decode_head'
                           else '--target decoder-attention')
                        + ' or a regular expression over parameter names')
            else:
                msg += (f': its attention ({", ".join(s.kind for s in sites)})'
                        ' has no parameters that count as attention '
                        '(docs/robustness.md, "Supported attention"); use '
                        '--target decoder or a regular expression')
        if available:
            msg += '; attention layers in this model: ' + ', '.join(
                s.name for s in available)
        raise InputError(msg)
    label = target if layers is None else (
        f'{target}[{",".join(str(i) for i in layers)}]')
    return Selection(label, target, params, sites)


def select_layers(model: nn.Module,
                  target: str = 'decoder-attention',
                  layers: Union[None, str, Sequence[int]] = None
                  ) -> List[Selection]:
    """The selections of a sweep: the whole target (``layers=None``), or
    one per attention layer (``'each'``, or the given layer indices).

    Raises:
        InputError: as :func:`select_parameters`, or if ``'each'`` finds
            no attention layers.
    """
    if layers is None:
        return [select_parameters(model, target)]
    if isinstance(layers, str):
        if layers != 'each':
            raise InputError(f'--layers must be "each" or layer indices, '
                             f'got {layers!r}')
        sites = select_parameters(model, target).sites
        if not sites:
            raise InputError(f'--target {target!r} covers no attention '
                             'layers to perturb one at a time (--layers)')
        layers = [s.index for s in sites]
    return [select_parameters(model, target, [i]) for i in layers]
