"""Parameter groups of attention layers: which parameters a model's
sensitivity to noise comes from.

Each parameter of an attention site (:mod:`.sites`) has one role, read off
its name inside the attention operator by its registry entry's ``roles``
(:mod:`mmseg_whitebox.models.attention_registry`):

``mmseg_whitebox`` operators (CBSA, MSSA, TSSA: :class:`SubspaceAttention`)
    ``bases``: the subspace bases ``proj.weight`` (U);
    ``step-sizes``: the per-head scalars -- CBSA's ``eta`` and ``kappa``,
    MSSA's ``step_size``, TSSA's temperature ``temp``;
    ``out-proj``: the output projection ``out_proj.weight`` (absent in the
    tied variants);
    ``biases``: ``out_proj.bias``.
    The q/k/v operators of white-box encoders (``MHSA``, ``QKVCBSA``,
    ``MiTA``) in the same blocks: ``qkv`` (``qkv.weight``),
    ``step-sizes``, ``out-proj`` and ``biases`` (``qkv.bias``,
    ``out_proj.bias``).
every other attention (mmcv ``MultiheadAttention``, Swin, BEiT, SegFormer,
non-local, DANet, ISA/ANN/OCR blocks)
    ``qkv``: the query/key/value projection weights (non-local: g,
    theta, phi); ``out-proj``: the output projection's weight;
    ``scales``: learned residual scales (DANet's ``gamma``);
    ``biases``: every bias.

A parameter no rule matches falls into ``other``, and a selected parameter
outside every attention site (e.g. a norm under ``--target decoder``) into
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
    has, or those named), labelled ``<label>:<group>``. Each keeps the
    whole selection's sites: its ablation reference is the same.

    Raises:
        InputError: (a ``ValueError``) for a group name that is unknown
            or not in the selection (naming those it has).
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
    return [Selection(group_label(selection.label, g), selection.target,
                      grouped[g], list(selection.sites)) for g in groups]


def group_label(label: str, group: str) -> str:
    """The label of parameter group ``group`` of selection ``label``."""
    return f'{label}:{group}'


def group_of(label: str) -> Optional[str]:
    """The parameter group a selection label names (see
    :func:`group_label`), or None for a whole selection; a regular
    expression target may contain ':' itself."""
    _, sep, group = label.rpartition(':')
    return group if sep and group in GROUPS else None
