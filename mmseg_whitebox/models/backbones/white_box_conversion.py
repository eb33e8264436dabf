"""Published white-box classification checkpoints -> ``WhiteBoxViT`` keys.

Two published layouts, both a pre-norm ``transformer.layers.<i>.0`` (the
attention step, ``PreNorm(attn)``) and ``.1`` (``PreNorm(ISTA)``), a
``pos_embedding``, a ``cls_token`` and a classifier ``mlp_head`` (a
LayerNorm on the CLS token, which becomes the final norm, then the dropped
linear classifier):

* the CBSA repository's ``CBSA_image_classification`` models (CBT, and its
  CRATE and ToST variants): a convolutional stem
  ``to_patch_embedding.proj.<0,2,4,6>`` (conv, BatchNorm), attention
  weights ``fn.proj`` (CBSA) or ``fn.qkv`` (MSSA, TSSA), step sizes
  ``fn.step_rep`` (eta) and ``fn.step_x`` (kappa), TSSA's ``fn.temp``, and
  ``fn.to_out``; configs set ``stem_cfg=dict(type='ConvPatchStem')``;
* the CRATE repository's models: a normalised linear patch embedding
  ``to_patch_embedding.<1,2,3>`` (LayerNorm, Linear, LayerNorm), ``fn.qkv``
  and ``fn.to_out.0``; configs set ``stem_cfg=dict(type='NormedPatchEmbed')``.

The published CBSA pools its representatives from ``w[:, :-1]`` (the last
token dropped, although the CLS token is the first); this project pools
the patch grid, so a converted CBT gives the published model's features up
to that difference.
"""
from __future__ import annotations

import re

from .vit_conversion import Conversion, Rules, StateDict, map_keys

ATTN = r'transformer\.layers\.(\d+)\.0\.'
FFN = r'transformer\.layers\.(\d+)\.1\.'
NORM_PARAMS = r'(weight|bias|running_mean|running_var|num_batches_tracked)'

SHARED: Rules = [
    (r'cls_token', 'cls_token'),
    (r'pos_embedding', 'pos_embed'),
    (ATTN + r'norm\.(weight|bias)', r'layers.\1.norm.\2'),
    (ATTN + r'fn\.(proj|qkv)\.weight', r'layers.\1.attn.proj.weight'),
    (FFN + r'norm\.(weight|bias)', r'layers.\1.norm2.\2'),
    (FFN + r'fn\.weight', r'layers.\1.ffn.weight'),
    (r'mlp_head\.0\.(weight|bias)', r'ln1.\1'),
]
CBSA_REPOSITORY: Rules = SHARED + [
    (r'to_patch_embedding\.proj\.([0246])\.0\.weight',
     lambda m: f'patch_embed.layers.{int(m[1]) // 2}.conv.weight'),
    (r'to_patch_embedding\.proj\.([0246])\.1\.' + NORM_PARAMS,
     lambda m: f'patch_embed.layers.{int(m[1]) // 2}.bn.{m[2]}'),
    (ATTN + r'fn\.step_rep', r'layers.\1.attn.eta'),
    (ATTN + r'fn\.step_x', r'layers.\1.attn.kappa'),
    (ATTN + r'fn\.temp', r'layers.\1.attn.temp'),
    (ATTN + r'fn\.to_out\.(weight|bias)', r'layers.\1.attn.out_proj.\2'),
]
CRATE_REPOSITORY: Rules = SHARED + [
    (r'to_patch_embedding\.1\.(weight|bias)', r'patch_embed.pre_norm.\1'),
    (r'to_patch_embedding\.2\.(weight|bias)', r'patch_embed.projection.\1'),
    (r'to_patch_embedding\.3\.(weight|bias)', r'patch_embed.norm.\1'),
    (ATTN + r'fn\.to_out\.0\.(weight|bias)', r'layers.\1.attn.out_proj.\2'),
]
LAYOUTS = {'cbsa': CBSA_REPOSITORY, 'crate': CRATE_REPOSITORY}
CLASSIFIER = re.compile(r'^mlp_head\.1\.')


def detect_layout(state_dict: StateDict) -> str:
    """``'cbsa'`` (convolutional stem) or ``'crate'`` (normalised linear
    patch embedding), from the patch-embedding keys."""
    keys = list(state_dict)
    if any(k.startswith('to_patch_embedding.proj.') for k in keys):
        return 'cbsa'
    if any(k.startswith('to_patch_embedding.2.') for k in keys):
        return 'crate'
    raise ValueError('not a published CBT/CRATE classification state dict: '
                     'no to_patch_embedding.proj.* (CBSA repository) or '
                     'to_patch_embedding.2.* (CRATE repository) keys')


def white_box_to_mmseg(state_dict: StateDict,
                       layout: str = 'auto') -> Conversion:
    """A published CBT / CRATE / ToST classification state dict on
    ``WhiteBoxViT`` keys (see :func:`~.vit_conversion.map_keys` for what is
    returned). ``layout``: ``'cbsa'``, ``'crate'`` or ``'auto'``."""
    if layout == 'auto':
        layout = detect_layout(state_dict)
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be 'auto' or one of {list(LAYOUTS)}, "
                         f'got {layout!r}')
    return map_keys(state_dict, LAYOUTS[layout], CLASSIFIER)
