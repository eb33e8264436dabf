"""Export a whole segmentor to ONNX and check the graph with onnxruntime
against PyTorch (:func:`export_and_check`, the logic of
``tools/deployment/export_onnx.py``). The graph: :mod:`.graph`; the
settings stored with it: :mod:`.metadata`.
"""
from __future__ import annotations

import os
import os.path as osp
from dataclasses import asdict, dataclass
from typing import Any, Dict, List, Optional, Sequence, Union

import torch
import torch.nn as nn

from mmseg_whitebox.engine.config import read_config
from mmseg_whitebox.utils.atomic import (atomic_path, check_not_input,
                                         write_json)
from mmseg_whitebox.utils.checkpoint_checks import (check_checkpoint,
                                                    init_model)
from mmseg_whitebox.utils.input_checks import (check_image_file,
                                               check_output_file)
from mmseg_whitebox.utils.run_lock import lock_output_file
from mmseg_whitebox.utils.tool_error import (CheckFailedError, InputError,
                                             ToolError)

from ..onnx_segmentor import OnnxSegmentor
from .graph import (INPUT_NAME, OUTPUT_NAME, SegLogits, Shape,
                    check_can_export, check_opset, check_shapes,
                    default_check_shape, export_onnx, export_problem,
                    non_standard_ops)
from .metadata import (deployment_metadata, pipeline_resizes, swaps_bgr_to_rgb)

__all__ = [
    'ImageParity', 'MIN_AGREEMENT', 'Parity', 'SegLogits', 'agreement_problem',
    'check_can_export', 'check_shapes', 'deployment_metadata',
    'export_and_check', 'export_onnx', 'export_problem', 'image_parity',
    'non_standard_ops', 'onnx_parity', 'pipeline_resizes', 'swaps_bgr_to_rgb'
]

#: the default check: at least this share of pixels with the same argmax
#: as PyTorch, at every size checked
MIN_AGREEMENT = 0.999


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
    session = ort.InferenceSession(path,
                                   options,
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
        results.append(
            Parity(shape=tuple(shape),
                   max_abs_diff=float(np.abs(got - expected).max()),
                   argmax_agreement=float(
                       (got.argmax(1) == expected.argmax(1)).mean()),
                   export_shape=tuple(shape) == tuple(export_shape or ())))
    return results


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
    :class:`~..onnx_segmentor.OnnxSegmentor` against ``inference_model`` on
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
        report = dict(config=config,
                      checkpoint=checkpoint,
                      onnx=out,
                      dynamic=dynamic,
                      opset=opset)
        failed = failed_path(out)
        # ``out`` appears only once the graph has passed every check
        with atomic_path(out) as staged:
            export_onnx(model,
                        staged,
                        shape,
                        dynamic=dynamic,
                        opset=opset,
                        metadata=metadata)
            try:
                problem = check_graph(model, staged, shapes, shape,
                                      min_agreement, check_image, report, log)
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


def check_graph(model: nn.Module,
                path: str,
                shapes: Sequence[Shape],
                export_shape: Shape,
                min_agreement: float,
                check_image: Optional[str],
                report: Dict[str, Any],
                log=print) -> Optional[str]:
    """Check the graph at ``path`` against ``model``: standard operators
    only, and an argmax agreement of at least ``min_agreement`` at every
    size in ``shapes`` (and, with ``check_image``, of
    :class:`~..onnx_segmentor.OnnxSegmentor` against ``inference_model`` on
    that image). The figures go into ``report`` and ``log``; returns what
    failed, or None."""
    custom = non_standard_ops(path)
    if custom:
        return f'the graph has non-standard operators: {custom}'
    results: List[Any] = onnx_parity(model,
                                     path,
                                     shapes,
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
    """:class:`~..onnx_segmentor.OnnxSegmentor` against ``inference_model``
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
    """``segmentor`` (an :class:`~..onnx_segmentor.OnnxSegmentor` of
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
        shape=tuple(int(s) for s in labels.shape),
        max_abs_diff=diff,
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
