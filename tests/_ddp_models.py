"""The models trained under DDP by tests/test_ddp_models.py (through
tests/ddp_worker.py) and what both sides need to agree on: each model's
tiny config, the crops every rank trains on, and the optimizer.

Every decode head (CBSA over-parameterised and rigorous, MSSA self- and
cross-attention, TSSA, the Segmenter mask and linear heads) and every
``WhiteBoxViT`` encoder (CRATE, ToST, CBT, CRATE+CBT, the CBSA-adapted
ViT), each from the config users train it with, shrunk: 32x32 crops (a
4x4 token grid), width 32, one or two layers, 2x2 representatives, four
classes, no dropout or drop path (so that a one-process reference can
reproduce the step exactly) and no pretrained weights.
"""
from __future__ import annotations

from typing import Any, Dict, List, Tuple

import torch

CROP = 32
WIDTH = 32
NUM_CLASSES = 4
#: training iterations per model, each on one crop per rank
ITERS = 2
WORLD_SIZE = 2
#: plain SGD with momentum (no weight decay, no schedule): the step is a
#: linear function of the gradient, so the comparison measures the
#: gradient all-reduce and nothing an adaptive optimizer would amplify
OPTIMIZER = dict(type='SGD', lr=0.05, momentum=0.9)

# every encoder: a 32x32 crop in 8x8 patches, width 32, no drop path; no
# pretrained weights (mmseg's ViT: no pretrained; WhiteBoxViT: no init_cfg)
_ENCODER = {
    'model.pretrained': None,
    'model.data_preprocessor.size': (CROP, CROP),
    'model.backbone.img_size': (CROP, CROP),
    'model.backbone.patch_size': 8,
    'model.backbone.embed_dims': WIDTH,
    'model.backbone.num_layers': 1,
    'model.backbone.drop_path_rate': 0.0,
    'model.decode_head.num_classes': NUM_CLASSES,
    'model.decode_head.in_channels': WIDTH,
    'model.decode_head.channels': WIDTH,
}
#: mmseg's VisionTransformer (the demo and published ViT encoders)
_VIT = dict(_ENCODER, **{'model.backbone.num_heads': 2,
                         'model.backbone.drop_rate': 0.0,
                         'model.backbone.attn_drop_rate': 0.0})
#: a WhiteBoxViT encoder trained from scratch
_WHITE_BOX = dict(_ENCODER, **{'model.backbone.init_cfg': None})
#: the white-box heads: one layer of 2 subspaces x 16
_HEAD = {'model.decode_head.num_layers': 1,
         'model.decode_head.attn_cfg.num_heads': 2,
         'model.decode_head.attn_cfg.head_dim': 16}
_CBSA_HEAD = dict(_HEAD, **{'model.decode_head.attn_cfg.rep_grid': (2, 2)})
#: the Segmenter mask head (mmseg's, or with the released initialisation)
_SEGMENTER_HEAD = {'model.decode_head.num_layers': 1,
                   'model.decode_head.num_heads': 2,
                   'model.decode_head.embed_dims': WIDTH,
                   'model.decode_head.drop_path_rate': 0.0,
                   'model.decode_head.drop_rate': 0.0,
                   'model.decode_head.attn_drop_rate': 0.0}

_CRATE_MSSA = dict(type='MSSA', num_heads=2, head_dim=16, out_proj='linear',
                   basis_init='trunc_normal', step_size=False)
_CBT_CBSA = dict(type='CBSA', num_heads=2, head_dim=16, rep_grid=(2, 2),
                 out_proj='linear', rep_pool='leading')

#: name -> (config, options that shrink it); the heads on the ViT encoder
#: of their demo configs (the linear head: its published config), the
#: encoders under the head of their demo or published config
MODELS: Dict[str, Tuple[str, Dict[str, Any]]] = {
    'cbsa': ('configs/cbsa/cbsa_vit-demo_1xb8-800iter_synthade-128x128.py',
             dict(_VIT, **_CBSA_HEAD)),
    'cbsa-rigorous': (
        'configs/cbsa/'
        'cbsa-rigorous_vit-demo_1xb8-800iter_synthade-128x128.py',
        dict(_VIT, **_CBSA_HEAD)),
    'mssa': ('configs/mssa/mssa_vit-demo_1xb8-800iter_synthade-128x128.py',
             dict(_VIT, **_HEAD)),
    'mssa-ca': (
        'configs/mssa/mssa-ca_vit-demo_1xb8-800iter_synthade-128x128.py',
        dict(_VIT, **_HEAD, **{
            'model.decode_head.num_cross_layers': 1,
            'model.decode_head.cross_attn_cfg.head_dim': 8})),
    'tssa': ('configs/tssa/tssa_vit-demo_1xb8-800iter_synthade-128x128.py',
             dict(_VIT, **_HEAD)),
    'segmenter-mask': (
        'configs/segmenter/'
        'segmenter_vit-demo_mask_1xb8-800iter_synthade-128x128.py',
        dict(_VIT, **_SEGMENTER_HEAD)),
    'segmenter-linear': (
        'configs/segmenter/segmenter_vit-s_linear_8xb1-160k_ade20k-512x512.py',
        _VIT),
    'crate': (
        'configs/cbsa/cbsa_crate-demo_1xb8-800iter_synthade-128x128.py',
        dict(_WHITE_BOX, **_CBSA_HEAD, **{
            'model.backbone.attn_cfg.num_heads': 2,
            'model.backbone.attn_cfg.head_dim': 16})),
    'tost': (
        'configs/cbsa/cbsa_tost-demo_1xb8-800iter_synthade-128x128.py',
        dict(_WHITE_BOX, **_CBSA_HEAD, **{
            'model.backbone.attn_cfg.num_heads': 2,
            'model.backbone.attn_cfg.head_dim': 16})),
    'cbt': (
        'configs/cbsa/cbsa_cbt-demo_1xb8-800iter_synthade-128x128.py',
        dict(_WHITE_BOX, **_CBSA_HEAD, **{
            'model.backbone.attn_cfg.num_heads': 2,
            'model.backbone.attn_cfg.head_dim': 16,
            'model.backbone.attn_cfg.rep_grid': (2, 2)})),
    # MSSA in the first layer, CBSA in the second, as the published
    # encoder's two halves
    'crate-cbt': (
        'configs/segmenter/'
        'segmenter_crate-cbt-t_mask_8xb1-160k_ade20k-512x512.py',
        dict(_WHITE_BOX, **_SEGMENTER_HEAD, **{
            'model.backbone.num_layers': 2,
            'model.backbone.attn_cfg': [_CRATE_MSSA, _CBT_CBSA]})),
    'cbsa-vit': (
        'configs/segmenter/'
        'segmenter_cbsa-vit-t_mask_8xb1-160k_ade20k-512x512.py',
        dict(_WHITE_BOX, **_SEGMENTER_HEAD, **{
            'model.backbone.attn_cfg.num_heads': 2,
            'model.backbone.attn_cfg.head_dim': 16,
            'model.backbone.attn_cfg.rep_grid': (2, 2)})),
    'mita': (
        'configs/mita/cbsa_mita-vit-t_8xb1-160k_ade20k-512x512.py',
        dict(_WHITE_BOX, **_CBSA_HEAD, **{
            'model.backbone.attn_cfg.num_heads': 2,
            'model.backbone.attn_cfg.head_dim': 16,
            'model.backbone.attn_cfg.pool_size': 2})),
}


def tiny_config(repo: str, name: str):
    """The Config of model ``name``, shrunk (:data:`MODELS`)."""
    import os.path as osp

    from mmengine.config import Config
    path, options = MODELS[name]
    cfg = Config.fromfile(osp.join(repo, path))
    cfg.merge_from_dict(options)
    return cfg


def crop_batch(iteration: int, rank: int) -> Dict[str, List]:
    """The one crop rank ``rank`` trains on at ``iteration``, as mmseg's
    dataloader hands a batch to ``train_step`` (``pseudo_collate`` of one
    packed sample): a uint8 BGR image and its labels (a few pixels
    ignored, 255). Drawn from a seed of its own, the same in every
    process."""
    from mmengine.structures import PixelData
    from mmseg.structures import SegDataSample
    gen = torch.Generator().manual_seed(1000 * iteration + rank)
    image = torch.randint(0, 256, (3, CROP, CROP), generator=gen,
                          dtype=torch.uint8)
    labels = torch.randint(0, NUM_CLASSES, (1, CROP, CROP), generator=gen)
    labels[torch.rand(labels.shape, generator=gen) < 0.05] = 255
    sample = SegDataSample(metainfo=dict(
        img_shape=(CROP, CROP), ori_shape=(CROP, CROP),
        pad_shape=(CROP, CROP)))
    sample.gt_sem_seg = PixelData(data=labels)
    return dict(inputs=[image], data_samples=[sample])
