"""What :class:`~..onnx_segmentor.OnnxSegmentor` needs besides the graph
(:func:`deployment_metadata`, stored in the graph's metadata): the test
pipeline's resizes, the data preprocessing, the inference mode, the
classes; a model whose test path it cannot replay is refused."""
from __future__ import annotations

import json
from typing import Any, Dict, List, Optional, Sequence

import torch.nn as nn

from mmseg_whitebox.utils.tool_error import ToolError
from mmseg_whitebox.visualization.overlay import config_name, dataset_meta

from ..onnx_segmentor import (CV2_INTERPOLATION, METADATA_VERSION,
                              REQUIRED_KEYS, VERSION_KEY)
from .graph import min_input_side

#: test-pipeline steps that leave the image as it is (the loaders with
#: their defaults, labels, checks, packing)
PASSIVE_STEPS = ('LoadImageFromFile', 'LoadImageFromNDArray',
                 'LoadAnnotations', 'CheckSegSample', 'PackSegInputs')


def pipeline_resizes(pipeline: Sequence[dict]) -> List[Dict[str, Any]]:
    """The resizes of a test pipeline as :mod:`~..onnx_segmentor` replays
    them: mmcv's ``Resize`` (``scale`` ``[w, h]`` or ``scale_factor``
    ``[fw, fh]``, ``keep_ratio``, ``interpolation``; OpenCV backend) and
    mmseg's ``ResizeShortestEdge`` (``scale``, ``max_size``). A step that
    changes the image otherwise is a :class:`ToolError` naming it."""

    def refuse(step: dict, why: str) -> ToolError:
        return ToolError(
            f'the config\'s test_pipeline step {dict(step)} {why}: '
            'OnnxSegmentor replays the loaders with their defaults, '
            'Resize (OpenCV backend) and ResizeShortestEdge only')

    def pair(value: Any) -> Optional[List[float]]:
        if value is None:
            return None
        return [value, value] if isinstance(value, (int, float)) else \
            list(value)

    steps = []
    for step in pipeline:
        kind = str(step.get('type', '')).split('.')[-1]
        if kind in ('LoadImageFromFile', 'LoadImageFromNDArray'):
            if (step.get('to_float32') or step.get('color_type', 'color')
                    != 'color' or step.get('imdecode_backend', 'cv2')
                    != 'cv2'):
                raise refuse(step, 'loads images in another way')
        elif kind == 'Resize':
            interpolation = step.get('interpolation', 'bilinear')
            if step.get('backend', 'cv2') != 'cv2' or \
                    interpolation not in CV2_INTERPOLATION:
                raise refuse(step, 'resizes with another backend or '
                             'interpolation')
            steps.append(dict(type='Resize', scale=pair(step.get('scale')),
                              scale_factor=pair(step.get('scale_factor')),
                              keep_ratio=bool(step.get('keep_ratio', False)),
                              interpolation=interpolation))
        elif kind == 'ResizeShortestEdge':
            scale = step['scale']
            steps.append(dict(type='ResizeShortestEdge',
                              scale=scale if isinstance(scale, int) else
                              list(scale), max_size=int(step['max_size'])))
        elif kind not in PASSIVE_STEPS:
            raise refuse(step, 'changes the image')
    return steps


def _replayable(model: nn.Module) -> None:
    """A :class:`ToolError` when ``model``'s test path is not one that
    :mod:`~..onnx_segmentor` replays: mmseg's ``EncoderDecoder`` inference
    (or the bounded one, same predictions), a decode head with mmseg's
    ``predict``, and mmseg's data preprocessor (or the short-side one)."""
    from mmseg.models.data_preprocessor import SegDataPreProcessor
    from mmseg.models.decode_heads.decode_head import BaseDecodeHead
    from mmseg.models.segmentors import EncoderDecoder

    from mmseg_whitebox.models.data_preprocessors import \
        ShortSideDataPreProcessor
    cls, head = type(model), type(getattr(model, 'decode_head', None))
    same = all(getattr(cls, name, None) is getattr(EncoderDecoder, name)
               for name in ('inference', 'whole_inference',
                            'slide_inference', 'encode_decode'))
    if not (isinstance(model, EncoderDecoder) and same):
        raise ToolError(f'{cls.__name__} infers in its own way; '
                        'OnnxSegmentor replays mmseg\'s EncoderDecoder')
    if not (issubclass(head, BaseDecodeHead) and
            head.predict is BaseDecodeHead.predict and
            head.predict_by_feat is BaseDecodeHead.predict_by_feat):
        raise ToolError(f'the decode head {head.__name__} predicts in its '
                        'own way; OnnxSegmentor replays mmseg\'s '
                        'BaseDecodeHead.predict')
    pre = type(getattr(model, 'data_preprocessor', None))
    if pre not in (SegDataPreProcessor, ShortSideDataPreProcessor):
        raise ToolError(f'data preprocessor {pre.__name__}: OnnxSegmentor '
                        'replays SegDataPreProcessor and '
                        'ShortSideDataPreProcessor only')


def swaps_bgr_to_rgb(data_preprocessor: Any) -> Optional[bool]:
    """Whether mmseg's ``SegDataPreProcessor`` swaps the channels (None:
    cannot tell): mmseg 1.2.2 names the flag ``channel_conversion``,
    onedl-mmsegmentation ``_channel_conversion``."""
    return getattr(data_preprocessor, 'channel_conversion',
                   getattr(data_preprocessor, '_channel_conversion', None))


def deployment_metadata(model: nn.Module) -> Dict[str, str]:
    """What :class:`~..onnx_segmentor.OnnxSegmentor` needs to turn an image
    into ``inference_model``'s prediction with the graph of ``model``
    (built by ``init_model``: its config is ``model.cfg``): the test
    pipeline's resizes, the data preprocessor's normalisation, padding and
    short-side upsampling, the inference mode and window, the classes and
    their palette; each a JSON value, with :data:`~..onnx_segmentor.
    METADATA_VERSION`. A test path it cannot replay is a
    :class:`ToolError`."""
    cfg = getattr(model, 'cfg', None)
    if cfg is None or not cfg.get('test_pipeline'):
        raise ToolError('the model has no config with a test_pipeline '
                        '(build it with mmseg\'s init_model)')
    _replayable(model)
    pre = model.data_preprocessor
    conversion = swaps_bgr_to_rgb(pre)
    if conversion is None:
        raise ToolError('cannot tell whether the data preprocessor swaps '
                        'BGR to RGB (no channel_conversion attribute)')
    normalise = getattr(pre, '_enable_normalize', False)
    pad = None
    if pre.test_cfg:
        size = pre.test_cfg.get('size', None)
        pad = dict(size=list(size) if size else None,
                   size_divisor=pre.test_cfg.get('size_divisor', None),
                   pad_val=float(pre.pad_val))
    test_cfg = model.test_cfg or {}
    mode = test_cfg.get('mode', 'whole')
    head = model.decode_head
    classes, palette = dataset_meta(model)
    values = dict(
        config=config_name(model),
        test_resize=pipeline_resizes(cfg.test_pipeline),
        mean=pre.mean.flatten().tolist() if normalise else None,
        std=pre.std.flatten().tolist() if normalise else None,
        bgr_to_rgb=bool(conversion),
        pad=pad,
        test_short_side=getattr(pre, 'test_short_side', None) or None,
        mode=mode,
        crop_size=list(test_cfg['crop_size']) if mode == 'slide' else None,
        stride=list(test_cfg['stride']) if mode == 'slide' else None,
        align_corners=bool(model.align_corners),
        out_channels=int(head.out_channels),
        threshold=(float(head.threshold) if head.out_channels == 1 else
                   None),
        classes=list(classes),
        palette=[[int(v) for v in c] for c in palette],
        min_input_side=min_input_side(model))
    assert set(values) == set(REQUIRED_KEYS)
    meta = {k: json.dumps(v) for k, v in values.items()}
    meta[VERSION_KEY] = str(METADATA_VERSION)
    meta['input'] = ('normalised image (1, 3, H, W) float32, after mmseg '
                     'data preprocessing')
    meta['output'] = ('seg_logits (1, classes, H, W): whole-mode logits '
                      'resized to the input size; head_logits: the decode '
                      'head\'s logits before that resize')
    return meta

