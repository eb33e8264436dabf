"""Reading a Segmenter-codebase checkpoint: its decoder kind, its keys on
mmseg's, its sizes checked against its ``variant.yml``."""
from __future__ import annotations

import math
import os.path as osp
import re
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple

from mmseg_whitebox.utils.tool_error import InputError
from ..vit import TIMM_TO_MMSEG, Conversion, Rules, StateDict, map_keys

KINDS = ('mask', 'linear', 'depict-sa', 'depict-ca', 'cbt')
#: the Segmenter encoder is timm's ViT: timm's rules, under new prefixes
ENCODER: Rules = [(r'encoder\.' + pattern, 'backbone.' + template)
                  for pattern, template in TIMM_TO_MMSEG]
SEGMENTER_BLOCKS: Rules = [
    (r'decoder\.' + pattern, 'decode_head.' + template)
    for pattern, template in TIMM_TO_MMSEG if pattern.startswith('blocks')]
MASK_NORMS: Rules = [
    (r'decoder\.cls_emb', 'decode_head.cls_emb'),
    (r'decoder\.mask_norm\.(weight|bias)', r'decode_head.mask_norm.\1'),
]
SUBSPACE_NORM = r'\.layers\.(\d+)\.norm\.(weight|bias)'
DECODERS: Dict[str, Rules] = {
    'mask': SEGMENTER_BLOCKS + MASK_NORMS + [
        (r'decoder\.proj_dec\.(weight|bias)', r'decode_head.dec_proj.\1'),
        (r'decoder\.proj_patch', 'decode_head.patch_proj.weight'),
        (r'decoder\.proj_classes', 'decode_head.classes_proj.weight'),
        (r'decoder\.decoder_norm\.(weight|bias)',
         r'decode_head.decoder_norm.\1'),
    ],
    'linear': [(r'decoder\.head\.(weight|bias)', r'decode_head.conv_seg.\1')],
    'depict-sa': MASK_NORMS + [
        (r'decoder\.net' + SUBSPACE_NORM, r'decode_head.layers.\1.norm.\2'),
        (r'decoder\.net\.layers\.(\d+)\.fn\.proj',
         r'decode_head.layers.\1.attn.proj.weight'),
        (r'decoder\.net\.layers\.(\d+)\.fn\.step_size',
         r'decode_head.layers.\1.attn.step_size'),
        (r'decoder\.decoder_norm\.(weight|bias)',
         r'decode_head.decoder_norm.\1'),
    ],
    'depict-ca': MASK_NORMS + [
        (r'decoder\.snet' + SUBSPACE_NORM, r'decode_head.layers.\1.norm.\2'),
        (r'decoder\.snet\.layers\.(\d+)\.fn\.proj',
         r'decode_head.layers.\1.attn.proj.weight'),
        (r'decoder\.snet\.layers\.(\d+)\.fn\.step_size',
         r'decode_head.layers.\1.attn.step_size'),
        (r'decoder\.cnet' + SUBSPACE_NORM,
         r'decode_head.cross_layers.\1.norm.\2'),
        (r'decoder\.cnet\.layers\.(\d+)\.fn\.proj',
         r'decode_head.cross_layers.\1.attn.proj.weight'),
        (r'decoder\.cnet\.layers\.(\d+)\.fn\.step_size',
         r'decode_head.cross_layers.\1.attn.step_size'),
        (r'decoder\.snorm\.(weight|bias)', r'decode_head.decoder_norm.\1'),
        (r'decoder\.cnorm\.(weight|bias)', r'decode_head.class_norm.\1'),
    ],
    'cbt': MASK_NORMS + [
        (r'decoder\.net' + SUBSPACE_NORM, r'decode_head.layers.\1.norm.\2'),
        (r'decoder\.net\.layers\.(\d+)\.fn\.proj\.weight',
         r'decode_head.layers.\1.attn.proj.weight'),
        (r'decoder\.net\.layers\.(\d+)\.fn\.step_rep',
         r'decode_head.layers.\1.attn.eta'),
        (r'decoder\.net\.layers\.(\d+)\.fn\.step_x',
         r'decode_head.layers.\1.attn.kappa'),
        (r'decoder\.net\.layers\.(\d+)\.fn\.to_out\.(weight|bias)',
         r'decode_head.layers.\1.attn.out_proj.\2'),
        (r'decoder\.decoder_norm\.(weight|bias)',
         r'decode_head.decoder_norm.\1'),
    ],
}
#: the encoder's ImageNet classifier, unused by every segmenter
CLASSIFIER = re.compile(r'^encoder\.head\.')
#: subspace dimensions the released decoders hard-code
SELF_HEAD_DIM, CROSS_HEAD_DIM, CBT_REP_GRID = 100, 50, (10, 10)
DATASETS = {150: 'ade20k', 19: 'cityscapes', 60: 'pascal-context'}
#: the released dataset a class count names (the released Pascal Context
#: has 60 classes, background included), else the config's dataset
RELEASED_DATASETS = {150: 'ade20k', 60: 'pascal_context',
                     59: 'pascal_context', 19: 'cityscapes'}
# segm/data/utils.py STATS, scaled and rounded to 2 decimals as
# segm/data/base.py does (BaseMMSeg.__init__): np.round(255 * v, 2)
RELEASED_NORMALIZATION = {
    'vit': ([127.5] * 3, [127.5] * 3),
    'deit': ([123.68, 116.28, 103.53], [58.4, 57.12, 57.38]),
}


def detect_decoder(state_dict: StateDict) -> str:
    """Which published decoder the ``decoder.*`` keys are (see
    :data:`KINDS`)."""
    keys = [k for k in state_dict if k.startswith('decoder.')]
    if any(k.startswith('decoder.snet.') for k in keys):
        return 'depict-ca'
    if any(re.fullmatch(r'decoder\.net\.layers\.\d+\.fn\.step_x', k)
           for k in keys):
        return 'cbt'
    if any(re.fullmatch(r'decoder\.net\.layers\.\d+\.fn\.proj', k)
           for k in keys):
        return 'depict-sa'
    if 'decoder.proj_patch' in keys:
        return 'mask'
    if 'decoder.head.weight' in keys:
        return 'linear'
    raise InputError(
        'not a Segmenter-codebase checkpoint with a known decoder: expected '
        'decoder.proj_patch (Segmenter mask), decoder.head.weight (linear), '
        'decoder.net.layers.* (DEPICT-SA, CBT) or decoder.snet.* '
        f'(DEPICT-CA); found {len(keys)} decoder.* keys' +
        (f' such as {keys[0]}' if keys else ''))


def segmenter_to_mmseg(state_dict: StateDict,
                       kind: str = 'auto') -> Conversion:
    """A Segmenter-codebase state dict (Segmenter, DEPICT or CBT) on the
    keys of an mmseg ``EncoderDecoder`` with mmseg's ``VisionTransformer``
    and the matching head (see :func:`~..vit.map_keys`
    for what is returned). Matrices the released code applies as
    ``x @ P`` are transposed into ``Linear`` weights, the linear decoder's
    classifier becomes a 1x1 convolution."""
    if kind == 'auto':
        kind = detect_decoder(state_dict)
    if kind not in DECODERS:
        raise InputError(f"kind must be 'auto' or one of {KINDS}, "
                         f'got {kind!r}')
    converted, dropped, unmapped = map_keys(state_dict,
                                            ENCODER + DECODERS[kind],
                                            CLASSIFIER)
    for key in ('decode_head.patch_proj.weight',
                'decode_head.classes_proj.weight'):
        if key in converted:
            converted[key] = converted[key].t().contiguous()
    if 'decode_head.conv_seg.weight' in converted:
        weight = converted['decode_head.conv_seg.weight']
        converted['decode_head.conv_seg.weight'] = weight[..., None, None]
    return converted, dropped, unmapped


def read_variant(path: str) -> Dict[str, Any]:
    """``net_kwargs`` of a Segmenter-codebase ``variant.yml``. The file is
    written by ``yaml.dump``, which tags tuples ``!!python/tuple``: read
    as lists, nothing else beyond plain YAML is constructed."""
    import yaml

    class Loader(yaml.SafeLoader):
        pass

    Loader.add_constructor(
        'tag:yaml.org,2002:python/tuple',
        lambda loader, node: loader.construct_sequence(node))
    if not osp.isfile(path):
        raise InputError(f'variant file {path!r} does not exist')
    try:
        with open(path, encoding='utf-8') as f:
            variant = yaml.load(f, Loader=Loader)
    except yaml.YAMLError as exc:
        raise InputError(f'{path!r} is not a readable variant.yml: '
                         f'{exc}') from exc
    if not isinstance(variant, dict) or not isinstance(
            variant.get('net_kwargs'), dict):
        raise InputError(f'{path!r} has no net_kwargs mapping (not a '
                         'Segmenter-codebase variant.yml)')
    return variant['net_kwargs']


@dataclass
class PublishedModel:
    """What a published checkpoint is, from its shapes (and variant)."""
    kind: str
    d_model: int
    n_layers: int
    n_heads: int
    patch_size: int
    image_size: Tuple[int, int]
    n_cls: int
    dec_layers: int = 0
    dec_heads: int = 0
    cross_layers: int = 0
    normalization: str = 'vit'
    notes: List[str] = field(default_factory=list)


def _count(state_dict: StateDict, pattern: str) -> int:
    found = {m[1] for k in state_dict if (m := re.fullmatch(pattern, k))}
    return len(found)


def _heads(rows: int, head_dim: int, what: str) -> int:
    if rows % head_dim:
        raise InputError(f'{what}: {rows} projection rows are not a '
                         f'multiple of the published {head_dim}-dim '
                         'subspaces')
    return rows // head_dim


def describe(state_dict: StateDict,
             net_kwargs: Optional[Dict[str, Any]] = None) -> PublishedModel:
    """Read the model's sizes from the state dict and check them against
    ``net_kwargs`` (from :func:`read_variant`; ``None``: the encoder's
    head count is taken as ``d_model // 64``, as the released
    factories do for the decoder, and the image size from the position
    embedding). Raises ``ValueError`` listing every disagreement."""
    kind = detect_decoder(state_dict)
    net = dict(net_kwargs or {})
    decoder = dict(net.get('decoder') or {})
    for key in ('encoder.pos_embed', 'encoder.patch_embed.proj.weight'):
        if key not in state_dict:
            raise InputError(f'{key} is missing: not a Segmenter-codebase '
                             'checkpoint with a ViT encoder')
    pos = state_dict['encoder.pos_embed']
    d_model = pos.shape[-1]
    patch = state_dict['encoder.patch_embed.proj.weight'].shape[-1]
    extra = 2 if 'encoder.dist_token' in state_dict else 1
    grid = math.isqrt(pos.shape[1] - extra)
    notes = []
    if 'image_size' in net:
        image_size = tuple(int(s) for s in net['image_size'])
    else:
        image_size = (grid * patch, grid * patch)
        notes.append(f'image size {image_size} read from the position '
                     'embedding (no variant)')
    n_heads = int(net.get('n_heads', max(d_model // 64, 1)))
    if 'n_heads' not in net:
        notes.append(f'encoder heads {n_heads} = d_model // 64 (no variant)')
    norm_key = ('decoder.head.weight' if kind == 'linear' else
                'decoder.mask_norm.weight')
    model = PublishedModel(
        kind=kind, d_model=d_model,
        n_layers=_count(state_dict, r'encoder\.blocks\.(\d+)\..*'),
        n_heads=n_heads, patch_size=patch, image_size=image_size,
        n_cls=state_dict[norm_key].shape[0] if norm_key in state_dict else 0,
        notes=notes)
    if kind == 'mask':
        model.dec_layers = _count(state_dict, r'decoder\.blocks\.(\d+)\..*')
        model.dec_heads = max(d_model // 64, 1)  # the released factory's
    elif kind in ('depict-sa', 'cbt'):
        model.dec_layers = _count(state_dict,
                                  r'decoder\.net\.layers\.(\d+)\..*')
        proj = 'decoder.net.layers.0.fn.proj'
        if kind == 'cbt':
            proj += '.weight'
        if proj in state_dict:
            model.dec_heads = _heads(state_dict[proj].shape[0],
                                     SELF_HEAD_DIM, proj)
    elif kind == 'depict-ca':
        model.dec_layers = _count(state_dict,
                                  r'decoder\.snet\.layers\.(\d+)\..*')
        model.cross_layers = _count(state_dict,
                                    r'decoder\.cnet\.layers\.(\d+)\..*')
        for net_name, head_dim in (('snet', SELF_HEAD_DIM),
                                   ('cnet', CROSS_HEAD_DIM)):
            proj = f'decoder.{net_name}.layers.0.fn.proj'
            if proj in state_dict:
                heads = _heads(state_dict[proj].shape[0], head_dim, proj)
                if model.dec_heads and heads != model.dec_heads:
                    raise InputError(
                        f'DEPICT-CA with {model.dec_heads} self-attention '
                        f'and {heads} cross-attention subspaces: the '
                        'released decoder uses n_heads for both')
                model.dec_heads = heads
    _check_variant(model, net, decoder)
    return model


def _check_variant(model: PublishedModel, net: Dict[str, Any],
                   decoder: Dict[str, Any]) -> None:
    wrong = []

    def check(name: str, variant: Any, found: Any) -> None:
        if variant is not None and variant != found:
            wrong.append(f'{name}: variant.yml says {variant}, the '
                         f'checkpoint has {found}')

    check('d_model', net.get('d_model'), model.d_model)
    check('n_layers (encoder)', net.get('n_layers'), model.n_layers)
    check('patch_size', net.get('patch_size'), model.patch_size)
    check('n_cls', net.get('n_cls'), model.n_cls)
    check('decoder n_layers', decoder.get('n_layers'), model.dec_layers)
    if model.kind in ('depict-sa', 'depict-ca', 'cbt'):
        check('decoder n_heads', decoder.get('n_heads'), model.dec_heads)
    name = decoder.get('name')
    if name is not None:
        expected = 'linear' if model.kind == 'linear' else 'mask_transformer'
        if (expected == 'linear') != ('linear' in str(name)):
            wrong.append(f'decoder name: variant.yml says {name!r}, the '
                         f'checkpoint holds a {model.kind} decoder')
    if net.get('distilled'):
        wrong.append('distilled DeiT encoders (dist_token) have no '
                     "counterpart in mmseg's VisionTransformer")
    if wrong:
        raise InputError('the checkpoint and its variant.yml disagree, or '
                         'the model cannot be converted: ' + '; '.join(wrong))
    normalization = net.get('normalization', 'vit')
    if normalization not in RELEASED_NORMALIZATION:
        raise InputError(f'normalization {normalization!r} in variant.yml '
                         'is not one the released code defines (vit, '
                         'deit)')
    model.normalization = normalization
    if model.n_cls not in DATASETS:
        model.notes.append(
            f'no dataset config for {model.n_cls} classes (configs/ has '
            'ADE20K 150, Cityscapes 19 and the released Pascal Context 60, '
            'background included): the config keeps its dataset and metric' +
            ('; the test-time resize is the released one for that dataset'
             if model.n_cls in RELEASED_DATASETS else ''))
    if normalization == 'deit':
        model.notes.append('DeiT normalisation: ImageNet mean/std')
