"""mmseg's sliding-window grid, in plain Python: the windows of
``slide_inference`` over an input, shared by the ONNX segmentor (which
runs on a machine without torch: this file imports nothing) and the
robustness evaluation's shared-encoder inference."""
from __future__ import annotations

from typing import List, Tuple

#: ``(height, width)``
Shape = Tuple[int, int]


def slide_windows(size: Shape, crop: Shape, stride: Shape
                  ) -> List[Tuple[int, int, int, int]]:
    """``(y1, y2, x1, x2)`` of every window of mmseg's ``slide_inference``
    over an input of ``size``, in its order: a grid of ``stride`` steps,
    the last window of a row or column moved back inside the input, a
    window never larger than the input."""
    (h, w), (h_crop, w_crop), (h_stride, w_stride) = size, crop, stride
    h_grids = max(h - h_crop + h_stride - 1, 0) // h_stride + 1
    w_grids = max(w - w_crop + w_stride - 1, 0) // w_stride + 1
    windows = []
    for h_idx in range(h_grids):
        for w_idx in range(w_grids):
            y2 = min(h_idx * h_stride + h_crop, h)
            x2 = min(w_idx * w_stride + w_crop, w)
            windows.append((max(y2 - h_crop, 0), y2, max(x2 - w_crop, 0),
                            x2))
    return windows
