"""Published white-box classification checkpoints -> ``WhiteBoxViT`` keys.

Three layouts (:data:`LAYOUTS`):

* ``cbsa``, the CBSA repository's ``CBSA_image_classification`` models
  (CBT, and its CRATE and ToST variants), and ``crate``, the CRATE
  repository's: pre-norm ``transformer.layers.<i>.0`` (attention) and
  ``.1`` (ISTA), ``pos_embedding``, ``cls_token`` and an ``mlp_head``
  whose LayerNorm becomes the final norm. ``cbsa`` has a convolutional
  stem (configs set ``stem_cfg=dict(type='ConvPatchStem')``), ``crate`` a
  normalised linear patch embedding (``NormedPatchEmbed``).
* ``tost``, ToST's own (``RobinWu218/ToST``, the ``tost_cab_*`` models):
  timm-like ``blocks.<i>`` with a ``qkv`` bias (configs set
  ``attn_cfg=dict(proj_bias=True)``) and layer scales, folded into the
  linear layers they multiply. Its parts outside the blocks (Fourier
  position encoding, CLS token, class-attention layers, classifier) are
  dropped, to be trained anew.

The published CBSA pools its representatives from ``w[:, :-1]``; the CBT
encoder configs set ``rep_pool='leading'`` to compute the same.
"""
from __future__ import annotations

import re

from mmseg_whitebox.utils.tool_error import InputError
from .vit import Conversion, Rules, StateDict, map_keys

ATTN = r'transformer\.layers\.(\d+)\.0\.'
FFN = r'transformer\.layers\.(\d+)\.1\.'
NORM_PARAMS = r'(weight|bias|running_mean|running_var|num_batches_tracked)'


def conv_stem_rules(prefix: str) -> Rules:
    """The released convolutional stem under ``prefix`` (``<prefix>.<0,2,4,
    6>``: conv, BatchNorm) -> ``ConvPatchStem``'s ``layers.<i>``."""
    return [
        (prefix + r'\.([0246])\.0\.weight',
         lambda m: f'patch_embed.layers.{int(m[1]) // 2}.conv.weight'),
        (prefix + r'\.([0246])\.1\.' + NORM_PARAMS,
         lambda m: f'patch_embed.layers.{int(m[1]) // 2}.bn.{m[2]}'),
    ]


SHARED: Rules = [
    (r'cls_token', 'cls_token'),
    (r'pos_embedding', 'pos_embed'),
    (ATTN + r'norm\.(weight|bias)', r'layers.\1.norm.\2'),
    (ATTN + r'fn\.(proj|qkv)\.weight', r'layers.\1.attn.proj.weight'),
    (FFN + r'norm\.(weight|bias)', r'layers.\1.norm2.\2'),
    (FFN + r'fn\.weight', r'layers.\1.ffn.weight'),
    (r'mlp_head\.0\.(weight|bias)', r'ln1.\1'),
]
CBSA_REPOSITORY: Rules = SHARED + conv_stem_rules(
    r'to_patch_embedding\.proj') + [
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
BLOCK = r'blocks\.(\d+)\.'
TOST_REPOSITORY: Rules = conv_stem_rules(r'patch_embed\.proj') + [
    (BLOCK + r'norm1\.(weight|bias)', r'layers.\1.norm.\2'),
    (BLOCK + r'attn\.qkv\.(weight|bias)', r'layers.\1.attn.proj.\2'),
    (BLOCK + r'attn\.temp', r'layers.\1.attn.temp'),
    (BLOCK + r'attn\.to_out\.0\.(weight|bias)',
     r'layers.\1.attn.out_proj.\2'),
    (BLOCK + r'norm2\.(weight|bias)', r'layers.\1.norm2.\2'),
    (BLOCK + r'mlp\.fc1\.(weight|bias)', r'layers.\1.ffn.layers.0.0.\2'),
    (BLOCK + r'mlp\.fc2\.(weight|bias)', r'layers.\1.ffn.layers.1.\2'),
    (BLOCK + r'(gamma[12])', r'\1.\2'),  # folded by fold_layer_scales
]
#: layer scale -> the linear layer whose output it multiplies
LAYER_SCALES = {'gamma1': 'layers.{}.attn.out_proj',
                'gamma2': 'layers.{}.ffn.layers.1'}
LAYOUTS = {'cbsa': CBSA_REPOSITORY, 'crate': CRATE_REPOSITORY,
           'tost': TOST_REPOSITORY}
CLASSIFIER = re.compile(r'^mlp_head\.1\.')
#: ToST's parts outside its self-attention blocks (see the module doc)
TOST_NOT_REPRODUCED = re.compile(
    r'^(head\.|norm\.|cls_token$|pos_embeder\.|cls_attn_blocks\.)')
DROPPED = {'cbsa': CLASSIFIER, 'crate': CLASSIFIER,
           'tost': TOST_NOT_REPRODUCED}


def fold_layer_scales(state: StateDict) -> StateDict:
    """Fold ToST's ``gamma * linear(x)`` layer scales (``<i>.gamma1``,
    ``<i>.gamma2`` keys, as the rules leave them) into the linear layers'
    weights and biases: ``diag(gamma) W`` and ``gamma * b``."""
    folded = type(state)()
    scales = {}
    for key, value in state.items():
        match = re.fullmatch(r'(\d+)\.(gamma[12])', key)
        if match:
            scales[LAYER_SCALES[match[2]].format(match[1])] = value
        else:
            folded[key] = value
    for linear, gamma in scales.items():
        folded[linear + '.weight'] = gamma[:, None] * folded[linear +
                                                             '.weight']
        folded[linear + '.bias'] = gamma * folded[linear + '.bias']
    return folded


def detect_layout(state_dict: StateDict) -> str:
    """``'cbsa'`` (convolutional stem), ``'crate'`` (normalised linear
    patch embedding) or ``'tost'`` (ToST's ``blocks.<i>.attn.temp``)."""
    keys = list(state_dict)
    if any(re.match(r'blocks\.\d+\.attn\.temp$', k) for k in keys):
        return 'tost'
    if any(k.startswith('to_patch_embedding.proj.') for k in keys):
        return 'cbsa'
    if any(k.startswith('to_patch_embedding.2.') for k in keys):
        return 'crate'
    raise InputError('not a published CBT/CRATE/ToST classification state '
                     'dict: no to_patch_embedding.proj.* (CBSA repository), '
                     'to_patch_embedding.2.* (CRATE repository) or '
                     'blocks.<i>.attn.temp (ToST repository) keys')


def white_box_to_mmseg(state_dict: StateDict,
                       layout: str = 'auto') -> Conversion:
    """A published CBT / CRATE / ToST classification state dict on
    ``WhiteBoxViT`` keys (see :func:`~.vit.map_keys` for what is
    returned; ToST's layer scales folded in). ``layout``: ``'cbsa'``,
    ``'crate'``, ``'tost'`` or ``'auto'``."""
    if layout == 'auto':
        layout = detect_layout(state_dict)
    if layout not in LAYOUTS:
        raise InputError(f"layout must be 'auto' or one of {list(LAYOUTS)}, "
                         f'got {layout!r}')
    converted, dropped, unmapped = map_keys(state_dict, LAYOUTS[layout],
                                            DROPPED[layout])
    return fold_layer_scales(converted), dropped, unmapped
