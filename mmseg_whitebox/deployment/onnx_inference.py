"""Overlays of an exported model's predictions on an image or a folder of
images: the logic of ``tools/deployment/onnx_inference.py``.

Each image is predicted by :class:`~.onnx_segmentor.OnnxSegmentor` (the
config's test pipeline, normalisation and sliding window around the
graph, as ``inference_model``) and drawn as the demo's overlay figures
are (:func:`~mmseg_whitebox.visualization.overlay.overlay_figure`:
the prediction on the image, a title naming the model and the image, a
legend of the classes present). Paths, the graph and its metadata are
checked before any image is predicted; every bad input is a
:class:`ToolError`; the output folder is locked while it is painted.
"""
from __future__ import annotations

import importlib.util
import os.path as osp
import sys
from typing import List, Optional, Sequence, Tuple

from mmseg_whitebox.utils.input_checks import check_image_file
from mmseg_whitebox.utils.tool_error import InputError, ToolError
from mmseg_whitebox.visualization.images import (check_opacity, list_images,
                                                 lock_outputs, output_paths)
from mmseg_whitebox.visualization.overlay import overlay_figure

from .onnx_segmentor import OnnxSegmentor, load_image


def load_segmentor(path: str, providers: Optional[Sequence[str]] = None,
                   threads: Optional[int] = None) -> OnnxSegmentor:
    """:class:`OnnxSegmentor` of the graph at ``path``; a missing file,
    a file onnxruntime cannot load, a graph without the deployment
    metadata and an unavailable provider are a :class:`ToolError`."""
    if importlib.util.find_spec('onnxruntime') is None:
        raise ToolError('running an ONNX model needs onnxruntime: pip '
                        'install onnxruntime (or the deploy extra, pip '
                        'install -e ".[deploy]")')
    if not osp.isfile(path):
        raise ToolError(f'ONNX model {path!r} does not exist')
    try:
        return OnnxSegmentor(path, providers=providers, threads=threads)
    except InputError:
        raise  # the graph's metadata or the providers asked for
    except Exception as exc:  # onnxruntime's own error types
        if not type(exc).__module__.startswith('onnxruntime'):
            raise
        raise ToolError(f'onnxruntime cannot load {path!r} (is it an ONNX '
                        f'model?): {str(exc).splitlines()[0]}') from exc


def onnx_inference(model: str, source: str, out_dir: str,
                   providers: Optional[Sequence[str]] = None,
                   opacity: float = 0.5, threads: Optional[int] = None,
                   progress: bool = True) -> Tuple[List[str], List[str]]:
    """Overlay figures (``out_dir/<image name>.png``) of the predictions
    of the exported ``model`` on ``source``, an image or a folder of
    images (with a progress bar). Returns ``(images, written paths)``."""
    from mmengine.utils import ProgressBar

    check_opacity(opacity)
    images = list_images(source)
    for image in images:  # headers only: a bad file costs no prediction
        check_image_file(image)
    outputs = output_paths(images, source, out_dir=out_dir)
    with lock_outputs(out_dir=out_dir):  # one run paints there at a time
        segmentor = load_segmentor(model, providers, threads)
        name = segmentor.metadata['config']
        # (the stdout of now: mmengine's default is the one at its import)
        bar = (ProgressBar(len(images), file=sys.stdout)
               if progress and len(images) > 1 else None)
        written = []
        for image_path, out in zip(images, outputs):
            try:
                labels = segmentor(image_path).labels
            except InputError as exc:  # e.g. too small for the model
                raise InputError(f'{image_path!r}: {exc}') from exc
            image_name = osp.basename(image_path)
            overlay_figure(
                load_image(image_path)[..., ::-1], labels,
                segmentor.classes, segmentor.palette, name,
                image_name=image_name, opacity=opacity, out_file=out,
                title=f'{name} (ONNX, onnxruntime)\n{image_name}')
            written.append(out)
            if bar is not None:
                bar.update()
    return images, written
