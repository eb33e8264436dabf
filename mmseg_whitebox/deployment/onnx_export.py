"""Export a whole segmentor (encoder + any decode head) to ONNX and check
the graph with onnxruntime against PyTorch; the logic of
``tools/deployment/export_onnx.py``.

**What the graph computes.** :class:`SegLogits`: mmseg's tensor mode
(``model(x, mode='tensor')``: encoder and decode head) followed by the
bilinear resize to the input size that whole-image inference does, so its
output is the ``seg_logits`` that ``inference_model`` returns in whole mode
for an input of that size (the argmax is the prediction). Input: the
*normalised* image ``(1, 3, H, W)`` float32, i.e. after mmseg's data
preprocessor. The rest of the way from an image to ``inference_model``'s
prediction (test resize, normalisation, padding, sliding window, resize
back, argmax) is :class:`~.onnx_segmentor.OnnxSegmentor`'s, with the
settings :func:`deployment_metadata` stores in the graph's metadata.

**Exporter.** torch's dynamo exporter (``torch.onnx.export(...,
dynamo=True)``, via ``torch.export``), standard ONNX operators only (the
export fails on anything else). Three things made earlier graphs run at
the export size only; all three are handled without custom operators:

* mmseg's ``VisionTransformer`` resizes its position embedding only when
  the token count differs from the training grid, a Python ``if`` that
  ``torch.export`` decides once, at the export size: the graph then adds
  the unresized embedding at every size (onnxruntime: ``Add`` cannot
  broadcast 241 by 257). While exporting, the embedding is always resized
  (:func:`export_friendly`; at the training grid the bicubic resize is the
  identity, and mmseg's own code is what the check compares against);
* padding of inputs whose sides are not multiples of the patch size
  (mmseg's ``AdaptivePadding``) happens only when some is needed, again
  decided at the export size; while exporting the (possibly zero) padding
  is always applied (the project's patch stems always pad);
* CBSA's ``adaptive_avg_pool2d`` of the token grid to the representatives
  grid: the dynamo exporter bakes the pooling cells of the export size in
  as index tensors (``GatherND`` out of range elsewhere) and the TorchScript
  exporter refuses grids that the representatives grid does not divide.
  While exporting, :func:`~mmseg_whitebox.ops.cbsa.pool_grid` pools with
  separable averaging matrices computed from the grid size in the graph
  (:mod:`mmseg_whitebox.ops.export`).
"""
from __future__ import annotations

import contextlib
import importlib.util
import json
import logging
import os
import os.path as osp
import types
from dataclasses import asdict, dataclass
from typing import (Any, Dict, Iterator, List, Optional, Sequence, Tuple,
                    Union)

import torch
import torch.nn as nn
import torch.nn.functional as F

from mmseg_whitebox.engine.config import read_config
from mmseg_whitebox.utils.atomic import (atomic_path, check_not_input,
                                         write_json)
from mmseg_whitebox.utils.capabilities import onnx_dynamo_export
from mmseg_whitebox.utils.checkpoint_checks import (check_checkpoint,
                                                    init_model)
from mmseg_whitebox.utils.input_checks import (check_image_file,
                                               check_output_file)
from mmseg_whitebox.utils.run_lock import lock_output_file
from mmseg_whitebox.utils.tool_error import (CheckFailedError, InputError,
                                             ToolError)
from mmseg_whitebox.visualization.overlay import config_name, dataset_meta

from .onnx_segmentor import (CV2_INTERPOLATION, METADATA_VERSION,
                             OUTPUT_NAMES, REQUIRED_KEYS, VERSION_KEY,
                             OnnxSegmentor)

Shape = Tuple[int, int]

#: the default check: at least this share of pixels with the same argmax
#: as PyTorch, at every size checked
MIN_AGREEMENT = 0.999
#: the onnx packages of the ``deploy`` extra (module -> pip name)
DEPLOY_PACKAGES = {'onnx': 'onnx', 'onnxruntime': 'onnxruntime',
                   'onnxscript': 'onnxscript'}
#: operator domains of standard ONNX
STANDARD_DOMAINS = ('', 'ai.onnx')
#: the oldest opset the export writes: torch's dynamo exporter builds the
#: graph with its operator library at opset 18 (torch's
#: ``TORCHLIB_OPSET``) and only converts it up from there; asked for less,
#: it keeps opset 18 silently
MIN_OPSET = 18
INPUT_NAME = 'input'
#: the graph's outputs: the logits resized to the input size, and the
#: decode head's logits before that resize (whole-mode inference resizes
#: them to another size than the input's after
#: ShortSideDataPreProcessor's upsampling)
OUTPUT_NAME, HEAD_OUTPUT_NAME = OUTPUT_NAMES


@dataclass
class Parity:
    """onnxruntime against PyTorch at one input size."""
    shape: Shape
    max_abs_diff: float
    argmax_agreement: float
    export_shape: bool = False

    def __str__(self) -> str:
        where = ' (export shape)' if self.export_shape else ''
        return (f'{self.shape[0]}x{self.shape[1]}{where}: max |logit diff| '
                f'{self.max_abs_diff:.3g}, argmax agreement '
                f'{100 * self.argmax_agreement:.3f}%')


def export_problem() -> Optional[str]:
    """Why this environment cannot export, or None: the ``deploy`` extra
    missing, or a torch without the dynamo exporter's
    ``torch.onnx.export(..., dynamo=True)`` (torch 2.5 added the argument;
    the legacy stack's torch 2.1 has only the TorchScript exporter, whose
    graphs of these models this project does not check)."""
    missing = [pip for module, pip in DEPLOY_PACKAGES.items()
               if importlib.util.find_spec(module) is None]
    if missing:
        return (f'ONNX export needs {", ".join(missing)}: install the '
                'deploy extra, pip install -c constraints.txt -e ".[deploy]"')
    if not onnx_dynamo_export():
        return (f'ONNX export needs torch >= 2.5 (torch.onnx.export(..., '
                f'dynamo=True)), found torch {torch.__version__}: export '
                'in an environment with a newer torch (the default stack '
                'has 2.13); the graph runs anywhere onnxruntime does')
    return None


def check_can_export() -> None:
    """A :class:`ToolError` saying what to install when this environment
    cannot export (:func:`export_problem`)."""
    problem = export_problem()
    if problem:
        raise ToolError(problem)


class SegLogits(nn.Module):
    """``segmentor(x, mode='tensor')`` resized bilinearly to ``x``'s size:
    whole-mode ``seg_logits`` of ``(1, 3, H, W)`` normalised images; with
    ``head_logits``, also the logits before the resize (the graph's second
    output)."""

    def __init__(self, segmentor: nn.Module,
                 head_logits: bool = False) -> None:
        super().__init__()
        self.segmentor = segmentor
        self.head_logits = head_logits

    def forward(self, inputs: torch.Tensor) -> Any:
        logits = self.segmentor(inputs, mode='tensor')
        resized = F.interpolate(logits, size=inputs.shape[2:],
                                mode='bilinear',
                                align_corners=self.segmentor.align_corners)
        return (resized, logits) if self.head_logits else resized


def _resized_pos_embedding(self, patched_img: torch.Tensor,
                           hw_shape: Shape,
                           pos_embed: torch.Tensor) -> torch.Tensor:
    """mmseg's ``VisionTransformer._pos_embeding`` without its shape test:
    the embedding is resized to the token grid at every size."""
    pos_h = self.img_size[0] // self.patch_size
    pos_w = self.img_size[1] // self.patch_size
    if pos_embed.shape[1] != pos_h * pos_w + 1:  # mmseg's own error
        return type(self)._pos_embeding(self, patched_img, hw_shape,
                                        pos_embed)
    pos_embed = self.resize_pos_embed(pos_embed, hw_shape, (pos_h, pos_w),
                                      self.interpolate_mode)
    return self.drop_after_pos(patched_img + pos_embed)


def _always_padded(self, x: torch.Tensor) -> torch.Tensor:
    """mmseg's ``AdaptivePadding.forward`` with the padding applied at
    every size (zero where none is needed), in symbolic-size arithmetic."""
    pads = []
    for size, kernel, stride, dilation in zip(x.shape[-2:], self.kernel_size,
                                              self.stride, self.dilation):
        reach = (kernel - 1) * dilation + 1
        pad = ((size + stride - 1) // stride - 1) * stride + reach - size
        # never negative when the kernel reaches a stride (patch embeddings)
        pads.append(pad if reach >= stride else torch.sym_max(pad, 0))
    pad_h, pad_w = pads
    if self.padding == 'corner':
        return F.pad(x, [0, pad_w, 0, pad_h])
    return F.pad(x, [pad_w // 2, pad_w - pad_w // 2, pad_h // 2,
                     pad_h - pad_h // 2])


@contextlib.contextmanager
def export_friendly(model: nn.Module) -> Iterator[nn.Module]:
    """Inside the block, ``model`` exports to a graph valid at any input
    size: every mmseg ``VisionTransformer`` (also ``WhiteBoxViT``) resizes
    its position embedding and pads its input unconditionally. Outside
    it, the model is as before."""
    from mmseg.models.backbones import VisionTransformer
    from mmcv.cnn.bricks.transformer import AdaptivePadding as MMCVPadding
    from mmseg.models.utils.embed import AdaptivePadding
    patched = []
    for module in model.modules():
        if isinstance(module, VisionTransformer):
            patched.append((module, '_pos_embeding', _resized_pos_embedding))
        elif isinstance(module, (AdaptivePadding, MMCVPadding)):
            patched.append((module, 'forward', _always_padded))
    for module, name, function in patched:
        setattr(module, name, types.MethodType(function, module))
    try:
        yield model
    finally:
        for module, name, _ in patched:
            delattr(module, name)


def patch_stride(model: nn.Module) -> int:
    """Input pixels per token along a side (the backbone's patch size)."""
    size = getattr(getattr(model, 'backbone', None), 'patch_size', 1)
    return int(size[0] if isinstance(size, (tuple, list)) else size)


def min_input_side(model: nn.Module) -> int:
    """The smallest input side the model takes: one token, or as many as
    the largest CBSA representatives grid needs."""
    grids = [max(m.rep_grid) for m in model.modules()
             if isinstance(getattr(m, 'rep_grid', None), tuple)]
    return patch_stride(model) * max(grids + [1])


def check_shapes(model: nn.Module, shapes: Sequence[Shape]) -> None:
    least = min_input_side(model)
    for h, w in shapes:
        if min(h, w) < least:
            raise ToolError(
                f'input size {h}x{w} is too small for this model: both '
                f'sides must be at least {least} pixels (its token grid must '
                'hold the CBSA representatives grid)')


def default_check_shape(model: nn.Module, shape: Shape) -> Shape:
    """A non-square size other than ``shape`` (3/4 of its height, 5/4 of
    its width, in whole tokens) for checking a dynamic graph."""
    stride, least = patch_stride(model), min_input_side(model)

    def rounded(side: float) -> int:
        return max(least, stride * max(1, round(side / stride)))

    h, w = rounded(shape[0] * 3 / 4), rounded(shape[1] * 5 / 4)
    if h == w:
        w += stride
    return h, w


def export_onnx(model: nn.Module,
                out: str,
                shape: Shape,
                dynamic: bool = False,
                opset: Optional[int] = None,
                metadata: Optional[Dict[str, str]] = None) -> str:
    """Export :class:`SegLogits` of ``model`` (on the CPU, eval mode) at
    input size ``shape`` to ``out`` (outputs :data:`OUTPUT_NAME` and
    :data:`HEAD_OUTPUT_NAME`); with ``dynamic`` the height and width are
    free (the batch stays 1). Returns ``out``."""
    check_can_export()
    check_shapes(model, [shape])
    model.eval()
    graph = SegLogits(model, head_logits=True).eval()
    example = torch.randn(1, 3, *shape)
    dynamic_shapes = None
    if dynamic:
        least = min_input_side(model)
        dim = torch.export.Dim
        dynamic_shapes = {'inputs': {2: dim('height', min=least),
                                     3: dim('width', min=least)}}
    # (onnxscript's optimizer logs every operator it leaves unfolded)
    quiet = logging.getLogger('onnxscript')
    level = quiet.level
    quiet.setLevel(logging.ERROR)
    try:
        with export_friendly(model), torch.no_grad():
            program = torch.onnx.export(
                graph, (example, ), dynamo=True,
                dynamic_shapes=dynamic_shapes, opset_version=opset,
                input_names=[INPUT_NAME],
                output_names=[OUTPUT_NAME, HEAD_OUTPUT_NAME],
                verbose=False)
    finally:
        quiet.setLevel(level)
    for key, value in (metadata or {}).items():
        program.model.metadata_props[key] = value
    with atomic_path(out) as tmp:  # only a complete graph of that opset
        program.save(tmp)
        written = graph_opset(tmp)
        if opset is not None and written != opset:
            raise ToolError(f'the exporter wrote opset {written}, not the '
                            f'--opset {opset} asked for; nothing was '
                            'written. Leave --opset out or choose '
                            f'{written}')
    return out


def check_opset(opset: Optional[int]) -> None:
    """An opset the export can honour (see :data:`MIN_OPSET`)."""
    if opset is not None and opset < MIN_OPSET:
        raise ToolError(
            f'--opset {opset} cannot be honoured: torch\'s dynamo exporter '
            f'writes opset {MIN_OPSET} or newer (it would write opset '
            f'{MIN_OPSET} silently). Leave --opset out or give >= '
            f'{MIN_OPSET}; for an older runtime, convert the graph '
            'afterwards with onnx.version_converter')


def graph_opset(path: str) -> int:
    """The standard-ONNX opset the graph at ``path`` declares."""
    import onnx
    proto = onnx.load(path, load_external_data=False)
    return next(o.version for o in proto.opset_import
                if o.domain in STANDARD_DOMAINS)


def non_standard_ops(path: str) -> List[str]:
    """``domain::op`` of every node outside standard ONNX (should be
    none: no custom operators), functions included."""
    import onnx
    proto = onnx.load(path, load_external_data=False)
    nodes = list(proto.graph.node)
    for function in proto.functions:
        nodes += list(function.node)
    return sorted({f'{n.domain}::{n.op_type}' for n in nodes
                   if n.domain not in STANDARD_DOMAINS})


def onnx_parity(model: nn.Module,
                path: str,
                shapes: Sequence[Shape],
                export_shape: Optional[Shape] = None,
                seed: int = 0) -> List[Parity]:
    """Run the graph at ``path`` with onnxruntime (CPU) and ``model`` in
    PyTorch (default operators, mmseg's own code) on the same random
    normalised inputs, one per size in ``shapes``."""
    import numpy as np
    import onnxruntime as ort
    options = ort.SessionOptions()
    options.log_severity_level = 3  # errors only
    session = ort.InferenceSession(path, options,
                                   providers=['CPUExecutionProvider'])
    graph = SegLogits(model).eval()
    generator = torch.Generator().manual_seed(seed)
    results = []
    for shape in shapes:
        x = torch.randn(1, 3, *shape, generator=generator)
        with torch.no_grad():
            expected = graph(x).numpy()
        try:
            got = session.run([OUTPUT_NAME], {INPUT_NAME: x.numpy()})[0]
        except Exception as exc:  # onnxruntime raises its own types
            raise RuntimeError(f'onnxruntime failed at {shape[0]}x'
                               f'{shape[1]}: {exc}') from exc
        if got.shape != expected.shape:
            raise RuntimeError(f'onnxruntime returned {got.shape} at '
                               f'{shape}, PyTorch {expected.shape}')
        results.append(Parity(
            shape=tuple(shape),
            max_abs_diff=float(np.abs(got - expected).max()),
            argmax_agreement=float(
                (got.argmax(1) == expected.argmax(1)).mean()),
            export_shape=tuple(shape) == tuple(export_shape or ())))
    return results


#: test-pipeline steps that leave the image as it is (the loaders with
#: their defaults, labels, checks, packing)
PASSIVE_STEPS = ('LoadImageFromFile', 'LoadImageFromNDArray',
                 'LoadAnnotations', 'CheckSegSample', 'PackSegInputs')


def pipeline_resizes(pipeline: Sequence[dict]) -> List[Dict[str, Any]]:
    """The resizes of a test pipeline as :mod:`.onnx_segmentor` replays
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
    :mod:`.onnx_segmentor` replays: mmseg's ``EncoderDecoder`` inference
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
    """What :class:`~.onnx_segmentor.OnnxSegmentor` needs to turn an image
    into ``inference_model``'s prediction with the graph of ``model``
    (built by ``init_model``: its config is ``model.cfg``): the test
    pipeline's resizes, the data preprocessor's normalisation, padding and
    short-side upsampling, the inference mode and window, the classes and
    their palette; each a JSON value, with :data:`~.onnx_segmentor.
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


def export_and_check(config: str,
                     checkpoint: str,
                     out: str,
                     shape: Shape,
                     dynamic: bool = False,
                     opset: Optional[int] = None,
                     other_shapes: Sequence[Shape] = (),
                     cfg_options: Optional[dict] = None,
                     min_agreement: float = MIN_AGREEMENT,
                     report_file: Optional[str] = None,
                     check_image: Optional[str] = None,
                     log=print) -> Dict[str, Any]:
    """Load ``config`` with ``checkpoint`` (weights-only, refused when it
    does not fit), export it to ``out`` with the deployment metadata
    (:func:`deployment_metadata`) and check it with onnxruntime at
    ``shape`` and, for a ``dynamic`` graph, at ``other_shapes`` (default:
    one non-square size); with ``check_image``, also
    :class:`~.onnx_segmentor.OnnxSegmentor` against ``inference_model`` on
    that image (:func:`image_parity`). Raises :class:`ToolError` on bad
    input, before anything is written.

    The graph is written to a temporary file next to ``out`` and becomes
    ``out`` only once every check has passed; a graph that fails a check
    (an argmax agreement below ``min_agreement`` anywhere, non-standard
    operators) or whose check fails is kept as :func:`failed_path`
    (``<stem>.failed.onnx``) instead, and a failed check is a
    :class:`CheckFailedError` saying where. The report is written to
    ``report_file`` (``--json``) either way, naming where the graph is;
    it is also returned. ``out`` is locked (``<out>.lock``) while this
    runs: a second export to it is refused."""
    check_opset(opset)
    shape = _shape(shape, '--shape')
    other_shapes = [_shape(s, '--check-shapes') for s in other_shapes]
    if other_shapes and not dynamic:
        raise ToolError('--check-shapes needs --dynamic: a static graph runs '
                        'at its export shape only')
    if not 0 < min_agreement <= 1:
        raise ToolError(f'--min-agreement must be in (0, 1], got '
                        f'{min_agreement}')
    check_not_input(out, [config, checkpoint], '--out-file')
    check_output_file(out, '--out-file', suffixes=('.onnx', ))
    if report_file:
        check_not_input(report_file, [config, checkpoint, out], '--json')
        check_output_file(report_file, '--json', suffixes=('.json', ))
    if check_image:
        if not osp.isfile(check_image):
            raise ToolError(f'--check-image {check_image!r} does not exist')
        check_image_file(check_image)
    if not checkpoint:
        raise ToolError('a checkpoint is needed')
    check_checkpoint(checkpoint)
    check_can_export()  # after the arguments: their mistakes come first
    # one export to ``out`` at a time
    with lock_output_file(out, '--out-file'):
        model = _load_model(config, checkpoint, cfg_options)
        shapes = [shape]
        if dynamic:
            shapes += other_shapes or [default_check_shape(model, shape)]
        check_shapes(model, shapes)
        metadata = deployment_metadata(model)  # before exporting: may refuse
        if not dynamic:
            log(f'note: a static graph runs at {shape[0]}x{shape[1]} only; '
                'OnnxSegmentor needs --dynamic for images of other sizes')
        os.makedirs(osp.dirname(osp.abspath(out)), exist_ok=True)
        kind = 'dynamic H, W' if dynamic else 'static'
        log(f'exporting {osp.basename(config)} at {shape[0]}x{shape[1]} '
            f'({kind}) to {out}')
        report = dict(config=config, checkpoint=checkpoint, onnx=out,
                      dynamic=dynamic, opset=opset)
        failed = failed_path(out)
        # ``out`` appears only once the graph has passed every check
        with atomic_path(out) as staged:
            export_onnx(model, staged, shape, dynamic=dynamic, opset=opset,
                        metadata=metadata)
            try:
                problem = check_graph(model, staged, shapes, shape,
                                      min_agreement, check_image, report,
                                      log)
            except ToolError:
                raise  # bad input (--check-image): nothing to keep
            except Exception:
                os.replace(staged, failed)
                log(f'the graph was not confirmed: kept as {failed}')
                raise
            if problem:
                os.replace(staged, failed)
                report['onnx'] = failed
            if report_file:
                write_json(report_file, report, indent=2)
            if problem:
                raise CheckFailedError(f'{problem}; the graph is kept as '
                                       f'{failed}, and --out-file {out} was '
                                       'not written')
    return report


def _load_model(config: str, checkpoint: str,
                cfg_options: Optional[dict]) -> nn.Module:
    """``config``'s model with ``checkpoint``'s weights on the CPU, in eval
    mode; a checkpoint that does not fit is a :class:`ToolError`."""
    cfg = read_config(config, cfg_options)
    return init_model(cfg, checkpoint, device='cpu').eval()


def failed_path(out: str) -> str:
    """Where a graph that failed its check is kept:
    ``<out without .onnx>.failed.onnx``."""
    return osp.splitext(out)[0] + '.failed.onnx'


def check_graph(model: nn.Module, path: str, shapes: Sequence[Shape],
                export_shape: Shape, min_agreement: float,
                check_image: Optional[str], report: Dict[str, Any],
                log=print) -> Optional[str]:
    """Check the graph at ``path`` against ``model``: standard operators
    only, and an argmax agreement of at least ``min_agreement`` at every
    size in ``shapes`` (and, with ``check_image``, of
    :class:`~.onnx_segmentor.OnnxSegmentor` against ``inference_model`` on
    that image). The figures go into ``report`` and ``log``; returns what
    failed, or None."""
    custom = non_standard_ops(path)
    if custom:
        return f'the graph has non-standard operators: {custom}'
    results: List[Any] = onnx_parity(model, path, shapes,
                                     export_shape=export_shape)
    log('onnxruntime (CPU) against PyTorch:')
    for result in results:
        log(f'  {result}')
    report['parity'] = [asdict(r) for r in results]
    if check_image:
        try:
            on_image = image_parity(model, OnnxSegmentor(path), check_image)
        except InputError as exc:  # e.g. a static graph, another size
            raise ToolError(f'--check-image {check_image!r}: {exc}') from exc
        log('OnnxSegmentor against inference_model:')
        log(f'  {on_image}')
        report['image_parity'] = asdict(on_image)
        results.append(on_image)
    return agreement_problem(results, min_agreement)


@dataclass
class ImageParity:
    """:class:`~.onnx_segmentor.OnnxSegmentor` against ``inference_model``
    on one image: the largest logit difference, as such and relative to
    the largest PyTorch logit, and the share of pixels with the same
    label."""
    image: str
    shape: Shape
    max_abs_diff: float
    relative_diff: float
    argmax_agreement: float

    def __str__(self) -> str:
        return (f'{self.image} ({self.shape[0]}x{self.shape[1]}): max '
                f'|logit diff| {self.max_abs_diff:.3g} '
                f'({self.relative_diff:.2g} of the largest logit), argmax '
                f'agreement {100 * self.argmax_agreement:.3f}%')


def image_parity(model: nn.Module, segmentor: Any,
                 image: Union[str, Any]) -> ImageParity:
    """``segmentor`` (an :class:`~.onnx_segmentor.OnnxSegmentor` of
    ``model``'s graph) and mmseg's ``inference_model(model, image)`` on
    one image (a path, or a BGR uint8 array)."""
    import numpy as np
    from mmseg.apis import inference_model
    got = segmentor.predict(image, with_logits=True)  # checks the image
    with torch.no_grad():
        result = inference_model(model, image)
    expected = result.seg_logits.data.cpu().numpy()
    labels = result.pred_sem_seg.data[0].cpu().numpy()
    if got.logits.shape != expected.shape:
        raise RuntimeError(f'OnnxSegmentor gave logits {got.logits.shape}, '
                           f'inference_model {expected.shape}')
    diff = float(np.abs(got.logits - expected).max())
    return ImageParity(
        image=osp.basename(image) if isinstance(image, str) else 'array',
        shape=tuple(int(s) for s in labels.shape), max_abs_diff=diff,
        relative_diff=diff / max(float(np.abs(expected).max()), 1e-12),
        argmax_agreement=float((got.labels == labels).mean()))


def agreement_problem(results: Sequence[Parity],
                      min_agreement: float) -> Optional[str]:
    """What is wrong when the argmax agreement at any size is below
    ``min_agreement``, or None."""
    bad = [r for r in results if r.argmax_agreement < min_agreement]
    if not bad:
        return None
    return ('the ONNX graph disagrees with PyTorch: argmax agreement below '
            f'{100 * min_agreement:.1f}% at ' +
            ', '.join(f'{r.shape[0]}x{r.shape[1]}' for r in bad))


def _shape(shape: Sequence[int], option: str) -> Shape:
    values = tuple(int(v) for v in shape)
    if len(values) != 2 or min(values) < 1:
        raise ToolError(f'{option} takes two positive sizes H W, got '
                        f'{" ".join(str(v) for v in shape)}')
    return values
