"""Attention operators in mmseg's ``MODELS`` registry, and their builder:
heads and backbones name their operator by config, as mmseg's
``build_attn`` does (``attn_cfg=dict(type='CBSA', ...)``).
"""
from __future__ import annotations

import inspect
from typing import Any, Dict, Union

import torch.nn as nn
from mmcv.cnn.bricks.transformer import FFN
from mmseg.registry import MODELS

from mmseg_whitebox.ops import (CBSA, ISTA, MHSA, MSSA, QKVCBSA, TSSA,
                                CrossMSSA, MiTA)

ATTENTION_OPERATORS = (CBSA, MSSA, CrossMSSA, TSSA, ISTA, MHSA, QKVCBSA,
                       MiTA)
for _op in ATTENTION_OPERATORS:
    MODELS.register_module(module=_op)


def build_attention(cfg: Union[Dict[str, Any], nn.Module],
                    **defaults: Any) -> nn.Module:
    """An operator from ``cfg`` (a dict with ``type``; a built module is
    returned as it is); ``defaults`` fill in what ``cfg`` leaves out and
    the operator accepts."""
    if isinstance(cfg, nn.Module):
        return cfg
    cfg = dict(cfg)
    name = cfg.get('type')
    cls = name if inspect.isclass(name) else MODELS.get(name)
    if cls is None:
        known = ', '.join(op.__name__ for op in ATTENTION_OPERATORS)
        raise KeyError(f'attention type {name!r} is not registered in '
                       f"mmseg's MODELS; use one of {known} (or register "
                       'your own)')
    accepted = inspect.signature(cls).parameters
    for key, value in defaults.items():
        if key in accepted:
            cfg.setdefault(key, value)
    cfg['type'] = cls
    return MODELS.build(cfg)


def build_feedforward(cfg: Dict[str, Any], dim: int) -> nn.Module:
    """The feed-forward step of an encoder layer: ``dict(type='ISTA',
    ...)`` (returns new tokens) or ``dict(type='MLP', mlp_ratio=4,
    act_cfg=..., num_fcs=2)`` (mmcv's ``FFN``, returns the update)."""
    cfg = dict(cfg)
    kind = cfg.pop('type', None)
    if kind == 'ISTA':
        return ISTA(dim, **cfg)
    if kind == 'MLP':
        ratio = cfg.pop('mlp_ratio', 4)
        cfg.setdefault('act_cfg', dict(type='GELU'))
        return FFN(embed_dims=dim, feedforward_channels=int(ratio * dim),
                   add_identity=False, **cfg)
    raise KeyError(f"ffn_cfg type must be 'ISTA' or 'MLP', got {kind!r}")
