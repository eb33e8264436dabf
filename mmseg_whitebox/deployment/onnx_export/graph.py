"""The ONNX graph of a whole segmentor (encoder + any decode head).

**What the graph computes.** :class:`SegLogits`: mmseg's tensor mode
(``model(x, mode='tensor')``: encoder and decode head) followed by the
bilinear resize to the input size that whole-image inference does, so its
output is the ``seg_logits`` that ``inference_model`` returns in whole mode
for an input of that size (the argmax is the prediction). Input: the
*normalised* image ``(1, 3, H, W)`` float32, i.e. after mmseg's data
preprocessor. The rest of the way from an image to ``inference_model``'s
prediction (test resize, normalisation, padding, sliding window, resize
back, argmax) is :class:`~..onnx_segmentor.OnnxSegmentor`'s, with the
settings :func:`~.metadata.deployment_metadata` stores in the graph's
metadata.

**Exporter.** torch's dynamo exporter (``torch.onnx.export(...,
dynamo=True)``), standard ONNX operators only. Decisions that
``torch.export`` takes once, at the export size, are made valid at every
size without custom operators: mmseg's position-embedding resize and
adaptive padding always run while exporting
(:mod:`mmseg_whitebox.compat.export_sizes`), and CBSA pools the token grid
with averaging matrices computed from the grid size in the graph
(:mod:`mmseg_whitebox.ops.export`).
"""
from __future__ import annotations

import importlib.util
import logging
from typing import Any, Dict, List, Optional, Sequence, Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F

from mmseg_whitebox.compat.export_sizes import export_friendly
from mmseg_whitebox.utils.atomic import atomic_path
from mmseg_whitebox.utils.capabilities import onnx_dynamo_export
from mmseg_whitebox.utils.tool_error import ToolError

from ..onnx_segmentor import OUTPUT_NAMES

Shape = Tuple[int, int]

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
