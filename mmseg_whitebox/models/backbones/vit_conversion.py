"""timm ViT state dicts -> mmseg ``VisionTransformer`` keys.

Next to the backbones it feeds (mmseg's ``VisionTransformer`` and this
project's ``WhiteBoxViT``, which shares its patch embedding, CLS token,
position embedding and final norm). Unlike mmseg's Segmenter configs, the
patch embedding keeps its bias: configs that load converted timm weights
set ``patch_bias=True``.
"""
from __future__ import annotations

import re
from collections import OrderedDict
from typing import Dict, List, Tuple

import torch

# timm key (regex) -> mmseg key (template)
TIMM_TO_MMSEG = [
    (r'cls_token', 'cls_token'),
    (r'pos_embed', 'pos_embed'),
    (r'patch_embed\.proj\.(weight|bias)', r'patch_embed.projection.\1'),
    (r'blocks\.(\d+)\.norm1\.(weight|bias)', r'layers.\1.ln1.\2'),
    (r'blocks\.(\d+)\.attn\.qkv\.weight',
     r'layers.\1.attn.attn.in_proj_weight'),
    (r'blocks\.(\d+)\.attn\.qkv\.bias', r'layers.\1.attn.attn.in_proj_bias'),
    (r'blocks\.(\d+)\.attn\.proj\.(weight|bias)',
     r'layers.\1.attn.attn.out_proj.\2'),
    (r'blocks\.(\d+)\.norm2\.(weight|bias)', r'layers.\1.ln2.\2'),
    (r'blocks\.(\d+)\.mlp\.fc1\.(weight|bias)',
     r'layers.\1.ffn.layers.0.0.\2'),
    (r'blocks\.(\d+)\.mlp\.fc2\.(weight|bias)', r'layers.\1.ffn.layers.1.\2'),
    (r'norm\.(weight|bias)', r'ln1.\1'),
]
#: classification parts, dropped on purpose
CLASSIFIER = re.compile(r'^(head|fc_norm|pre_logits)\.')


def timm_vit_to_mmseg(state_dict: Dict[str, torch.Tensor]
                      ) -> Tuple['OrderedDict[str, torch.Tensor]', List[str],
                                 List[str]]:
    """Map a timm ``vit_*_patch16_*`` state dict onto mmseg's ViT keys.

    Returns the converted state dict, the classification keys dropped on
    purpose, and the keys that could not be mapped (to report).
    """
    converted: 'OrderedDict[str, torch.Tensor]' = OrderedDict()
    dropped, unmapped = [], []
    for key, value in state_dict.items():
        if CLASSIFIER.match(key):
            dropped.append(key)
            continue
        for pattern, template in TIMM_TO_MMSEG:
            if re.fullmatch(pattern, key):
                converted[re.sub(pattern, template, key)] = value
                break
        else:
            unmapped.append(key)
    return converted, dropped, unmapped
