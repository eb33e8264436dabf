"""Parameter groups of attention layers: which parameters a model's
sensitivity to noise comes from.

Each parameter of an attention site has one role (``bases``, ``qkv``,
``step-sizes``, ...), read off its name by its registry entry's ``roles``
(:mod:`mmseg_whitebox.models.attention_registry`; the table per head is
in docs/robustness.md). A parameter no rule matches falls into ``other``,
and a selected parameter outside every attention site into
``non-attention``, so the groups always partition a selection.
"""
from __future__ import annotations

import re
from typing import Dict, List, Optional, Sequence, Tuple

import torch.nn as nn

from mmseg_whitebox.utils.tool_error import InputError
from .selection import Selection

OTHER = 'other'
NON_ATTENTION = 'non-attention'
#: every group name, in table order
GROUPS = ('bases', 'qkv', 'step-sizes', 'scales', 'out-proj', 'biases',
          OTHER, NON_ATTENTION)


def parameter_role(roles: Sequence[Tuple[str, str]], name: str) -> str:
    """The group of the parameter called ``name`` inside an attention
    operator whose entry has ``roles``."""
    for group, pattern in roles:
        if re.search(pattern, name):
            return group
    return OTHER


def parameter_groups(selection: Selection
                     ) -> Dict[str, List[Tuple[str, nn.Parameter]]]:
    """The selection's parameters by group (non-empty groups only, in
    :data:`GROUPS` order; each parameter in exactly one)."""
    roles = {}
    for site in selection.sites:
        for name, p in site.named_parameters():
            roles[id(p)] = parameter_role(site.entry.roles,
                                          name[len(site.name) + 1:])
    grouped: Dict[str, List[Tuple[str, nn.Parameter]]] = {}
    for name, p in selection.parameters:
        grouped.setdefault(roles.get(id(p), NON_ATTENTION), []).append(
            (name, p))
    return {g: grouped[g] for g in GROUPS if g in grouped}


def group_selections(selection: Selection,
                     groups: Optional[Sequence[str]] = None
                     ) -> List[Selection]:
    """One selection per parameter group of ``selection`` (all groups it
    has, or those named), labelled ``<label>:<group>``, each with the whole
    selection's sites (so the same ablation reference).

    Raises:
        InputError: for a group the selection does not have.
    """
    grouped = parameter_groups(selection)
    if groups is None:
        groups = list(grouped)
    missing = [g for g in groups if g not in grouped]
    if missing:
        raise InputError(
            f'--groups: no parameter group {missing} in selection '
            f'{selection.label!r}; it has: {", ".join(grouped)} (all groups: '
            f'{", ".join(GROUPS)})')
    return [Selection(f'{selection.label}:{g}', selection.target,
                      grouped[g], list(selection.sites)) for g in groups]


def group_of(label: str) -> Optional[str]:
    """The parameter group a selection label names, or None for a whole
    selection (a regular expression target may contain ':' itself)."""
    _, sep, group = label.rpartition(':')
    return group if sep and group in GROUPS else None
