"""Overlay figures that read on their own: the prediction (and the ground
truth, when given) painted on the image by mmseg's ``SegLocalVisualizer``,
under a title naming the model and the noise it carries, beside a legend of
the classes present in the dataset's palette (``make demo``'s
``overlay_<model>.png``).
"""
from __future__ import annotations

import itertools
import math
import os.path as osp
from typing import List, Optional, Sequence, Tuple

import numpy as np

from mmseg_whitebox.utils.atomic import save_figure

#: mmseg's ignore index: such pixels get no colour, only darkened
IGNORE_INDEX = 255
#: legend rows per column before another column starts
LEGEND_ROWS = 14
#: figure width kept for each legend column (a class name and its patch)
LEGEND_COLUMN_INCHES = 1.6

#: names of the visualizers made here (mmengine keeps every instance)
_visualizer_ids = itertools.count()


def new_visualizer(classes: Sequence[str], palette: Sequence[Sequence[int]],
                   opacity: float):
    """A ``SegLocalVisualizer`` of its own (the global one may be a
    runner's) painting ``classes`` in ``palette``."""
    from mmseg.visualization import SegLocalVisualizer
    visualizer = SegLocalVisualizer(
        name=f'mmseg_whitebox_overlay_{next(_visualizer_ids)}',
        alpha=opacity)
    # (not via __init__: mmseg 1.2.2 swaps classes and palette there)
    visualizer.set_dataset_meta(list(classes), [list(c) for c in palette])
    return visualizer


def dataset_meta(model) -> Tuple[list, list]:
    """Class names and palette: the checkpoint's, else an mmseg dataset's
    with the model's number of classes (as ``init_model``), else numbered
    classes in fixed random colours."""
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


def paint_labels(visualizer, image: np.ndarray,
                 labels: np.ndarray) -> np.ndarray:
    """``image`` (RGB, HxWx3) with the HxW ``labels`` blended in; labels
    outside the classes are darkened."""
    import torch
    from mmengine.structures import PixelData
    from mmseg.structures import SegDataSample
    sample = SegDataSample(pred_sem_seg=PixelData(
        data=torch.from_numpy(np.asarray(labels, dtype=np.int64)[None])))
    visualizer.add_datasample('overlay', image, sample, draw_gt=False,
                              draw_pred=True, show=False, with_labels=False)
    return visualizer.get_image()


def classes_present(label_maps: Sequence[np.ndarray],
                    num_classes: int) -> List[int]:
    """Sorted class indices in ``[0, num_classes)`` found in any of
    ``label_maps``."""
    found = set()
    for labels in label_maps:
        found.update(int(v) for v in np.unique(labels))
    return sorted(v for v in found if 0 <= v < num_classes)


def config_name(model) -> str:
    """The model's config file name without ``.py``, else its class
    name."""
    filename = getattr(getattr(model, 'cfg', None), 'filename', None)
    if filename:
        return osp.splitext(osp.basename(filename))[0]
    return type(model).__name__


def overlay_title(model_name: str, sigma: Optional[float] = None,
                  noise_mode: str = 'absolute',
                  image_name: str = '') -> str:
    """Two lines: the model, then the image and the noise its weights
    carry (sigma 0: the clean weights)."""
    noise = ('clean weights (sigma 0)' if not sigma else
             f'noisy weights, {noise_mode} sigma {sigma:g}')
    return f'{model_name}\n' + (f'{image_name}: ' if image_name else '') + \
        noise


def _legend_label(name: str, index: int,
                  panels: Sequence[Sequence[int]],
                  panel_names: Sequence[str]) -> str:
    """A class name, with the panel it is in when not in all of them."""
    inside = [p for p, present in zip(panel_names, panels)
              if index in present]
    return name if len(inside) == len(panels) else \
        f'{name} ({", ".join(inside)} only)'


def overlay_figure(image: np.ndarray, prediction: np.ndarray,
                   classes: Sequence[str],
                   palette: Sequence[Sequence[int]], model_name: str,
                   sigma: Optional[float] = None,
                   noise_mode: str = 'absolute',
                   ground_truth: Optional[np.ndarray] = None,
                   image_name: str = '', opacity: float = 0.6,
                   out_file: Optional[str] = None,
                   title: Optional[str] = None):
    """The :class:`matplotlib.figure.Figure` of ``prediction`` (HxW class
    indices) painted on ``image`` (HxWx3 RGB), after ``ground_truth`` when
    given, titled ``title`` (default: :func:`overlay_title`, for weights
    with noise) and with a legend of the classes present; saved to
    ``out_file`` when given."""
    from matplotlib.figure import Figure
    from matplotlib.patches import Patch

    panels = [('prediction', prediction)]
    if ground_truth is not None:
        panels.insert(0, ('ground truth', ground_truth))
    visualizer = new_visualizer(classes, palette, opacity)
    present = classes_present([labels for _, labels in panels],
                              len(classes))
    columns = max(1, math.ceil(len(present) / LEGEND_ROWS))
    height, width = image.shape[:2]
    panel = 3.4  # inches: a small image drawn large, a large one fitted
    fig = Figure(figsize=(len(panels) * panel * width / height +
                          LEGEND_COLUMN_INCHES * columns + 0.2,
                          panel + 0.9),
                 layout='constrained')  # room for the legend beside
    for ax, (name, labels) in zip(fig.subplots(1, len(panels),
                                               squeeze=False)[0], panels):
        ax.imshow(paint_labels(visualizer, image, labels),
                  interpolation='nearest')
        ignored = bool((np.asarray(labels) == IGNORE_INDEX).any())
        ax.set_title(name + ('\n(darkened: ignored)' if ignored else ''),
                     fontsize=9)
        ax.set_axis_off()
    per_panel = [classes_present([labels], len(classes))
                 for _, labels in panels]
    handles = [Patch(facecolor=np.asarray(palette[c]) / 255.0,
                     edgecolor='black', linewidth=0.5,
                     label=_legend_label(classes[c], c, per_panel,
                                         [n for n, _ in panels]))
               for c in present]
    fig.legend(handles=handles, title='classes present', fontsize=8,
               title_fontsize=8, loc='outside right center',
               ncol=columns)
    if title is None:
        title = overlay_title(model_name, sigma, noise_mode, image_name)
    fig.suptitle(title, fontsize=10)
    if out_file:
        save_figure(fig, out_file, dpi=120, bbox_inches='tight')
    return fig
