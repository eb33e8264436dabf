"""Overlay predictions on images, one file or a whole folder: the logic
of ``tools/image_demo.py``, on mmseg's ``init_model``, ``inference_model``
and ``SegLocalVisualizer``. Every path is checked before a model is
built, so a typo costs no time.
"""
from __future__ import annotations

import os.path as osp
from typing import List, Optional, Sequence, Tuple

from mmseg_whitebox.engine.config import read_config
from mmseg_whitebox.utils.atomic import atomic_path
from mmseg_whitebox.utils.checkpoint_checks import (check_checkpoint,
                                                    init_model)
from mmseg_whitebox.utils.device import auto_device
from mmseg_whitebox.utils.input_checks import check_device, check_image_file
from mmseg_whitebox.visualization.images import (check_opacity, list_images,
                                                 lock_outputs, output_paths)
from mmseg_whitebox.visualization.overlay import (dataset_meta,
                                                  new_visualizer)
from mmseg_whitebox.utils.tool_error import ToolError


def overlay_images(model, images: Sequence[str], outputs: Sequence[str],
                   opacity: float = 0.5, title: str = '',
                   with_labels: bool = False,
                   progress: bool = True) -> List[str]:
    """Predict each image with ``inference_model`` and save its overlay to
    the matching output path; returns the written paths."""
    import mmcv
    from mmengine.utils import ProgressBar
    from mmseg.apis import inference_model

    visualizer = new_visualizer(*dataset_meta(model), opacity)
    bar = ProgressBar(len(images)) if progress and len(images) > 1 else None
    written = []
    for image_path, out in zip(images, outputs):
        result = inference_model(model, image_path)
        image = mmcv.imread(image_path, channel_order='rgb')
        with atomic_path(out) as tmp:  # complete, or the old file kept
            visualizer.add_datasample(
                title or osp.basename(image_path), image, data_sample=result,
                draw_gt=False, draw_pred=True, show=False,
                with_labels=with_labels, out_file=tmp)
        written.append(out)
        if bar is not None:
            bar.update()
    return written


def image_demo(source: str, config: str, checkpoint: str,
               out_file: Optional[str] = None, out_dir: Optional[str] = None,
               device: Optional[str] = None, opacity: float = 0.5,
               title: str = '', with_labels: bool = False,
               cfg_options: Optional[dict] = None,
               progress: bool = True) -> Tuple[List[str], List[str]]:
    """Overlays of one image or a folder of images (``out_file`` or
    ``out_dir``), from a checkpoint that must fit the config; returns
    ``(images, written overlay paths)``."""
    check_opacity(opacity)
    check_device(device)
    images = list_images(source)
    for image in images:  # headers only: a bad file costs no model build
        check_image_file(image)
    outputs = output_paths(images, source, out_file, out_dir)
    if not checkpoint:
        raise ToolError('a checkpoint is needed: the overlays of a randomly '
                        'initialised model mean nothing')
    check_checkpoint(checkpoint)
    cfg = read_config(config, cfg_options)
    with lock_outputs(out_file, out_dir):  # one run paints there at a time
        model = init_model(cfg, checkpoint, device=auto_device(device))
        written = overlay_images(model, images, outputs, opacity=opacity,
                                 title=title, with_labels=with_labels,
                                 progress=progress)
    return images, written
