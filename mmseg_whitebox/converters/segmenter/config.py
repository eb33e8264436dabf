"""The config a converted Segmenter-codebase checkpoint needs: this
project's config of its family, the released model's settings on top,
the released evaluation's test resize."""
from __future__ import annotations

import glob
import os.path as osp
from typing import Any, Dict, List, Optional, Tuple

import torch

from mmseg_whitebox.utils.tool_error import InputError
from ..vit import StateDict
from .checkpoint import (CBT_REP_GRID, CROSS_HEAD_DIM, DATASETS,
                         RELEASED_DATASETS, RELEASED_NORMALIZATION,
                         SELF_HEAD_DIM, PublishedModel)

#: config families: folder, file-name prefix
FAMILIES = {
    'mask': ('segmenter', 'segmenter_vit-{size}_mask_'),
    'linear': ('segmenter', 'segmenter_vit-{size}_linear_'),
    'depict-sa': ('mssa', 'mssa_vit-{size}_'),
    'depict-ca': ('mssa', 'mssa-ca_vit-{size}_'),
    'cbt': ('cbsa', 'cbsa_vit-{size}_'),
}
SIZES = {192: 't', 384: 's', 768: 'b', 1024: 'l'}
#: the released evaluation's test resize (segm/eval/miou.py): short side
#: ``im_size`` (segm/config.yml), long side at most ``max_ratio`` times it
#: (segm/data/config/<dataset>.py), whatever the window; the window is the
#: training crop, the stride the window less :data:`WINDOW_OVERLAP`
RELEASED_TEST_RESIZE = {'ade20k': (512, 4), 'pascal_context': (520, 8),
                        'cityscapes': (1024, 2)}
#: the released --multiscale ratios of the test resize target
#: (segm/data/base.py:88-107), each view also flipped
RELEASED_MULTISCALE_RATIOS = (0.5, 0.75, 1.0, 1.25, 1.5, 1.75)
CONFIG_DATASETS = {'ADE20KDataset': 'ade20k',
                   'PascalContextDataset': 'pascal_context',
                   'PascalContextDataset59': 'pascal_context',
                   'CityscapesDataset': 'cityscapes'}
WINDOW_OVERLAP = 32


def model_settings(model: PublishedModel,
                   released_gradients: bool = False) -> Dict[str, Any]:
    """The ``model`` config (nested dict) the checkpoint needs: the
    released encoder's sizes, patch-embedding bias, LayerNorm eps (1e-5,
    not timm's 1e-6) and bilinear position-embedding resize, the decoder's
    sizes, and the released evaluation's window, stride, normalisation and
    upsampling of small images. ``released_gradients``: CBT heads without
    the stop-gradient on the pooled representatives."""
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
    """``(merged Config, model overrides as dotted keys, text of a config
    inheriting ``config``)`` for the converted checkpoint of ``model``:
    :func:`model_settings` less what ``config`` has, and the released
    test pipelines (:func:`released_pipeline`) where they differ."""
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
    """``pipeline`` (test or TTA) with the released resize for ``dataset``
    (a key of :data:`RELEASED_TEST_RESIZE`, else unchanged): a ``Resize``
    to the released target, a ``TestTimeAug``'s ``Resize`` views to the
    released multi-scale views."""
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
    """This project's config for the model's decoder family, encoder size
    (else ViT-T or -S) and dataset (else ADE20K)."""
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
    """Build ``model_cfg`` (without pretrained weights) and load
    ``state_dict`` strictly; ``ValueError`` naming every bad key."""
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
