"""Overlay predictions on images, one file or a whole folder.

The logic of ``tools/image_demo.py``: the model is built and loaded with
mmseg's ``init_model`` (the checkpoint loads weights-only, through the
loader :mod:`mmseg_whitebox.compat` installs, and one that does not fit
the config is refused, :mod:`mmseg_whitebox.utils.checkpoint_checks`),
each image goes through ``inference_model`` at its own size (the config's
test pipeline and sliding window, the prediction resized back to the
image), and mmseg's ``SegLocalVisualizer`` paints the overlay. Every input
and output path is checked before a model is built, so a typo costs no
time.
"""
from __future__ import annotations

import os
import os.path as osp
from typing import List, Optional, Sequence, Tuple

from mmseg_whitebox.apis.model_index import read_config
from mmseg_whitebox.utils.atomic import atomic_path, check_not_input
from mmseg_whitebox.utils.checkpoint_checks import (check_checkpoint,
                                                    init_model)
from mmseg_whitebox.utils.input_checks import (check_device,
                                               check_image_file,
                                               check_output_file,
                                               check_writable_folder)
from mmseg_whitebox.utils.tool_error import ToolError

from .overlay import new_visualizer

#: file endings read as images in a folder (as mmcv reads them)
IMAGE_EXTENSIONS = ('.jpg', '.jpeg', '.png', '.bmp', '.tif', '.tiff',
                    '.webp')


def list_images(path: str) -> List[str]:
    """``[path]`` for an image file; a folder's images (sorted, not
    recursive). A missing path or an image-less folder is a
    :class:`ToolError`."""
    if osp.isfile(path):
        return [path]
    if not osp.isdir(path):
        raise ToolError(f'image or folder {path!r} does not exist')
    images = sorted(
        osp.join(path, name) for name in os.listdir(path)
        if name.lower().endswith(IMAGE_EXTENSIONS)
        and osp.isfile(osp.join(path, name)))
    if not images:
        raise ToolError(f'folder {path!r} has no images '
                        f'({", ".join(IMAGE_EXTENSIONS)})')
    return images


def output_paths(images: Sequence[str], source: str,
                 out_file: Optional[str] = None,
                 out_dir: Optional[str] = None) -> List[str]:
    """Where each image's overlay goes: ``out_file`` for a single image,
    else ``out_dir/<image name>.png`` (the extension kept in the name when
    two images share a stem)."""
    if out_file and out_dir:
        raise ToolError('give either --out-file or --out-dir, not both')
    if osp.isdir(source) and out_file:
        raise ToolError(f'{source!r} is a folder: write its overlays with '
                        '--out-dir DIR instead of --out-file')
    if out_file:
        if osp.isdir(out_file):
            raise ToolError(f'--out-file {out_file!r} is a folder; give a '
                            'file name (or use --out-dir)')
        check_not_input(out_file, images, '--out-file')
        check_output_file(out_file, '--out-file', image=True)
        return [out_file]
    if not out_dir:
        raise ToolError('give --out-file FILE (one image) or --out-dir DIR '
                        'for the overlays')
    if osp.exists(out_dir) and not osp.isdir(out_dir):
        raise ToolError(f'--out-dir {out_dir!r} is a file, not a folder')
    check_writable_folder(out_dir, '--out-dir')
    stems = [osp.splitext(osp.basename(p))[0] for p in images]
    names = [osp.basename(p).replace('.', '_') if stems.count(s) > 1 else s
             for p, s in zip(images, stems)]
    outputs = [osp.join(out_dir, f'{name}.png') for name in names]
    for out in outputs:
        check_not_input(out, images, '--out-dir')
    return outputs


def check_opacity(opacity: float) -> float:
    if not 0 < opacity <= 1:
        raise ToolError(f'--opacity must be in (0, 1], got {opacity}')
    return opacity


def default_device() -> str:
    """``cuda:0`` when torch sees a GPU, else ``cpu``."""
    import torch
    return 'cuda:0' if torch.cuda.is_available() else 'cpu'


def dataset_meta(model) -> Tuple[list, list]:
    """Class names and palette to paint with: the checkpoint's, else
    those of an mmseg dataset with the model's number of classes (as
    mmseg's ``init_model``), else numbered classes in fixed random colours,
    so that every predicted label has a colour."""
    import numpy as np
    from mmseg.utils import dataset_aliases, get_classes, get_palette

    meta = getattr(model, 'dataset_meta', None) or {}
    classes, palette = meta.get('classes'), meta.get('palette')
    num_classes = getattr(getattr(model, 'decode_head', None),
                          'num_classes', None) or len(classes or [])
    if classes and palette and len(classes) == len(palette):
        return list(classes), [list(c) for c in palette]
    if not classes:
        for name in dataset_aliases:
            if len(get_classes(name)) == num_classes:
                return list(get_classes(name)), get_palette(name)
        classes = [f'class {i}' for i in range(num_classes)]
    rng = np.random.default_rng(0)
    return list(classes), rng.integers(0, 256, (len(classes), 3)).tolist()


def overlay_images(model, images: Sequence[str], outputs: Sequence[str],
                   opacity: float = 0.5, title: str = '',
                   with_labels: bool = False,
                   progress: bool = True) -> List[str]:
    """Predict each image with ``inference_model`` and save the overlay
    painted by mmseg's ``SegLocalVisualizer`` to the matching output path.
    Returns the written paths."""
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
    """Overlays of one image or a folder of images: checks every path,
    loads the model with mmseg's ``init_model`` and paints each
    prediction. Returns ``(images, written overlay paths)``."""
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
    # mmseg's init_model, refusing a checkpoint that does not fit
    model = init_model(cfg, checkpoint, device=device or default_device())
    written = overlay_images(model, images, outputs, opacity=opacity,
                             title=title, with_labels=with_labels,
                             progress=progress)
    return images, written
