"""The published training configs, and the configs the converter writes,
evaluate as the released code evaluates, in one scale and in several.

A random checkpoint in the released key layout (``rstrudel/segmenter``
and its DEPICT / CBT forks) is converted with the package's conversion
(:mod:`mmseg_whitebox.converters.segmenter`, what
``tools/model_converters/segmenter2mmseg.py`` runs) and loaded with
``strict=True`` into a published training config (``configs/segmenter``:
ViT-T/S/B on ADE20K 512, ViT-L on ADE20K 640) or into the config the
converter writes (the other decoders, a 384-trained checkpoint, a Pascal
Context checkpoint on an ADE20K config). Image files go through that
config's own test pipeline, data preprocessor and ``predict`` (its
``test_step``) in float64. The released evaluation is re-implemented here
from reading ``segm/eval/miou.py``, ``segm/model/utils.py``
(``inference``: resize, ``sliding_window``, ``merge_windows``),
``segm/model/segmenter.py``, ``segm/model/vit.py`` (bilinear
position-embedding resize), ``segm/data/`` (``base.py``: the test resize
``(max_ratio * im_size, im_size)``, the normalisation and the
``--multiscale`` views; ``config/ade20k.py`` / ``pascal_context.py``) and
``segm/config.yml`` (``im_size`` per dataset), with mmseg 0.14.1's
``MultiScaleFlipAug`` (the released requirements.txt:11); never imported
or copied. The logits, resized back to the original image, agree within
1e-5 of their scale and their argmax is identical, on a square image, a
non-square one and one wider than 4:1 (whose short side the test resize
leaves below the window); a window stride of 512 instead of 480, no
upsampling of small images, or a 1% change of the normalisation, is seen.
The multi-scale test (``--tta``: the config's ``tta_pipeline`` and
``tta_model``) averages the same probabilities as the released
``--multiscale`` within 1e-5 and takes the same argmax; views of the
original image scaled by the ratios (mmseg's usual pipeline) are seen.

Sizes: ViT-T with the mask decoder runs the published config as it is
(12 layers of 192 with 3 heads, the 2-block mask decoder, 150 classes);
ViT-S/B/L keep the real widths, heads, patch, windows and every test
setting of their published configs but 1 encoder layer, 1 or 0
mask-decoder blocks (every block is the same module) and 8 classes (the
class count changes nothing else); the other decoders run on ViT-T with 1
encoder layer; the multi-scale test uses a 64-wide ViT-T. The full depths
are checked on the shapes alone.
"""
import contextlib
import glob
import os.path as osp
from dataclasses import dataclass
from typing import Optional, Tuple

import mmcv
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from mmengine.config import Config

from mmseg_whitebox.converters import segmenter as sc

from _helpers import REPO
from test_segmenter_conversion import (cbt_decoder_forward, decoder_shapes,
                                       depict_decoder_forward, encoder_shapes,
                                       layer_norm, linear,
                                       mask_decoder_forward, random_state,
                                       vit_block)

PATCH = 16
DEC_LAYERS = 3  # DEPICT and CBT decoders
TOLERANCE = 1e-5  # of the logits' (and probabilities') scale
# segm/data/base.py:88-107 (--multiscale), each view also flipped
RELEASED_RATIOS = (0.5, 0.75, 1.0, 1.25, 1.5, 1.75)


@dataclass
class Dataset:
    """The released test-time resize of a dataset: short side ``im_size``
    (segm/config.yml), long side at most ``max_ratio`` times it
    (segm/data/config/<dataset>.py), and its class count."""
    n_cls: int
    im_size: int
    max_ratio: int
    crop: int = 512  # the training crop and window (segm/config.yml)

    def scale(self, ratio: float = 1.0) -> Tuple[int, int]:
        """The resize target, scaled as MultiScaleFlipAug scales it."""
        return (int(self.max_ratio * self.im_size * ratio),
                int(self.im_size * ratio))


ADE20K = Dataset(n_cls=150, im_size=512, max_ratio=4)
# 8 classes on ADE20K's settings: 150 full-resolution float64 maps per
# window cost seconds, and the class count changes nothing else
ADE20K_8 = Dataset(n_cls=8, im_size=512, max_ratio=4)
PASCAL_CONTEXT = Dataset(n_cls=60, im_size=520, max_ratio=8, crop=480)
CITYSCAPES = Dataset(n_cls=19, im_size=1024, max_ratio=2, crop=768)
# the published configs' datasets, by the name in the file name
CONFIG_DATASETS = {'ade20k': ADE20K, 'pascal-context': PASCAL_CONTEXT,
                   'cityscapes': CITYSCAPES}

# original images (height, width); the windows they give at 512 (640)
SQUARE = (64, 64)  # short side 512: one window (ViT-L: upsampled to 640)
NON_SQUARE = (48, 64)  # 512 x 683: two windows
# wider than 4:1: the test resize caps the long side at 2048, the short
# side is 507, below the window: upsampled to 512 x 2068 (ViT-L: 640 x
# 2585), five windows
WIDE = (25, 101)


@dataclass
class Case:
    kind: str  # the decoder
    d: int
    heads: int
    layers: int  # encoder layers in the checkpoint
    trained: int  # the training crop: net_kwargs image_size, the window
    dataset: Dataset
    # original images and the released windows (down, across) of each
    images: Tuple[Tuple[Tuple[int, int], Tuple[int, int]], ...]
    dec_heads: int = 1  # DEPICT / CBT subspaces (x 100)
    mask_layers: int = 1  # mask transformer blocks (released: 2)
    # a published training config (relative to configs/) the weights are
    # loaded into; None: the config the converter writes
    config: Optional[str] = None


SEGMENTER = {size: f'segmenter/segmenter_vit-{size}_mask_8xb1-160k_ade20k-'
             f'{"640x640" if size == "l" else "512x512"}.py'
             for size in 'tsbl'}
CASES = {
    # the published configs: ADE20K's resize to a short side of 512,
    # windows of 512, stride 480, images below the window upsampled
    'vit-t-mask': Case('mask', 192, 3, 12, 512, ADE20K, ((SQUARE, (1, 1)), ),
                       mask_layers=2, config=SEGMENTER['t']),
    'vit-t-mask-1-layer': Case('mask', 192, 3, 1, 512, ADE20K_8,
                               ((NON_SQUARE, (1, 2)), (WIDE, (1, 5))),
                               config=SEGMENTER['t']),
    'vit-s-mask': Case('mask', 384, 6, 1, 512, ADE20K_8, ((WIDE, (1, 5)), ),
                       config=SEGMENTER['s']),
    'vit-b-mask': Case('mask', 768, 12, 1, 512, ADE20K_8, ((WIDE, (1, 5)), ),
                       mask_layers=0, config=SEGMENTER['b']),
    # ViT-L: the 640 window after the 512 test resize: every image is
    # upsampled first
    'vit-l-mask-640': Case('mask', 1024, 16, 1, 640, ADE20K_8,
                           ((WIDE, (1, 5)), ), mask_layers=0,
                           config=SEGMENTER['l']),
    # the converter's configs for the other decoders
    'vit-t-linear': Case('linear', 192, 3, 1, 512, ADE20K_8,
                         ((SQUARE, (1, 1)), )),
    'vit-t-cbt': Case('cbt', 192, 3, 1, 512, ADE20K_8, ((SQUARE, (1, 1)), ),
                      dec_heads=2),
    'vit-t-depict-sa': Case('depict-sa', 192, 3, 1, 512, ADE20K_8,
                            ((SQUARE, (1, 1)), ), dec_heads=2),
    'vit-t-depict-ca': Case('depict-ca', 192, 3, 1, 512, ADE20K_8,
                            ((SQUARE, (1, 1)), ), dec_heads=2),
    # a Pascal Context checkpoint on the ADE20K config the converter falls
    # back to: short side 520, window 480, stride 448
    'vit-t-mask-pascal-context': Case('mask', 192, 3, 1, 480,
                                      PASCAL_CONTEXT,
                                      (((400, 500), (2, 2)), )),
}


def released_checkpoint(case: Case, seed: int = 0):
    """A state dict in the released layout (float32 values, as released
    checkpoints hold: they are loaded into a float32 model before it is
    made float64) and its variant's net_kwargs."""
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
def released_encoder(state, image, heads, layers, block=None):
    """segm/model/vit.py: patches, CLS token, position embedding resized
    bilinearly when the token count differs from the trained one, the
    blocks (``block(x, state, prefix, heads, hw)``, default the released
    ViT block), the final norm; the patch tokens and the grid."""
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
        if block is None:
            x = vit_block(x, state, f'encoder.blocks.{i}', heads)
        else:
            x = block(x, state, f'encoder.blocks.{i}', heads, (h, w))
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


def released_view(bgr, original, n_cls, window, stride, predict,
                  mean=127.5, std=127.5):
    """segm/model/utils.py inference on one view (a resized, maybe flipped
    uint8 BGR image): normalisation (mmcv's, float32), upsampling to the
    window's short side (resize), windows, their average and the bilinear
    resize to the ``original`` size (merge_windows). Returns the logits
    and the windows (down, across)."""
    rgb = bgr[..., ::-1].astype(np.float32)
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
    logits = torch.zeros(n_cls, h, w, dtype=torch.float64)
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


def released_evaluation(path, dataset: Dataset, window: int, stride: int,
                        predict, mean=127.5, std=127.5):
    """segm/eval/miou.py on one image, single scale: the dataset's test
    resize (mmseg 0.14.1's Resize, keep ratio: mmcv.imrescale), then
    :func:`released_view`. Returns the logits (the softmax after them
    keeps the argmax) and the windows."""
    bgr = mmcv.imread(path)
    return released_view(mmcv.imrescale(bgr, dataset.scale()),
                         bgr.shape[:2], dataset.n_cls, window, stride,
                         predict, mean, std)


def released_multiscale(path, dataset: Dataset, window: int, stride: int,
                        predict, of_the_target=True):
    """segm/eval/miou.py --multiscale on one image: mmseg 0.14.1's
    MultiScaleFlipAug views (the resize target scaled by each ratio,
    each unflipped and flipped: RandomFlip flips the resized uint8
    image), each through :func:`released_view`, its flip undone
    (merge_windows) and its softmax taken; the probabilities averaged
    over the views (inference). ``of_the_target=False``: the original
    image scaled by each ratio instead (mmseg 1.x's ``scale_factor``)."""
    bgr = mmcv.imread(path)
    original = bgr.shape[:2]
    probabilities = torch.zeros(dataset.n_cls, *original,
                                dtype=torch.float64)
    views = 0
    for ratio in RELEASED_RATIOS:
        resized = mmcv.imrescale(
            bgr, dataset.scale(ratio) if of_the_target else ratio)
        for flip in (False, True):
            view = np.ascontiguousarray(resized[:, ::-1]) if flip else resized
            logits, _ = released_view(view, original, dataset.n_cls, window,
                                      stride, predict)
            if flip:
                logits = logits.flip(-1)
            probabilities += logits.softmax(0)
            views += 1
    return probabilities / views


# --- the project's evaluation of the converted checkpoint ----------------
def converted(case: Case, tmp_path, seed=0):
    """Convert as tools/model_converters/segmenter2mmseg.py does; returns
    the released state, the model (float32, weights loaded strictly) and
    the config it evaluates with: the case's published config (reduced
    as the case says) or the config the converter writes."""
    from mmseg.apis import init_model
    state, net = released_checkpoint(case, seed)
    model = sc.describe(state, net)
    weights, _, unmapped = sc.segmenter_to_mmseg(state, model.kind)
    assert unmapped == []
    if case.config:
        cfg = published_config(case)
        # the converter adds no test-time setting to the published
        # config: it carries every released one
        _, overrides, text = sc.converted_config(
            model, osp.join(REPO, 'configs', case.config))
        assert not [k for k in overrides if k.startswith((
            'model.test_cfg', 'model.data_preprocessor',
            'model.backbone.interpolate_mode'))], overrides
        assert 'pipeline' not in text
        segmentor = sc.load_strictly(cfg.model, weights)
        return state, segmentor, cfg
    config = sc.pick_config(model, osp.join(REPO, 'configs'))
    cfg, _, text = sc.converted_config(model, config)
    sc.load_strictly(cfg.model.to_dict(), weights)
    (tmp_path / 'converted.py').write_text(text)
    torch.save(dict(state_dict=weights, meta=dict(decoder=model.kind)),
               tmp_path / 'converted.pth')
    segmentor = init_model(str(tmp_path / 'converted.py'),
                           str(tmp_path / 'converted.pth'), device='cpu')
    return state, segmentor, segmentor.cfg


def published_config(case: Case) -> Config:
    """The case's published config, cut to the case's depth and classes
    (and width, where the case is narrower than the config)."""
    cfg = Config.fromfile(osp.join(REPO, 'configs', case.config))
    cfg.merge_from_dict({
        'model.backbone.num_layers': case.layers,
        'model.backbone.embed_dims': case.d,
        'model.backbone.num_heads': case.heads,
        'model.decode_head.num_layers': case.mask_layers,
        'model.decode_head.num_classes': case.dataset.n_cls,
        'model.decode_head.in_channels': case.d,
        'model.decode_head.channels': case.d,
        'model.decode_head.embed_dims': case.d,
        'model.decode_head.num_heads': max(case.d // 64, 1)})
    return cfg


def float64(segmentor):
    """The segmentor in float64, its data preprocessor normalising and
    upsampling in float32 (as the released data pipeline, and this one
    outside a float64 test, computes them) and handing float64 on."""
    segmentor = segmentor.double().eval()
    preprocessor = segmentor.data_preprocessor.float()
    forward = preprocessor.forward

    def forward64(data, training=False):
        data = forward(data, training)
        data['inputs'] = data['inputs'].double()
        return data

    preprocessor.forward = forward64
    return segmentor


@contextlib.contextmanager
def changed(segmentor, test_cfg=None, test_short_side=0,
            interpolate_mode=None):
    """Test-time settings changed (as --cfg-options would) for a while;
    ``test_short_side=0`` leaves it."""
    preprocessor, backbone = segmentor.data_preprocessor, segmentor.backbone
    before = (dict(segmentor.test_cfg), preprocessor.test_short_side,
              backbone.interpolate_mode)
    segmentor.test_cfg.update(test_cfg or {})
    if test_short_side != 0:
        preprocessor.test_short_side = test_short_side
    backbone.interpolate_mode = interpolate_mode or backbone.interpolate_mode
    try:
        yield segmentor
    finally:
        segmentor.test_cfg.update(before[0])
        preprocessor.test_short_side = before[1]
        backbone.interpolate_mode = before[2]


def loaded(pipeline, image, label):
    """One image through a test (or TTA) pipeline, batched as mmseg's test
    loop batches it."""
    from mmcv.transforms import Compose
    from mmengine.dataset import pseudo_collate
    return pseudo_collate([Compose(pipeline)(dict(
        img_path=image, seg_map_path=label, reduce_zero_label=True,
        seg_fields=[]))])


def project_logits(segmentor, cfg, image, label, **changes):
    """The config's test pipeline, then the segmentor's test_step (its
    data preprocessor and predict): the logits at the original size.
    ``changes``: see :func:`changed`."""
    data = loaded(cfg.test_dataloader.dataset.pipeline, image, label)
    with changed(segmentor, **changes), torch.no_grad():
        return segmentor.test_step(data)[0].seg_logits.data


def image_files(hw, tmp_path):
    """A random image (and a label) of the original size ``hw``."""
    rng = np.random.default_rng(3)
    h, w = hw
    image = tmp_path / f'image_{h}x{w}.png'
    label = tmp_path / f'label_{h}x{w}.png'
    mmcv.imwrite(rng.integers(0, 256, (h, w, 3), dtype=np.uint8), str(image))
    mmcv.imwrite(rng.integers(1, 60, (h, w), dtype=np.uint8), str(label))
    return str(image), str(label)


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
@pytest.mark.slow
def test_converted_checkpoint_evaluates_as_released(name, tmp_path):
    case = CASES[name]
    state, segmentor, cfg = converted(case, tmp_path)
    segmentor = float64(segmentor)
    for hw, windows in case.images:
        image, label = image_files(hw, tmp_path)
        ours = project_logits(segmentor, cfg, image, label)
        expected, found = released_evaluation(
            image, case.dataset, case.trained, case.trained - 32,
            predictor(state, case))
        assert found == windows, hw
        check_same(ours, expected)


def test_a_changed_test_setting_is_seen(tmp_path):
    """On the wide image through the published ViT-T config: a window
    stride of 512 instead of 480, or no upsampling of the image whose
    short side the test resize leaves below the window (mmseg's slide
    inference on the smaller image), moves the config's evaluation away
    from the released one; so does a normalisation 1% off in the
    released evaluation."""
    case = CASES['vit-t-mask-1-layer']
    state, segmentor, cfg = converted(case, tmp_path)
    segmentor = float64(segmentor)
    image, label = image_files(WIDE, tmp_path)
    predict = predictor(state, case)
    expected, _ = released_evaluation(image, ADE20K_8, 512, 480, predict)
    for change in (dict(test_cfg=dict(stride=(512, 512))),
                   dict(test_short_side=None)):
        moved = project_logits(segmentor, cfg, image, label, **change)
        assert relative_error(moved, expected) > 10 * TOLERANCE, change
    moved, _ = released_evaluation(image, ADE20K_8, 512, 480, predict,
                                   std=127.5 * 1.01)
    assert relative_error(moved, expected) > 10 * TOLERANCE


def test_a_checkpoint_trained_at_384_evaluated_with_512_windows(tmp_path):
    """A checkpoint whose position embedding is 24x24 (trained on 384
    crops), evaluated as miou.py --window-size 512 --window-stride 480
    does: the position embedding is resized bilinearly to 32x32 in every
    window (as the converted config's interpolate_mode says)."""
    case = Case('mask', 192, 3, 1, 384, ADE20K_8, ((SQUARE, (1, 1)), ))
    state, segmentor, cfg = converted(case, tmp_path)
    segmentor = float64(segmentor)
    image, label = image_files(SQUARE, tmp_path)
    windows_512 = dict(test_cfg=dict(crop_size=(512, 512), stride=(480, 480)),
                       test_short_side=512)
    ours = project_logits(segmentor, cfg, image, label, **windows_512)
    expected, windows = released_evaluation(image, ADE20K_8, 512, 480,
                                            predictor(state, case))
    assert windows == (1, 1)
    check_same(ours, expected)
    bicubic = project_logits(segmentor, cfg, image, label,
                             interpolate_mode='bicubic', **windows_512)
    assert relative_error(bicubic, expected) > 10 * TOLERANCE


# --- the multi-scale test (--tta) ----------------------------------------
# a 64-wide ViT-T on the published ViT-T and ViT-L configs: the views,
# windows and merge are the configs'; the width only sets the cost
TTA_CASES = {
    'vit-t': Case('mask', 64, 1, 1, 512, ADE20K_8, ((SQUARE, ()), ),
                  config=SEGMENTER['t']),
    'vit-l-640': Case('mask', 64, 1, 1, 640, ADE20K_8, ((SQUARE, ()), ),
                      config=SEGMENTER['l']),
}


@pytest.mark.parametrize('name', list(TTA_CASES))
def test_multiscale_test_is_the_released_one(name, tmp_path):
    """tools/test.py --tta builds cfg.tta_model around the model and reads
    with cfg.tta_pipeline: its 12 views' probabilities, averaged, are the
    released --multiscale ones (within 1e-5) and its prediction their
    argmax. Averaging logits instead, or views of the original image
    scaled by the ratios (mmseg's usual TTA pipeline, which these configs
    had), is seen."""
    from mmseg.registry import MODELS
    case = TTA_CASES[name]
    state, segmentor, cfg = converted(case, tmp_path)
    segmentor = float64(segmentor)
    tta = MODELS.build(dict(cfg.tta_model, module=segmentor))
    views = []
    test_step = segmentor.test_step

    def recorded(data):
        samples = test_step(data)
        views.append(samples[0].seg_logits.data)
        return samples

    segmentor.test_step = recorded
    (hw, _), = case.images
    image, label = image_files(hw, tmp_path)
    with torch.no_grad():
        merged, = tta.test_step(loaded(cfg.tta_pipeline, image, label))
    assert len(views) == 2 * len(RELEASED_RATIOS)
    ours = torch.stack(views).softmax(1).mean(0)
    window = case.trained
    expected = released_multiscale(image, case.dataset, window, window - 32,
                                   predictor(state, case))
    check_same(ours, expected)
    assert torch.equal(merged.pred_sem_seg.data.squeeze(0),
                       expected.argmax(0))
    # the views' logits averaged instead of their probabilities: another
    # prediction (on 0.2% and 0.7% of these pixels)
    assert not torch.equal(torch.stack(views).mean(0).argmax(0),
                           expected.argmax(0))
    if name == 'vit-t':
        moved = released_multiscale(image, case.dataset, window, window - 32,
                                    predictor(state, case),
                                    of_the_target=False)
        assert relative_error(ours, moved) > 10 * TOLERANCE


# --- the test settings, on every published config --------------------------
def published_configs():
    """Every config of the four method folders but the CPU demos."""
    return sorted(osp.relpath(p, REPO) for p in glob.glob(
        osp.join(REPO, 'configs', '*', '*.py'))
        if '_base_' not in p and 'synthade' not in p)


@pytest.mark.parametrize('path', published_configs())
def test_published_configs_test_as_released(path):
    """The window (the crop), the stride (crop - 32; segm/eval/miou.py:
    229-232), the upsampling below the window (segm/model/utils.py:
    92-104,164), the test resize (segm/eval/miou.py:227-228, segm/data/
    base.py:54) and the multi-scale views (segm/data/base.py:88-107) and
    merge of every published config."""
    cfg = Config.fromfile(osp.join(REPO, path))
    name = osp.splitext(osp.basename(path))[0]
    dataset = CONFIG_DATASETS[name.rsplit('_', 1)[1].rsplit('-', 1)[0]]
    window = int(name.rsplit('x', 1)[1])
    assert dict(cfg.model.test_cfg) == dict(
        mode='slide', crop_size=(window, window),
        stride=(window - 32, window - 32))
    preprocessor = cfg.model.data_preprocessor
    assert preprocessor.type == 'ShortSideDataPreProcessor'
    assert preprocessor.test_short_side == window
    for loader in (cfg.val_dataloader, cfg.test_dataloader):
        resizes = [dict(step) for step in loader.dataset.pipeline
                   if 'Resize' in step.type]
        assert resizes == [dict(type='Resize', scale=dataset.scale(),
                                keep_ratio=True)]
    load, tta = cfg.tta_pipeline
    assert load.type == 'LoadImageFromFile' and tta.type == 'TestTimeAug'
    views, flips, *rest = tta.transforms
    assert [dict(v) for v in views] == [
        dict(type='Resize', scale=dataset.scale(r), keep_ratio=True)
        for r in RELEASED_RATIOS]
    assert [(f.type, f.prob, f.direction) for f in flips] == [
        ('RandomFlip', 0., 'horizontal'), ('RandomFlip', 1., 'horizontal')]
    assert [step.type for step, in rest] == [
        'LoadAnnotations', 'CheckSegSample', 'PackSegInputs']
    assert cfg.tta_model.type == 'SegTTAModel'  # the softmax average


# the published Segmenter sizes at full depth (segm/config.yml: d_model,
# n_heads, n_layers; ViT-L trained on 640 crops): their converted configs
# carry every released test-time setting; shapes only (meta tensors)
FULL_SIZES = {'vit-t': (192, 3, 12, 512), 'vit-s': (384, 6, 12, 512),
              'vit-b': (768, 12, 12, 512), 'vit-l': (1024, 16, 24, 640)}


@pytest.mark.parametrize('size', list(FULL_SIZES))
@pytest.mark.parametrize('dataset', [ADE20K, PASCAL_CONTEXT, CITYSCAPES],
                         ids=['ade20k', 'pascal-context', 'cityscapes'])
def test_converted_configs_carry_the_released_test_settings(size, dataset,
                                                            tmp_path):
    d, heads, layers, crop = FULL_SIZES[size]
    if dataset is not ADE20K:
        crop = dataset.crop
    case = Case('mask', d, heads, layers, crop, dataset, (), mask_layers=2)
    grid = crop // PATCH
    shapes = {**encoder_shapes(d, layers, grid),
              **decoder_shapes('mask', d, dataset.n_cls, mask_layers=2)}
    state = {k: torch.empty(v, device='meta') for k, v in shapes.items()}
    model = sc.describe(state, net_kwargs(case))
    config = sc.pick_config(model, osp.join(REPO, 'configs'))
    _, overrides, text = sc.converted_config(model, config)
    if dataset is ADE20K:  # the published config is the released test
        assert config.endswith(SEGMENTER[size[-1]]) and overrides == {}
        assert 'pipeline' not in text
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
                   if 'Resize' in step.type]
        assert tuple(resize.scale) == dataset.scale()
        assert resize.keep_ratio
    views = cfg.tta_pipeline[1].transforms[0]
    assert [tuple(v.scale) for v in views] == [
        dataset.scale(r) for r in RELEASED_RATIOS]
