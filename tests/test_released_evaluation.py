"""Published Segmenter-codebase checkpoints evaluate as the released code
evaluates.

A random checkpoint in the released key layout (``rstrudel/segmenter``
and its DEPICT / CBT forks) is converted with the package's conversion
(:mod:`mmseg_whitebox.models.decode_heads.segmenter_conversion`, what
``tools/model_converters/segmenter2mmseg.py`` runs), the config it
writes is loaded with ``init_model``, and a non-square image file goes
through that config's mmseg test pipeline, data preprocessor and
``predict`` in float64. The released evaluation is re-implemented here
from reading ``segm/eval/miou.py``, ``segm/model/utils.py`` (``inference``:
resize, ``sliding_window``, ``merge_windows``), ``segm/model/segmenter.py``,
``segm/model/vit.py`` (bilinear position-embedding resize), ``segm/data/``
(``base.py``: the test resize ``(max_ratio * im_size, im_size)`` and the
normalisation; ``config/ade20k.py`` / ``pascal_context.py``) and
``segm/config.yml`` (``im_size`` per dataset); never imported or copied.
The logits, resized back to the original image, agree within 1e-5 of their
scale and their argmax is identical; a window stride of 512 instead of 480,
or a 1% change of the normalisation, is seen.

Sizes: ViT-T with the mask decoder is the real architecture (12 layers
of 192 with 3 heads, the 2-block mask decoder, 150 classes); the other
decoders on ViT-T, and ViT-S/B/L, keep the real widths, heads, patch and
windows but 1 encoder layer and 1 mask-decoder block (every layer is the
same block; full depth in float64 would take minutes), and 8 classes on
ADE20K's settings; the full depths are checked on the shapes alone.
"""
import os.path as osp
from dataclasses import dataclass
from typing import Tuple

import mmcv
import numpy as np
import pytest
import torch
import torch.nn.functional as F

from mmseg_whitebox.models.decode_heads import segmenter_conversion as sc

from _helpers import REPO
from test_segmenter_conversion import (cbt_decoder_forward, decoder_shapes,
                                       depict_decoder_forward, encoder_shapes,
                                       layer_norm, linear,
                                       mask_decoder_forward, random_state,
                                       vit_block)

PATCH = 16
DEC_LAYERS = 3  # DEPICT and CBT decoders
TOLERANCE = 1e-5  # of the logits' scale


@dataclass
class Dataset:
    """The released test-time resize of a dataset: short side ``im_size``
    (segm/config.yml), long side at most ``max_ratio`` times it
    (segm/data/config/<dataset>.py), and its class count."""
    n_cls: int
    im_size: int
    max_ratio: int


ADE20K = Dataset(n_cls=150, im_size=512, max_ratio=4)
# 8 classes on ADE20K's settings (the converter takes them from the ADE20K
# config it falls back to): 150 full-resolution float64 maps per window
# cost seconds, and the class count changes nothing else
ADE20K_8 = Dataset(n_cls=8, im_size=512, max_ratio=4)
PASCAL_CONTEXT = Dataset(n_cls=60, im_size=520, max_ratio=8)


@dataclass
class Case:
    kind: str  # the decoder
    d: int
    heads: int
    layers: int  # encoder layers in the checkpoint
    trained: int  # the training crop: net_kwargs image_size, the window
    dataset: Dataset
    image: Tuple[int, int]  # the original image (height, width)
    windows: Tuple[int, int]  # the released windows (down, across)
    dec_heads: int = 1  # DEPICT / CBT subspaces (x 100)
    mask_layers: int = 1  # mask transformer blocks (released: 2)


CASES = {
    # ADE20K: short side 512 = the window, so one row of windows
    'vit-t-mask': Case('mask', 192, 3, 12, 512, ADE20K, (300, 620), (1, 3),
                       mask_layers=2),
    'vit-t-linear': Case('linear', 192, 3, 1, 512, ADE20K_8, (300, 620),
                         (1, 3)),
    'vit-t-cbt': Case('cbt', 192, 3, 1, 512, ADE20K_8, (300, 620), (1, 3),
                      dec_heads=2),
    'vit-t-depict-sa': Case('depict-sa', 192, 3, 1, 512, ADE20K_8,
                            (300, 620), (1, 3), dec_heads=2),
    'vit-t-depict-ca': Case('depict-ca', 192, 3, 1, 512, ADE20K_8,
                            (300, 620), (1, 3), dec_heads=2),
    'vit-s-mask': Case('mask', 384, 6, 1, 512, ADE20K_8, (620, 300), (3, 1)),
    'vit-b-mask': Case('mask', 768, 12, 1, 512, ADE20K_8, (300, 620),
                       (1, 3)),
    # ViT-L: the 640 window after the 512 test resize: upsampled first
    'vit-l-mask-640': Case('mask', 1024, 16, 1, 640, ADE20K_8, (400, 500),
                           (1, 2)),
    # Pascal Context: short side 520, window 480, stride 448
    'vit-t-mask-pascal-context': Case('mask', 192, 3, 1, 480,
                                      PASCAL_CONTEXT, (400, 900), (2, 3)),
}


def released_checkpoint(case: Case, seed: int = 0):
    """A state dict in the released layout (float32 values, as released
    checkpoints hold: init_model loads them into a float32 model before
    it is made float64) and its variant's net_kwargs."""
    shapes = {**encoder_shapes(case.d, case.layers, case.trained // PATCH),
              **decoder_shapes(case.kind, case.d, case.dataset.n_cls,
                               case.dec_heads, DEC_LAYERS, case.mask_layers)}
    state = {k: v.float().double() for k, v in
             random_state(shapes, seed).items()}
    return state, net_kwargs(case)


def net_kwargs(case: Case):
    """variant.yml's net_kwargs as segm/train.py writes them (image_size
    = (crop, crop))."""
    decoder = (dict(name='linear') if case.kind == 'linear' else
               dict(name='mask_transformer',
                    n_layers=(case.mask_layers if case.kind == 'mask' else
                              DEC_LAYERS)))
    if case.kind in ('cbt', 'depict-sa', 'depict-ca'):
        decoder['n_heads'] = case.dec_heads
    return dict(d_model=case.d, n_heads=case.heads, n_layers=case.layers,
                patch_size=PATCH, normalization='vit', distilled=False,
                image_size=(case.trained, case.trained),
                n_cls=case.dataset.n_cls, decoder=decoder)


# --- the released model and evaluation, re-implemented ------------------
def released_encoder(state, image, heads, layers):
    """segm/model/vit.py: patches, CLS token, position embedding resized
    bilinearly when the token count differs from the trained one."""
    x = F.conv2d(image, state['encoder.patch_embed.proj.weight'],
                 state['encoder.patch_embed.proj.bias'], stride=PATCH)
    b, _, h, w = x.shape
    x = torch.cat([state['encoder.cls_token'].expand(b, -1, -1),
                   x.flatten(2).transpose(1, 2)], 1)
    pos = state['encoder.pos_embed']
    if pos.shape[1] != x.shape[1]:
        side = int(round((pos.shape[1] - 1)**0.5))
        grid = pos[:, 1:].reshape(1, side, side, -1).permute(0, 3, 1, 2)
        grid = F.interpolate(grid, (h, w), mode='bilinear')
        pos = torch.cat([pos[:, :1], grid.flatten(2).transpose(1, 2)], 1)
    x = x + pos
    for i in range(layers):
        x = vit_block(x, state, f'encoder.blocks.{i}', heads)
    return layer_norm(x, state, 'encoder.norm')[:, 1:], (h, w)


def released_segmenter(state, case: Case, window: torch.Tensor):
    """segm/model/segmenter.py forward on one window: encoder, decoder,
    masks upsampled bilinearly to the window."""
    tokens, hw = released_encoder(state, window, case.heads, case.layers)
    n_cls = case.dataset.n_cls
    if case.kind == 'mask':
        masks = mask_decoder_forward(state, tokens, hw, n_cls)
    elif case.kind == 'linear':
        masks = linear(tokens, state, 'decoder.head').transpose(1, 2)
        masks = masks.reshape(1, n_cls, *hw)
    elif case.kind == 'cbt':
        masks = cbt_decoder_forward(state, tokens, hw, heads=case.dec_heads,
                                    n_cls=n_cls)
    else:
        masks = depict_decoder_forward(state, tokens, hw, case.kind[-2:],
                                       heads=case.dec_heads, n_cls=n_cls)
    return F.interpolate(masks, window.shape[-2:], mode='bilinear')


def anchors(size, window, stride):
    """segm/model/utils.py sliding_window: every stride below size -
    window, then the last window flush with the border."""
    return [a for a in range(0, size, stride) if a < size - window] + [
        size - window]


def released_evaluation(path, dataset: Dataset, window: int, stride: int,
                        predict, mean=127.5, std=127.5):
    """segm/eval/miou.py on one image: the dataset's test resize and
    normalisation (mmcv's, float32), upsampling to the window's short
    side, windows, their average, the bilinear resize to the original
    size. Returns the logits (the softmax after them keeps the argmax)
    and the windows' anchors."""
    bgr = mmcv.imread(path)
    original = bgr.shape[:2]
    resized = mmcv.imrescale(bgr, (dataset.max_ratio * dataset.im_size,
                                   dataset.im_size))
    rgb = resized[..., ::-1].astype(np.float32)
    # float32, as mmcv's Normalize (which multiplies by 1 / std: the same
    # value up to one float32 rounding, which could flip pixels whose two
    # best classes tie to 1e-7; not a setting)
    normalised = (rgb - np.float32(mean)) / np.float32(std)
    # (1, C, H, W), contiguous as the released data loader stacks it (the
    # float32 upsampling below rounds differently on other memory layouts)
    image = torch.from_numpy(normalised).permute(2, 0, 1)[None].contiguous()
    h, w = image.shape[-2:]
    if min(h, w) < window:  # segm/model/utils.py resize
        size = ((window, int(w / h * window)) if h < w else
                (int(h / w * window), window))
        image = F.interpolate(image, size, mode='bilinear')
    h, w = image.shape[-2:]
    logits = torch.zeros(dataset.n_cls, h, w, dtype=torch.float64)
    count = torch.zeros(1, h, w, dtype=torch.float64)
    rows, columns = anchors(h, window, stride), anchors(w, window, stride)
    for top in rows:
        for left in columns:
            crop = image[:, :, top:top + window, left:left + window]
            logits[:, top:top + window, left:left + window] += predict(
                crop.double())[0]
            count[:, top:top + window, left:left + window] += 1
    logits = F.interpolate((logits / count)[None], original,
                           mode='bilinear')[0]
    return logits, (len(rows), len(columns))


# --- the project's evaluation of the converted checkpoint ----------------
def converted(case: Case, tmp_path, seed=0):
    """Convert as tools/model_converters/segmenter2mmseg.py does; returns
    the state, the written config's path and the checkpoint's path."""
    state, net = released_checkpoint(case, seed)
    model = sc.describe(state, net)
    weights, _, unmapped = sc.segmenter_to_mmseg(state, model.kind)
    assert unmapped == []
    config = sc.pick_config(model, osp.join(REPO, 'configs'))
    cfg, _, text = sc.converted_config(model, config)
    sc.load_strictly(cfg.model.to_dict(), weights)
    config_path = tmp_path / 'converted.py'
    config_path.write_text(text)
    checkpoint = tmp_path / 'converted.pth'
    torch.save(dict(state_dict=weights, meta=dict(decoder=model.kind)),
               checkpoint)
    return state, str(config_path), str(checkpoint)


def image_files(case: Case, tmp_path):
    """A random image (and a label) of the case's original size."""
    rng = np.random.default_rng(3)
    h, w = case.image
    image = tmp_path / 'image.png'
    label = tmp_path / 'label.png'
    mmcv.imwrite(rng.integers(0, 256, (h, w, 3), dtype=np.uint8), str(image))
    mmcv.imwrite(rng.integers(1, 60, (h, w), dtype=np.uint8), str(label))
    return str(image), str(label)


def project_logits(config_path, checkpoint, image, label, test_cfg=None,
                   test_short_side=None, interpolate_mode=None):
    """init_model, the config's test pipeline, its data preprocessor and
    predict (model and inputs in float64): the logits at the original
    size. The keyword arguments change those test-time settings (as
    --cfg-options would)."""
    from mmcv.transforms import Compose
    from mmengine.dataset import pseudo_collate
    from mmseg.apis import init_model
    model = init_model(config_path, checkpoint, device='cpu')
    model.test_cfg.update(test_cfg or {})
    if test_short_side:
        model.data_preprocessor.test_short_side = test_short_side
    if interpolate_mode:
        model.backbone.interpolate_mode = interpolate_mode
    model = model.double().eval()
    # normalisation and upsampling in float32, as the released data
    # pipeline (and this one outside a float64 test) computes them
    model.data_preprocessor.float()
    pipeline = Compose(model.cfg.test_dataloader.dataset.pipeline)
    data = pseudo_collate([pipeline(dict(img_path=image, seg_map_path=label,
                                         reduce_zero_label=True,
                                         seg_fields=[]))])
    with torch.no_grad():
        data = model.data_preprocessor(data, False)
        sample = model.predict(data['inputs'].double(),
                               data['data_samples'])[0]
    return sample.seg_logits.data


def relative_error(ours, expected):
    return float((ours - expected).abs().max() / expected.abs().max())


def check_same(ours, expected):
    assert ours.shape == expected.shape
    assert relative_error(ours, expected) < TOLERANCE
    assert torch.equal(ours.argmax(0), expected.argmax(0))


def predictor(state, case):
    def predict(window):
        with torch.no_grad():
            return released_segmenter(state, case, window)
    return predict


@pytest.mark.parametrize('name', list(CASES))
def test_converted_checkpoint_evaluates_as_released(name, tmp_path):
    case = CASES[name]
    state, config, checkpoint = converted(case, tmp_path)
    image, label = image_files(case, tmp_path)
    ours = project_logits(config, checkpoint, image, label)
    window = case.trained
    expected, windows = released_evaluation(image, case.dataset, window,
                                            window - 32,
                                            predictor(state, case))
    assert windows == case.windows
    check_same(ours, expected)


def test_a_checkpoint_trained_at_384_evaluated_with_512_windows(tmp_path):
    """A checkpoint whose position embedding is 24x24 (trained on 384
    crops), evaluated as miou.py --window-size 512 --window-stride 480
    does: the position embedding is resized bilinearly to 32x32 in every
    window (as the converted config's interpolate_mode says)."""
    case = Case('mask', 192, 3, 1, 384, ADE20K_8, (300, 620), (1, 3))
    state, config, checkpoint = converted(case, tmp_path)
    image, label = image_files(case, tmp_path)
    windows_512 = dict(test_cfg=dict(crop_size=(512, 512), stride=(480, 480)),
                       test_short_side=512)
    ours = project_logits(config, checkpoint, image, label, **windows_512)
    expected, windows = released_evaluation(image, ADE20K_8, 512, 480,
                                            predictor(state, case))
    assert windows == (1, 3)
    check_same(ours, expected)
    bicubic = project_logits(config, checkpoint, image, label,
                             interpolate_mode='bicubic', **windows_512)
    assert relative_error(bicubic, expected) > 10 * TOLERANCE


def test_a_changed_released_setting_is_seen(tmp_path):
    """A window stride of 512 instead of 480, or a normalisation 1% off,
    moves the released evaluation away from the converted config's."""
    case = CASES['vit-t-linear']
    state, config, checkpoint = converted(case, tmp_path)
    image, label = image_files(case, tmp_path)
    ours = project_logits(config, checkpoint, image, label)
    predict = predictor(state, case)
    for change in (dict(stride=512), dict(std=127.5 * 1.01)):
        settings = dict(dataset=ADE20K_8, window=512, stride=480,
                        predict=predict)
        settings.update(change)
        moved, _ = released_evaluation(image, **settings)
        assert relative_error(ours, moved) > 10 * TOLERANCE, change


# the published Segmenter sizes at full depth (segm/config.yml: d_model,
# n_heads, n_layers; ViT-L trained on 640 crops): their converted configs
# carry every released test-time setting; shapes only (meta tensors)
FULL_SIZES = {'vit-t': (192, 3, 12, 512), 'vit-s': (384, 6, 12, 512),
              'vit-b': (768, 12, 12, 512), 'vit-l': (1024, 16, 24, 640)}


@pytest.mark.parametrize('size', list(FULL_SIZES))
@pytest.mark.parametrize('dataset', [ADE20K, PASCAL_CONTEXT])
def test_converted_configs_carry_the_released_test_settings(size, dataset,
                                                            tmp_path):
    from mmengine.config import Config
    d, heads, layers, crop = FULL_SIZES[size]
    if dataset is PASCAL_CONTEXT:
        crop = 480  # segm/config.yml pascal_context crop_size
    case = Case('mask', d, heads, layers, crop, dataset, (1, 1), (1, 1),
                mask_layers=2)
    grid = crop // PATCH
    shapes = {**encoder_shapes(d, layers, grid),
              **decoder_shapes('mask', d, dataset.n_cls, mask_layers=2)}
    state = {k: torch.empty(v, device='meta') for k, v in shapes.items()}
    model = sc.describe(state, net_kwargs(case))
    _, _, text = sc.converted_config(
        model, sc.pick_config(model, osp.join(REPO, 'configs')))
    (tmp_path / 'converted.py').write_text(text)
    cfg = Config.fromfile(str(tmp_path / 'converted.py'))
    backbone = cfg.model.backbone
    assert (backbone.embed_dims, backbone.num_heads, backbone.num_layers,
            tuple(backbone.img_size)) == (d, heads, layers, (crop, crop))
    assert backbone.interpolate_mode == 'bilinear'
    assert backbone.norm_cfg.eps == 1e-5 and backbone.patch_bias
    assert cfg.model.decode_head.num_heads == d // 64
    assert cfg.model.decode_head.num_layers == 2
    assert cfg.model.test_cfg.mode == 'slide'
    assert tuple(cfg.model.test_cfg.crop_size) == (crop, crop)
    assert tuple(cfg.model.test_cfg.stride) == (crop - 32, crop - 32)
    preprocessor = cfg.model.data_preprocessor
    assert preprocessor.type == 'ShortSideDataPreProcessor'
    assert preprocessor.test_short_side == crop
    assert list(preprocessor.mean) == [127.5] * 3
    assert list(preprocessor.std) == [127.5] * 3
    for loader in (cfg.val_dataloader, cfg.test_dataloader):
        resize, = [step for step in loader.dataset.pipeline
                   if step.type == 'Resize']
        assert tuple(resize.scale) == (dataset.max_ratio * dataset.im_size,
                                       dataset.im_size)
        assert resize.keep_ratio
