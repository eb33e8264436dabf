"""The numpy/OpenCV steps of OnnxSegmentor against the mmcv, mmseg and
PyTorch code they reproduce, without a graph: the test-pipeline resizes
(pixel for pixel), the bilinear resize (float rounding), the final resize
and argmax, and the sliding-window grid (exactly). The whole path against
``inference_model``: tests/test_onnx_export.py."""
import glob
import os.path as osp
import types

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from mmengine.config import Config, ConfigDict

from _helpers import REPO

#: test-pipeline resizes beyond the configs' own (scale_factor, no kept
#: ratio, an int scale, other interpolations, a capped long side)
EXTRA_RESIZES = [
    [dict(type='Resize', scale=(100, 60), keep_ratio=False,
          interpolation='bicubic')],
    [dict(type='Resize', scale_factor=0.7, keep_ratio=True)],
    [dict(type='Resize', scale=96, keep_ratio=True, interpolation='area')],
    [dict(type='ResizeShortestEdge', scale=(96, 128), max_size=200)],
]
IMAGE_HWS = ((47, 170), (333, 517), (512, 683), (9, 400))
#: largest difference to F.interpolate, relative to the largest value
BILINEAR_TOLERANCE = 1e-5


def config_pipelines():
    """The test pipelines of the dataset configs (what every published
    config inherits)."""
    for path in sorted(glob.glob(osp.join(REPO, 'configs', '_base_',
                                          'datasets', '*.py'))):
        yield osp.basename(path), Config.fromfile(path).test_pipeline


def mmseg_resized(pipeline, image: np.ndarray) -> np.ndarray:
    """``image`` through the resizes of ``pipeline``, by mmseg's and
    mmcv's own transforms."""
    from mmseg.registry import TRANSFORMS
    results = dict(img=image, img_shape=image.shape[:2])
    for step in pipeline:
        if 'Resize' in step['type']:
            results = TRANSFORMS.build(dict(step))(results)
    return results['img']


def test_test_resizes_are_mmcvs_pixel_for_pixel():
    from mmseg_whitebox.deployment.onnx_export import pipeline_resizes
    from mmseg_whitebox.deployment.onnx_segmentor import resize_step
    rng = np.random.default_rng(0)
    pipelines = list(config_pipelines())
    assert {'ade20k.py', 'ade20k_640x640.py', 'synthetic_ade20k.py'} <= \
        {name for name, _ in pipelines}
    pipelines += [(f'extra {i}', p) for i, p in enumerate(EXTRA_RESIZES)]
    for name, pipeline in pipelines:
        steps = pipeline_resizes(pipeline)
        assert steps, name
        for hw in IMAGE_HWS:
            image = rng.integers(0, 256, hw + (3, ), dtype=np.uint8)
            expected = mmseg_resized(pipeline, image)
            got = image
            for step in steps:
                got = resize_step(got, step)
            assert got.shape == expected.shape, (name, hw)
            np.testing.assert_array_equal(got, expected, err_msg=name)
    # sensitivity: another interpolation is not the same picture
    step = dict(pipeline_resizes(pipelines[0][1])[0],
                interpolation='nearest')
    image = rng.integers(0, 256, (333, 517, 3), dtype=np.uint8)
    assert not np.array_equal(resize_step(image, step),
                              mmseg_resized(pipelines[0][1], image))


def test_unreplayable_test_pipelines_are_refused():
    from mmseg_whitebox.deployment.onnx_export import pipeline_resizes
    from mmseg_whitebox.utils.tool_error import ToolError
    for step in (dict(type='RandomFlip', prob=1.0),
                 dict(type='Resize', scale=(64, 64), backend='pillow'),
                 dict(type='LoadImageFromFile', to_float32=True)):
        with pytest.raises(ToolError, match='OnnxSegmentor replays'):
            pipeline_resizes([dict(type='LoadImageFromFile'), step])


@pytest.mark.parametrize('align_corners', (False, True))
def test_bilinear_resize_is_torchs(align_corners):
    from mmseg_whitebox.deployment.onnx_segmentor import resize_bilinear
    x = np.random.default_rng(1).standard_normal((5, 13, 17)).astype(
        np.float32)
    for size in ((13, 17), (40, 52), (7, 9), (1, 30), (128, 5)):
        expected = F.interpolate(torch.from_numpy(x)[None], size,
                                 mode='bilinear',
                                 align_corners=align_corners)[0].numpy()
        got = resize_bilinear(x, size, align_corners)
        assert got.shape == expected.shape and got.dtype == np.float32
        assert np.abs(got - expected).max() <= \
            BILINEAR_TOLERANCE * np.abs(x).max(), size
    # sensitivity: the other corner convention is far off
    other = F.interpolate(torch.from_numpy(x)[None], (40, 52),
                          mode='bilinear',
                          align_corners=not align_corners)[0].numpy()
    assert np.abs(resize_bilinear(x, (40, 52), align_corners) -
                  other).max() > 1e-3


def test_resize_argmax_is_mmsegs_postprocessing():
    """In bands (a tiny tile) or whole, with or without the logits: the
    labels and logits of mmseg's resize + argmax (one channel: sigmoid >
    threshold)."""
    from mmseg_whitebox.deployment.onnx_segmentor import resize_argmax
    rng = np.random.default_rng(2)
    for channels, size in ((7, (50, 61)), (7, (9, 11)), (1, (50, 61))):
        logits = rng.standard_normal((channels, 16, 21)).astype(np.float32)
        resized = F.interpolate(torch.from_numpy(logits)[None], size,
                                mode='bilinear', align_corners=False)[0]
        if channels > 1:
            labels = resized.argmax(0).numpy()
        else:
            resized = resized.sigmoid()
            labels = (resized[0] > 0.3).numpy()
        for tile_bytes in (4 * channels * size[1] * 3, 2**24):
            got, full = resize_argmax(logits, size, threshold=0.3,
                                      with_logits=True,
                                      tile_bytes=tile_bytes)
            banded, none = resize_argmax(logits, size, threshold=0.3,
                                         tile_bytes=tile_bytes)
            assert none is None and got.dtype == np.int64
            assert (got == labels).mean() >= 0.999
            np.testing.assert_array_equal(banded, got)
            assert np.abs(full - resized.numpy()).max() <= \
                BILINEAR_TOLERANCE * np.abs(logits).max()
    with pytest.raises(ValueError, match='threshold'):
        resize_argmax(logits, (5, 5))


def test_slide_windows_are_mmsegs_grid():
    """The windows mmseg's slide_inference cuts (read off the crops it
    hands to encode_decode), in its order, for inputs smaller than the
    window, non-square, and with a last window moved back inside."""
    from mmseg.models.segmentors import EncoderDecoder

    from mmseg_whitebox.utils.windows import slide_windows
    cases = [((71, 256), (128, 128), (85, 85)),
             ((128, 213), (128, 128), (85, 85)),
             ((50, 60), (128, 128), (85, 85)),
             ((512, 683), (512, 512), (341, 341)),
             ((300, 301), (128, 96), (64, 50))]
    for size, crop, stride in cases:
        seen = []

        def encode_decode(crop_img, metas, seen=seen):
            ys, xs = crop_img[0, 0, :, 0], crop_img[0, 1, 0, :]
            seen.append((int(ys[0]), int(ys[-1]) + 1, int(xs[0]),
                         int(xs[-1]) + 1))
            return crop_img.new_zeros((1, 1) + crop_img.shape[2:])

        fake = types.SimpleNamespace(
            test_cfg=ConfigDict(crop_size=crop, stride=stride),
            out_channels=1, encode_decode=encode_decode)
        inputs = torch.zeros((1, 2) + size)
        inputs[0, 0] = torch.arange(size[0])[:, None]
        inputs[0, 1] = torch.arange(size[1])[None]
        EncoderDecoder.slide_inference(fake, inputs, [dict()])
        assert slide_windows(size, crop, stride) == seen, size
    # sensitivity: one pixel more of stride is another grid
    assert slide_windows(size, crop, (stride[0], stride[1] + 1)) != seen
