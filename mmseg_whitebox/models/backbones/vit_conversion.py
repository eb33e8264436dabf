"""timm ViT state dicts -> mmseg ``VisionTransformer`` or ``WhiteBoxViT``
keys.

Next to the backbones it feeds. mmseg's ``VisionTransformer`` takes the
weights as they are; this project's ``WhiteBoxViT`` takes them with MHSA
layers (the same ViT) or QKVCBSA layers (the ViT made linear in the number
of tokens with CBSA, CBSA paper Fig. 9), both of which keep timm's
query/key/value and output projections; QKVCBSA adds only its step sizes.
Unlike mmseg's Segmenter configs, the patch embedding keeps its bias:
configs that load converted timm weights set ``patch_bias=True``.
"""
from __future__ import annotations

import re
from collections import OrderedDict
from typing import Callable, Dict, List, Tuple, Union

import torch

#: (regex a whole key must match, replacement template or function)
Rules = List[Tuple[str, Union[str, Callable[[re.Match], str]]]]

# timm key (regex) -> key (template). The frame (patch embedding, CLS
# token, position embedding, final norm) is mmseg's in both backbones
FRAME: Rules = [
    (r'cls_token', 'cls_token'),
    (r'pos_embed', 'pos_embed'),
    (r'patch_embed\.proj\.(weight|bias)', r'patch_embed.projection.\1'),
    (r'norm\.(weight|bias)', r'ln1.\1'),
]
# per block: timm name (regex) -> mmseg VisionTransformer name, WhiteBoxViT
# name (with MHSA or QKVCBSA layers and an MLP); \2 is the parameter
BLOCK_NAMES = [
    (r'norm1\.(weight|bias)', r'ln1.\2', r'norm.\2'),
    (r'attn\.qkv\.(weight|bias)', r'attn.attn.in_proj_\2', r'attn.qkv.\2'),
    (r'attn\.proj\.(weight|bias)', r'attn.attn.out_proj.\2',
     r'attn.out_proj.\2'),
    (r'norm2\.(weight|bias)', r'ln2.\2', r'norm2.\2'),
    (r'mlp\.fc1\.(weight|bias)', r'ffn.layers.0.0.\2', r'ffn.layers.0.0.\2'),
    (r'mlp\.fc2\.(weight|bias)', r'ffn.layers.1.\2', r'ffn.layers.1.\2'),
]


def _block_rules(target: int) -> Rules:
    return [(r'blocks\.(\d+)\.' + names[0], r'layers.\1.' + names[target])
            for names in BLOCK_NAMES]


TIMM_TO_MMSEG: Rules = FRAME + _block_rules(1)
TIMM_TO_WHITE_BOX: Rules = FRAME + _block_rules(2)
# mmseg ViT key (regex) -> WhiteBoxViT key: the same frame and MLP
MMSEG_TO_WHITE_BOX: Rules = [
    (r'(cls_token|pos_embed|patch_embed\..*|ln1\..*|layers\.\d+\.ffn\..*)',
     r'\1'),
    (r'layers\.(\d+)\.ln1\.(weight|bias)', r'layers.\1.norm.\2'),
    (r'layers\.(\d+)\.attn\.attn\.in_proj_(weight|bias)',
     r'layers.\1.attn.qkv.\2'),
    (r'layers\.(\d+)\.attn\.attn\.out_proj\.(weight|bias)',
     r'layers.\1.attn.out_proj.\2'),
    (r'layers\.(\d+)\.ln2\.(weight|bias)', r'layers.\1.norm2.\2'),
]
#: classification parts, dropped on purpose
CLASSIFIER = re.compile(r'^(head|fc_norm|pre_logits)\.')
StateDict = Dict[str, torch.Tensor]
Conversion = Tuple['OrderedDict[str, torch.Tensor]', List[str], List[str]]


def map_keys(state_dict: StateDict, rules: Rules,
             dropped_keys: re.Pattern) -> Conversion:
    """Rename every key by the first rule whose pattern matches it whole.

    Returns the converted state dict, the keys matching ``dropped_keys``
    (dropped on purpose, e.g. a classifier), and the keys no rule maps (to
    report: a converter must never lose a weight silently).
    """
    converted: 'OrderedDict[str, torch.Tensor]' = OrderedDict()
    dropped, unmapped = [], []
    for key, value in state_dict.items():
        if dropped_keys.match(key):
            dropped.append(key)
            continue
        for pattern, template in rules:
            if re.fullmatch(pattern, key):
                converted[re.sub(pattern, template, key)] = value
                break
        else:
            unmapped.append(key)
    return converted, dropped, unmapped


def timm_vit_to_mmseg(state_dict: StateDict) -> Conversion:
    """A timm ``vit_*_patch16_*`` state dict on mmseg's ViT keys (see
    :func:`map_keys` for what is returned)."""
    return map_keys(state_dict, TIMM_TO_MMSEG, CLASSIFIER)


def vit_to_white_box(state_dict: StateDict) -> Conversion:
    """A timm ``vit_*_patch16_*`` state dict, or one on mmseg's ViT keys
    (``layers.<i>.ln1``, as mmseg's converted Segmenter checkpoints), on
    ``WhiteBoxViT`` keys with MHSA or QKVCBSA attention and an MLP (see
    :func:`map_keys`)."""
    mmseg_keys = any(k.startswith('layers.') for k in state_dict)
    rules = MMSEG_TO_WHITE_BOX if mmseg_keys else TIMM_TO_WHITE_BOX
    return map_keys(state_dict, rules, CLASSIFIER)
