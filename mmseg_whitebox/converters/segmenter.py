"""Segmenter-codebase checkpoints -> this project's configs and keys.

Three published codebases share the Segmenter frame (Strudel et al., ICCV
2021; ``rstrudel/segmenter``): a ``Segmenter`` module with an ``encoder``
(a timm-like ViT: ``patch_embed.proj``, ``cls_token``, ``pos_embed``,
``blocks.<i>.{norm1,attn.qkv,attn.proj,norm2,mlp.fc1,mlp.fc2}``, ``norm``
and an unused ImageNet ``head``) and a ``decoder``, and a ``variant.yml``
beside the checkpoint whose ``net_kwargs`` describe the model. The
decoders, told apart by their keys:

* Segmenter mask transformer (``mask``): ``proj_dec``, ``blocks.<i>`` (the
  encoder's block), ``cls_emb``, ``proj_patch`` and ``proj_classes``
  (``d x d`` matrices applied as ``x @ P``), ``decoder_norm``,
  ``mask_norm`` -> mmseg's ``SegmenterMaskTransformerHead``;
* Segmenter linear (``linear``): ``head`` -> mmseg's ``FCNHead`` with
  ``num_convs=0`` (its 1x1 ``conv_seg``);
* DEPICT-SA / -CA (``QishuaiWen/DEPICT``; ``depict-sa``, ``depict-ca``):
  ``net`` (SA) or ``snet`` + ``cnet`` (CA) of ``layers.<i>.norm`` and
  ``layers.<i>.fn.{proj,step_size}`` (``proj`` a bare ``(K*p, d)``
  parameter), ``decoder_norm`` (SA) or ``snorm``/``cnorm`` (CA),
  ``cls_emb``, ``mask_norm`` -> :class:`MSSAHead`. The released code picks
  SA or CA by a default argument, not in ``variant.yml``: the keys decide;
* CBT (``QishuaiWen/CBSA``, ``CBSA_semantic_segmentation``; ``cbt``):
  ``net.layers.<i>.fn.{proj,step_rep,step_x,to_out}`` -> :class:`CBSAHead`
  (``step_rep`` is ``eta``, ``step_x`` is ``kappa``).

The released CBT decoder does not stop the gradient through its pooled
initial representatives, as the paper's eq. 5 does and this project's
``CBSA`` does by default. The forward pass is the same; to fine-tune a
converted CBT checkpoint with the released code's gradients, set
``attn_cfg=dict(rep_stop_grad=False)`` in the head.
"""
from __future__ import annotations

import glob
import math
import os.path as osp
import re
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple

import torch

from mmseg_whitebox.utils.tool_error import InputError
from .vit import (TIMM_TO_MMSEG, Conversion, Rules,
                                        StateDict, map_keys)

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
#: config families: folder, file-name prefix
FAMILIES = {
    'mask': ('segmenter', 'segmenter_vit-{size}_mask_'),
    'linear': ('segmenter', 'segmenter_vit-{size}_linear_'),
    'depict-sa': ('mssa', 'mssa_vit-{size}_'),
    'depict-ca': ('mssa', 'mssa-ca_vit-{size}_'),
    'cbt': ('cbsa', 'cbsa_vit-{size}_'),
}
SIZES = {192: 't', 384: 's', 768: 'b', 1024: 'l'}
DATASETS = {150: 'ade20k', 19: 'cityscapes', 60: 'pascal-context'}
# The released evaluation, segm/eval/miou.py (main): images resized by the
# dataset's test pipeline, short side ``im_size`` (segm/config.yml,
# dataset.<name>.im_size: ADE20K 512, Pascal Context 520, Cityscapes 1024)
# and long side at most ``max_ratio`` times it (segm/data/base.py
# update_default_config: img_scale = (max_ratio * im_size, im_size), with
# max_ratio from segm/data/config/{ade20k,pascal_context,cityscapes}.py: 4,
# 8, 2), whatever the window; the window is the training crop (the
# variant's crop_size, which segm/train.py also writes as net_kwargs
# image_size) and the stride the window less 32 pixels.
RELEASED_TEST_RESIZE = {'ade20k': (512, 4), 'pascal_context': (520, 8),
                        'cityscapes': (1024, 2)}
#: the released --multiscale ratios of the test resize target
#: (segm/data/base.py:88-107), each view also flipped
RELEASED_MULTISCALE_RATIOS = (0.5, 0.75, 1.0, 1.25, 1.5, 1.75)
#: the released dataset a class count names (the released Pascal Context
#: has 60 classes, background included), else the config's dataset
RELEASED_DATASETS = {150: 'ade20k', 60: 'pascal_context',
                     59: 'pascal_context', 19: 'cityscapes'}
CONFIG_DATASETS = {'ADE20KDataset': 'ade20k',
                   'PascalContextDataset': 'pascal_context',
                   'PascalContextDataset59': 'pascal_context',
                   'CityscapesDataset': 'cityscapes'}
WINDOW_OVERLAP = 32
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
    and the matching head (see :func:`~.vit.map_keys`
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


def model_settings(model: PublishedModel,
                   released_gradients: bool = False) -> Dict[str, Any]:
    """The ``model`` config (nested dict) the checkpoint needs: the
    released encoder's sizes, its patch-embedding bias, its LayerNorm
    eps (PyTorch's default, 1e-5; mmseg's Segmenter configs use timm's
    1e-6) and its position-embedding resize (bilinear,
    segm/model/utils.py resize_pos_embed; mmseg's configs: bicubic), the
    decoder's sizes, and the released evaluation's window, stride,
    normalisation and upsampling of small images (see
    :data:`RELEASED_TEST_RESIZE` and :class:`~mmseg_whitebox.models.
    data_preprocessors.ShortSideDataPreProcessor`). ``released_gradients``:
    CBT heads without the stop-gradient on the pooled representatives, as
    the released code trains."""
    d = model.d_model
    window = tuple(int(s) for s in model.image_size)
    mean, std = RELEASED_NORMALIZATION[model.normalization]
    settings: Dict[str, Any] = dict(
        backbone=dict(embed_dims=d, num_layers=model.n_layers,
                      num_heads=model.n_heads, patch_size=model.patch_size,
                      img_size=window, patch_bias=True,
                      norm_cfg=dict(eps=1e-5), interpolate_mode='bilinear'),
        data_preprocessor=dict(type='ShortSideDataPreProcessor', mean=mean,
                               std=std, test_short_side=min(window)),
        test_cfg=dict(mode='slide', crop_size=window,
                      stride=tuple(s - WINDOW_OVERLAP for s in window)))
    head: Dict[str, Any] = dict(in_channels=d, channels=d,
                                num_classes=model.n_cls)
    if model.kind == 'mask':
        head.update(embed_dims=d, num_heads=model.dec_heads,
                    num_layers=model.dec_layers)
    elif model.kind in ('depict-sa', 'depict-ca'):
        head.update(num_layers=model.dec_layers,
                    attn_cfg=dict(num_heads=model.dec_heads,
                                  head_dim=SELF_HEAD_DIM))
        if model.kind == 'depict-ca':
            # merged over attn_cfg: the same subspace count (describe
            # checks the released layers have it)
            head.update(num_cross_layers=model.cross_layers,
                        cross_attn_cfg=dict(head_dim=CROSS_HEAD_DIM))
    elif model.kind == 'cbt':
        head.update(num_layers=model.dec_layers,
                    attn_cfg=dict(num_heads=model.dec_heads,
                                  head_dim=SELF_HEAD_DIM,
                                  rep_grid=CBT_REP_GRID, out_proj='linear'))
        if released_gradients:
            head['attn_cfg']['rep_stop_grad'] = False
    settings['decode_head'] = head
    return settings


def converted_config(model: PublishedModel, config: str,
                     released_gradients: bool = False
                     ) -> Tuple[Any, Dict[str, Any], str]:
    """What the converted checkpoint of ``model`` needs on top of the
    ``config`` file: the merged mmengine ``Config``, the model overrides
    (dotted keys, :func:`model_settings` less what ``config`` has), and
    the text of a config file that inherits ``config`` and sets them and
    the released test resize and multi-scale views where the config's
    differ (:func:`released_pipeline`)."""
    import pprint

    from mmengine.config import Config
    cfg = Config.fromfile(config)
    overrides = differences(
        dict(model=model_settings(model, released_gradients)),
        dict(model=cfg.model.to_dict()))
    cfg.merge_from_dict(overrides)
    text = f'_base_ = {osp.abspath(config)!r}\n'
    settings = nested(overrides).get('model')
    if settings:
        text += f'model = {pprint.pformat(settings, sort_dicts=False)}\n'
    dataset = cfg.test_dataloader.dataset
    released = (RELEASED_DATASETS.get(model.n_cls) or CONFIG_DATASETS.get(
        dataset.get('dataset_type', dataset.type)))
    test_pipeline = released_pipeline(dataset.pipeline, released)
    if test_pipeline != dataset.pipeline:
        cfg.merge_from_dict({'test_dataloader.dataset.pipeline':
                             test_pipeline,
                             'val_dataloader.dataset.pipeline':
                             test_pipeline})
        text += ('# the released evaluation resize (segm/eval/miou.py, '
                 'segm/data/base.py)\n'
                 f'test_pipeline = {pprint.pformat(test_pipeline)}\n'
                 'val_dataloader = dict(dataset=dict(pipeline=test_pipeline))'
                 '\ntest_dataloader = dict(dataset=dict('
                 'pipeline=test_pipeline))\n')
    tta_pipeline = released_pipeline(cfg.get('tta_pipeline') or [], released)
    if tta_pipeline != (cfg.get('tta_pipeline') or []):
        cfg.tta_pipeline = tta_pipeline
        text += ('# the released multi-scale test on that resize (--tta)\n'
                 f'tta_pipeline = {pprint.pformat(tta_pipeline)}\n')
    return cfg, overrides, text


def released_scale(dataset: str, ratio: float = 1.0) -> Tuple[int, int]:
    """The released test resize target of ``dataset`` (a key of
    :data:`RELEASED_TEST_RESIZE`), scaled by ``ratio`` as mmseg 0.14.1's
    MultiScaleFlipAug scales it: ``(int(long * ratio), int(short *
    ratio))``."""
    short, max_ratio = RELEASED_TEST_RESIZE[dataset]
    return int(max_ratio * short * ratio), int(short * ratio)


def released_pipeline(pipeline: List[Dict[str, Any]],
                      dataset: Optional[str]) -> List[Dict[str, Any]]:
    """``pipeline`` (a config's test or TTA pipeline) with the released
    evaluation's resize for ``dataset`` (a key of
    :data:`RELEASED_TEST_RESIZE`; ``None`` or another: the pipeline as it
    is): a ``Resize`` goes to the released target; in a ``TestTimeAug``,
    the list of ``Resize`` views becomes the released multi-scale views
    (:data:`RELEASED_MULTISCALE_RATIOS` of the target). The upsampling of
    images below the window is the data preprocessor's
    (:func:`model_settings`)."""
    if dataset not in RELEASED_TEST_RESIZE:
        return pipeline
    out = []
    for step in pipeline:
        step = dict(step)
        if step.get('type') == 'Resize':
            step.update(scale=released_scale(dataset), keep_ratio=True)
        elif step.get('type') == 'TestTimeAug':
            step['transforms'] = [
                [dict(type='Resize', scale=released_scale(dataset, r),
                      keep_ratio=True)
                 for r in RELEASED_MULTISCALE_RATIOS]
                if views and all(v.get('type') == 'Resize' for v in views)
                else [dict(v) for v in views]
                for views in step['transforms']]
        out.append(step)
    return out


def pick_config(model: PublishedModel, configs_root: str) -> str:
    """This project's config for the model: its decoder family, its
    encoder size (else ViT-T, or the one config there is) and its dataset
    by class count (else ADE20K); :func:`model_settings` fills in what
    differs."""
    folder, prefix = FAMILIES[model.kind]
    sizes = [SIZES.get(model.d_model), 't', 's']
    datasets = [DATASETS.get(model.n_cls), 'ade20k']
    for size in [s for s in sizes if s]:
        for dataset in [d for d in datasets if d]:
            pattern = osp.join(configs_root, folder,
                               prefix.format(size=size) +
                               f'*_{dataset}-*.py')
            found = sorted(glob.glob(pattern))
            if found:
                return found[0]
    raise InputError(f'no config for a {model.kind} decoder under '
                     f'{osp.join(configs_root, folder)}')


def differences(settings: Dict[str, Any], config: Dict[str, Any],
                prefix: str = '') -> Dict[str, Any]:
    """The leaves of ``settings`` that ``config`` does not already have,
    as dotted keys (``model.backbone.embed_dims``)."""
    out: Dict[str, Any] = {}
    for key, value in settings.items():
        current = config.get(key) if isinstance(config, dict) else None
        if isinstance(value, dict):
            out.update(differences(value, current or {},
                                   f'{prefix}{key}.'))
        elif not _same(value, current):
            out[prefix + key] = value
    return out


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return list(a) == list(b)
    return a == b


def nested(dotted: Dict[str, Any]) -> Dict[str, Any]:
    """Dotted keys back into nested dicts."""
    out: Dict[str, Any] = {}
    for key, value in dotted.items():
        node = out
        *parents, leaf = key.split('.')
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = value
    return out


def load_strictly(model_cfg: Dict[str, Any],
                  state_dict: StateDict) -> torch.nn.Module:
    """Build ``model_cfg`` (an mmseg segmentor config, no pretrained
    weights) and load ``state_dict`` with ``strict=True``; a missing,
    unexpected or misshapen key raises ``ValueError`` naming them all."""
    from mmengine.registry import init_default_scope
    from mmseg.registry import MODELS
    init_default_scope('mmseg')
    model_cfg = dict(model_cfg, pretrained=None)
    model_cfg['backbone'] = dict(model_cfg['backbone'], init_cfg=None)
    model = MODELS.build(model_cfg)
    own = model.state_dict()
    missing = sorted(set(own) - set(state_dict))
    unexpected = sorted(set(state_dict) - set(own))
    shapes = [f'{k} {tuple(state_dict[k].shape)} vs {tuple(own[k].shape)}'
              for k in own if k in state_dict
              and state_dict[k].shape != own[k].shape]
    problems = [f'{what}: {", ".join(keys)}'
                for what, keys in (('missing', missing),
                                   ('unexpected', unexpected),
                                   ('shape (checkpoint vs model)', shapes))
                if keys]
    if problems:
        raise InputError('the converted weights do not load strictly into '
                         'the config: ' + '; '.join(problems))
    model.load_state_dict(state_dict, strict=True)
    return model
