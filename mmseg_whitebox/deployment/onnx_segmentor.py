"""Image to prediction with an exported segmentor and onnxruntime: what
mmseg's ``inference_model`` does, without torch.

The graph (:mod:`.onnx_export`) is the network alone: a normalised
``(1, 3, H, W)`` tensor in, the logits at that size out.
:class:`OnnxSegmentor` does the rest of mmseg's test path around it, with
the settings stored in the graph's metadata (:data:`METADATA_VERSION`):

1. the test pipeline's resize (mmcv's ``Resize``, mmseg's
   ``ResizeShortestEdge``: same size arithmetic, same OpenCV call);
2. ``SegDataPreProcessor``: BGR->RGB, ``(x - mean) / std``, the test-time
   padding, ``ShortSideDataPreProcessor``'s upsampling of small images;
3. the segmentor's ``test_cfg``: whole, or mmseg's ``slide_inference``;
4. ``postprocess_result``: the padding cut off, the bilinear resize to the
   image and the argmax (``sigmoid > threshold`` for one channel), a band
   of rows at a time (:func:`resize_argmax`), so no ``(C, H, W)`` map is
   made unless the logits are asked for.

Only the standard library, numpy, OpenCV and onnxruntime are imported:
the file runs on a machine without torch or mmseg (copied beside
``mmseg_whitebox/utils/windows.py``, whose window grid it shares).
"""
from __future__ import annotations

import json
import os.path as osp
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

import cv2
import numpy as np

try:
    from ..utils.tool_error import InputError
    from ..utils.windows import slide_windows
except ImportError:  # copied out of the package, beside utils/windows.py
    from windows import slide_windows
    InputError = ValueError  # what the package's InputError also is

#: version of the metadata the exporter writes and this module reads;
#: graphs with another version (or none) are refused with advice
METADATA_VERSION = 1
#: metadata key holding :data:`METADATA_VERSION`
VERSION_KEY = 'mmseg_whitebox_metadata_version'
#: metadata keys (JSON values) this module needs
REQUIRED_KEYS = ('config', 'test_resize', 'mean', 'std', 'bgr_to_rgb',
                 'pad', 'test_short_side', 'mode', 'crop_size', 'stride',
                 'align_corners', 'out_channels', 'threshold', 'classes',
                 'palette', 'min_input_side')
#: OpenCV interpolation of mmcv's interpolation names
CV2_INTERPOLATION = {
    'nearest': cv2.INTER_NEAREST,
    'bilinear': cv2.INTER_LINEAR,
    'bicubic': cv2.INTER_CUBIC,
    'area': cv2.INTER_AREA,
    'lanczos': cv2.INTER_LANCZOS4,
}
#: the graph's outputs: the logits resized to the input size, and the
#: decode head's logits before that resize
OUTPUT_NAMES = ('seg_logits', 'head_logits')
#: float buffers of one band of output rows in the height pass of the
#: final resize
DEFAULT_TILE_BYTES = 16 * 1024**2
#: what to tell the owner of a graph this module cannot read
REEXPORT = ('re-export it with tools/deployment/export_onnx.py CONFIG '
            'CHECKPOINT --shape H W --dynamic --out-file FILE')

Shape = Tuple[int, int]
Image = Union[str, np.ndarray]


# ----------------------------------------------------------- metadata
def read_metadata(props: Dict[str, str], source: str = 'the graph'
                  ) -> Dict[str, Any]:
    """The deployment settings in a graph's metadata (``{key: text}``),
    checked: :class:`InputError` naming ``source`` and what to do
    when they are missing, of another version or incomplete."""
    version = props.get(VERSION_KEY)
    if version is None:
        raise InputError(
            f'{source} has no mmseg_whitebox deployment metadata (test '
            'resize, normalisation, sliding window, classes): it was '
            'exported before OnnxSegmentor existed or by another tool; '
            f'{REEXPORT}')
    try:
        version = int(version)
    except ValueError as exc:
        raise InputError(f'{source}: unreadable metadata version '
                         f'{version!r}; {REEXPORT}') from exc
    if version > METADATA_VERSION:
        raise InputError(
            f'{source} has deployment metadata version {version}, newer '
            f'than this mmseg_whitebox reads ({METADATA_VERSION}): update '
            f'mmseg_whitebox, or {REEXPORT} with this version')
    if version < METADATA_VERSION:
        raise InputError(
            f'{source} has deployment metadata version {version}; this '
            f'mmseg_whitebox reads version {METADATA_VERSION}: {REEXPORT}')
    missing = [k for k in REQUIRED_KEYS if k not in props]
    if missing:
        raise InputError(f'{source}: deployment metadata without '
                         f'{", ".join(missing)}; {REEXPORT}')
    try:
        meta = {k: json.loads(props[k]) for k in REQUIRED_KEYS}
    except json.JSONDecodeError as exc:
        raise InputError(f'{source}: damaged deployment metadata '
                         f'({exc}); {REEXPORT}') from exc
    if meta['mode'] not in ('whole', 'slide'):
        raise InputError(f'{source}: inference mode '
                         f'{meta["mode"]!r} is not whole or slide')
    if meta['mode'] == 'slide' and not (meta['crop_size'] and meta['stride']):
        raise InputError(f'{source}: slide inference without '
                         'crop_size and stride; ' + REEXPORT)
    return meta


# ------------------------------------------------ the test-pipeline resize
def scale_size(size: Shape, factor: Union[float, Sequence[float]]) -> Shape:
    """mmcv's ``_scale_size``: ``(w, h)`` times ``factor``, rounded half
    up."""
    fw, fh = (factor, factor) if np.isscalar(factor) else factor
    w, h = size
    return int(w * float(fw) + 0.5), int(h * float(fh) + 0.5)


def rescale_size(size: Shape, scale: Union[float, Sequence[int]]) -> Shape:
    """mmcv's ``rescale_size``: the ``(w, h)`` that ``imrescale`` gives an
    image of ``(w, h)`` ``size``: times ``scale``, or, for a ``(long,
    short)`` pair, as large as fits in it with the aspect ratio kept."""
    w, h = size
    if np.isscalar(scale):
        factor = scale
    else:
        factor = min(max(scale) / max(h, w), min(scale) / min(h, w))
    return scale_size((w, h), factor)


def shortest_edge_scale(size: Shape, short: Union[int, Sequence[int]],
                        max_size: int) -> Shape:
    """mmseg's ``ResizeShortestEdge._get_output_shape``: the ``(w, h)``
    scale with short side ``short`` (the smaller one of a pair), the long
    side capped at ``max_size``."""
    w, h = size
    short = float(short if np.isscalar(short) else min(short))
    factor = short / min(h, w)
    new_h, new_w = (short, factor * w) if h < w else (factor * h, short)
    if max(new_h, new_w) > max_size:
        factor = max_size / max(new_h, new_w)
        new_h, new_w = new_h * factor, new_w * factor
    return int(new_w + 0.5), int(new_h + 0.5)


def resize_step(img: np.ndarray, step: Dict[str, Any]) -> np.ndarray:
    """One resize of the test pipeline (its fields: the exporter's
    :func:`~.onnx_export.metadata.pipeline_resizes`), as mmcv computes and
    calls it."""
    h, w = img.shape[:2]
    if step['type'] == 'ResizeShortestEdge':
        step = dict(type='Resize', scale=shortest_edge_scale(
            (w, h), step['scale'], step['max_size']), scale_factor=None,
                    keep_ratio=True, interpolation='bilinear')
    scale = step['scale']
    if scale is None:  # Resize(scale_factor=...)
        scale = scale_size((w, h), step['scale_factor'])
    size = (rescale_size((w, h), tuple(scale)) if step['keep_ratio'] else
            tuple(int(s) for s in scale))
    return cv2.resize(img, size,
                      interpolation=CV2_INTERPOLATION[step['interpolation']])


# ----------------------------------------------- bilinear, as PyTorch
def source_index(in_size: int, out_size: int, align_corners: bool,
                 start: int = 0, stop: Optional[int] = None
                 ) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(i0, i1, lambda1)`` of output indices ``start..stop-1`` along one
    axis, as PyTorch's CPU ``upsample_bilinear2d`` computes them (float32
    scale and source coordinate, clamped at 0, last index repeated)."""
    stop = out_size if stop is None else stop
    dst = np.arange(start, stop, dtype=np.float32)
    if align_corners:
        scale = (np.float32(in_size - 1) / np.float32(out_size - 1)
                 if out_size > 1 else np.float32(0))
        src = scale * dst
    else:
        scale = np.float32(in_size) / np.float32(out_size)
        src = np.maximum(scale * (dst + np.float32(0.5)) - np.float32(0.5),
                         np.float32(0))
    i0 = np.minimum(np.floor(src).astype(np.int64), in_size - 1)
    lam = np.clip(src - i0.astype(np.float32), 0, 1).astype(np.float32)
    return i0, np.minimum(i0 + 1, in_size - 1), lam


def _lerp(x: np.ndarray, axis: int, size: int, align_corners: bool,
          start: int = 0, stop: Optional[int] = None) -> np.ndarray:
    """Indices ``start..stop-1`` of ``x`` resized linearly to ``size``
    along ``axis`` (a view when the size stays)."""
    stop = size if stop is None else stop
    if x.shape[axis] == size:
        return x.take(range(start, stop), axis) if (start, stop) != (
            0, size) else x
    i0, i1, lam = source_index(x.shape[axis], size, align_corners, start,
                               stop)
    lam = lam.reshape([-1 if a == axis else 1 for a in range(x.ndim)])
    out = np.take(x, i0, axis=axis)
    out *= 1 - lam
    other = np.take(x, i1, axis=axis)
    other *= lam
    out += other
    return out


def resize_bilinear(x: np.ndarray, size: Shape,
                    align_corners: bool = False) -> np.ndarray:
    """``x`` ``(C, H, W)`` float32 resized bilinearly to ``size`` ``(h,
    w)``: ``F.interpolate(mode='bilinear')`` of the ``(1, C, H, W)``
    tensor, up to float rounding (along the width first, then the height,
    as PyTorch's weights nest; no antialiasing, as its default)."""
    return _lerp(_lerp(x, 2, size[1], align_corners), 1, size[0],
                 align_corners)


def resize_argmax(logits: np.ndarray, size: Shape,
                  align_corners: bool = False,
                  threshold: Optional[float] = None,
                  with_logits: bool = False,
                  tile_bytes: int = DEFAULT_TILE_BYTES
                  ) -> Tuple[np.ndarray, Optional[np.ndarray]]:
    """``(labels, logits)``: the argmax (int64, ``(H, W)``) of ``logits``
    ``(C, h, w)`` resized bilinearly to ``size`` and, ``with_logits``, the
    resized logits ``(C, H, W)`` (one channel: the sigmoid, labels
    ``sigmoid > threshold``, as mmseg). The width pass (``_lerp`` along
    the width) runs once on the whole map and holds ``(C, h, W)`` floats,
    bounded by the input's height, not the output's width. Without the
    logits the height pass and the argmax then go a band of output rows at
    a time (``tile_bytes`` of float buffers for each band), so no ``(C, H,
    W)`` map is held; with them, one band of all rows."""
    channels = logits.shape[0]
    out_h, out_w = size
    if channels == 1 and threshold is None:
        raise ValueError('one output channel needs the threshold of the '
                         'decode head (sigmoid > threshold)')
    labels = np.empty((out_h, out_w), dtype=np.int64)
    columns = _lerp(logits, 2, out_w, align_corners)
    rows = out_h if with_logits else max(
        1, min(out_h, tile_bytes // max(1, 4 * channels * out_w)))
    for start in range(0, out_h, rows):
        stop = min(out_h, start + rows)
        band = _lerp(columns, 1, out_h, align_corners, start, stop)
        if channels > 1:
            labels[start:stop] = band.argmax(axis=0)
        else:
            band = 1 / (1 + np.exp(-band))
            labels[start:stop] = band[0] > threshold
    return labels, band if with_logits else None


def load_image(image: Image) -> np.ndarray:
    """The BGR uint8 ``(H, W, 3)`` image at a path (decoded by OpenCV as
    mmcv's ``imread`` does: colour, EXIF orientation applied) or given as
    an array."""
    if isinstance(image, str):
        if not osp.isfile(image):
            raise InputError(f'image {image!r} does not exist')
        img = cv2.imdecode(np.fromfile(image, dtype=np.uint8),
                           cv2.IMREAD_COLOR)
        if img is None:
            raise InputError(f'OpenCV cannot read {image!r} as an image')
        return img
    img = np.asarray(image)
    if img.dtype != np.uint8 or img.ndim != 3 or img.shape[2] != 3:
        raise InputError('give the image as a path or a BGR uint8 array of '
                         f'shape (H, W, 3), not {img.dtype} {img.shape}')
    return img


@dataclass
class Prediction:
    """One image's prediction: ``labels`` ``(H, W)`` int64 class indices
    at the image's size; ``logits`` ``(C, H, W)`` float32 (mmseg's
    ``seg_logits``; one channel: the sigmoid) when asked for."""
    labels: np.ndarray
    logits: Optional[np.ndarray] = None


class OnnxSegmentor:
    """An exported segmentor that predicts images as mmseg's
    ``inference_model`` does for its config (see the module doc).

    Args:
        path: the ``.onnx`` file written by
            ``tools/deployment/export_onnx.py`` (with ``--dynamic`` for
            images of any size).
        providers: onnxruntime execution providers, names or ``(name,
            options)`` pairs, in order of preference (default: the CPU).
        threads: onnxruntime's intra-op threads (default: its choice).
        tile_bytes: float buffers of one band of output rows in the
            height pass of the final resize, when the logits are not
            asked for (the width pass before it is not banded).

    Example::

        segmentor = OnnxSegmentor('model.onnx')
        labels = segmentor('image.jpg').labels          # (H, W)
    """

    def __init__(self,
                 path: str,
                 providers: Optional[Sequence[Any]] = None,
                 threads: Optional[int] = None,
                 tile_bytes: int = DEFAULT_TILE_BYTES) -> None:
        try:
            import onnxruntime as ort
        except ImportError as exc:
            raise ImportError(
                'OnnxSegmentor needs onnxruntime (pip install onnxruntime, '
                'or the deploy extra of mmseg_whitebox)') from exc
        if not osp.isfile(path):
            raise FileNotFoundError(f'ONNX model {path!r} does not exist')
        providers = list(providers or ['CPUExecutionProvider'])
        available = ort.get_available_providers()
        unknown = [p for p in providers
                   if (p if isinstance(p, str) else p[0]) not in available]
        if unknown:
            raise InputError(
                f'execution provider(s) {unknown} not available in this '
                f'onnxruntime; available: {", ".join(available)}')
        options = ort.SessionOptions()
        options.log_severity_level = 3  # errors only
        if threads:
            options.intra_op_num_threads = int(threads)
        self.path = path
        self.session = ort.InferenceSession(path, options,
                                            providers=providers)
        props = dict(self.session.get_modelmeta().custom_metadata_map)
        self.metadata = read_metadata(props, repr(path))
        graph_input = self.session.get_inputs()[0]
        self.input_name = graph_input.name
        # (H, W) of a graph exported without --dynamic, else None
        dims = tuple(graph_input.shape[2:])
        self.static_size = (dims if all(isinstance(d, int) for d in dims)
                            else None)
        outputs = [o.name for o in self.session.get_outputs()]
        if outputs != list(OUTPUT_NAMES):
            raise InputError(
                f'{path!r} has outputs {outputs}, not {list(OUTPUT_NAMES)}: '
                f'{REEXPORT}')
        self.tile_bytes = int(tile_bytes)

    @property
    def classes(self) -> List[str]:
        return list(self.metadata['classes'])

    @property
    def palette(self) -> List[List[int]]:
        return [list(c) for c in self.metadata['palette']]

    @property
    def providers(self) -> List[str]:
        """The execution providers the session uses."""
        return self.session.get_providers()

    def __call__(self, image: Image, with_logits: bool = False
                 ) -> Prediction:
        return self.predict(image, with_logits)

    # -------------------------------------------------------- the steps
    def preprocess(self, image: Image
                   ) -> Tuple[np.ndarray, Dict[str, Any]]:
        """The network input ``(3, h, w)`` float32 of ``image`` and what
        post-processing needs (``ori_shape``, ``img_shape``,
        ``pad_shape``, ``padding``): the test pipeline's resizes, then
        the data preprocessor."""
        meta = self.metadata
        img = load_image(image)
        info: Dict[str, Any] = dict(ori_shape=img.shape[:2])
        for step in meta['test_resize']:
            img = resize_step(img, step)
        info['img_shape'] = img.shape[:2]
        if meta['bgr_to_rgb']:
            img = img[..., ::-1]
        x = img.astype(np.float32)
        if meta['mean'] is not None:
            x = ((x - np.asarray(meta['mean'], dtype=np.float32)) /
                 np.asarray(meta['std'], dtype=np.float32))
        x = np.ascontiguousarray(x.transpose(2, 0, 1))  # (3, h, w)
        info['padding'] = (0, 0, 0, 0)  # left, right, top, bottom
        pad = meta['pad']
        if pad:
            h, w = x.shape[1:]
            if pad.get('size'):
                ph, pw = pad['size']
            else:
                div = int(pad['size_divisor'] or 1)
                ph, pw = -(-h // div) * div, -(-w // div) * div
            bottom, right = max(ph - h, 0), max(pw - w, 0)
            x = np.pad(x, ((0, 0), (0, bottom), (0, right)),
                       constant_values=np.float32(pad['pad_val']))
            info['padding'] = (0, right, 0, bottom)
            info['pad_shape'] = x.shape[1:]
        short = meta['test_short_side']
        h, w = x.shape[1:]
        if short and min(h, w) < short:
            size = ((short, int(w / h * short)) if h < w else
                    (int(h / w * short), short))
            x = resize_bilinear(x, size, align_corners=False)
        least = meta['min_input_side']
        if min(x.shape[1:]) < least:
            raise InputError(
                f'the image ({info["ori_shape"][0]}x{info["ori_shape"][1]}) '
                f'is {x.shape[1]}x{x.shape[2]} after the test resize: too '
                f'small for this model (both sides at least {least} '
                'pixels)')
        return x, info

    def run(self, x: np.ndarray, head: bool = False) -> np.ndarray:
        """The graph on one input ``(3, h, w)``: logits ``(C, h, w)``, or
        with ``head`` those of the decode head before the resize."""
        if self.static_size and x.shape[1:] != self.static_size:
            size = self.static_size
            raise InputError(
                f'the graph was exported for {size[0]}x{size[1]} inputs '
                f'only, this image needs {x.shape[1]}x{x.shape[2]}: export '
                'it with --dynamic')
        return self.session.run([OUTPUT_NAMES[int(head)]],
                                {self.input_name: x[None]})[0][0]

    def infer(self, x: np.ndarray, info: Dict[str, Any]) -> np.ndarray:
        """mmseg's ``inference``: logits ``(C, h, w)`` of the network
        input, whole or by sliding window."""
        meta = self.metadata
        if meta['mode'] == 'whole':
            # the decode head resizes its logits to the padded input, else
            # to the resized image: another size than the network input
            # after the short-side upsampling, then from its own logits
            size = tuple(info.get('pad_shape', info['img_shape']))
            if tuple(x.shape[1:]) == size:
                return self.run(x)
            return resize_bilinear(self.run(x, head=True), size,
                                   meta['align_corners'])
        h, w = x.shape[1:]
        preds = np.zeros((meta['out_channels'], h, w), dtype=np.float32)
        count = np.zeros((1, h, w), dtype=np.float32)
        for y1, y2, x1, x2 in slide_windows((h, w), meta['crop_size'],
                                            meta['stride']):
            preds[:, y1:y2, x1:x2] += self.run(
                np.ascontiguousarray(x[:, y1:y2, x1:x2]))
            count[:, y1:y2, x1:x2] += 1
        return preds / count

    def postprocess(self, logits: np.ndarray, info: Dict[str, Any],
                    with_logits: bool = False) -> Prediction:
        """mmseg's ``postprocess_result``: padding removed, resized to the
        original image, argmax."""
        meta = self.metadata
        left, right, top, bottom = info['padding']
        h, w = logits.shape[1:]
        logits = logits[:, top:h - bottom, left:w - right]
        labels, logits = resize_argmax(
            logits, info['ori_shape'], meta['align_corners'],
            meta['threshold'], with_logits, self.tile_bytes)
        return Prediction(labels, logits)

    def predict(self, image: Image, with_logits: bool = False
                ) -> Prediction:
        """The prediction of ``image`` (a path, or a BGR uint8 array of any
        size), with the logits ``with_logits``."""
        x, info = self.preprocess(image)
        return self.postprocess(self.infer(x, info), info, with_logits)
