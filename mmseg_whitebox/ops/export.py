"""Export-friendly forms of what the operators compute, used only while
``torch.export`` or an ONNX exporter records the model, and whether
``torch.compile`` traces; the default path stays the paper's.
"""
from __future__ import annotations

from typing import Tuple

import torch

from mmseg_whitebox.utils.capabilities import (COMPILER_IS_COMPILING,
                                               COMPILER_IS_EXPORTING)


def exporting() -> bool:
    """Whether ``torch.export`` or an ONNX exporter records this call (not
    plain tracing: mmengine's FLOP count traces the default path)."""
    return bool((COMPILER_IS_EXPORTING is not None and COMPILER_IS_EXPORTING())
                or torch.onnx.is_in_onnx_export())


def compiling() -> bool:
    """Whether ``torch.compile`` (dynamo) traces this call: then the
    eager path's hand-made memory savings give way to plain operations."""
    if COMPILER_IS_COMPILING is not None:
        return bool(COMPILER_IS_COMPILING())
    return bool(torch._dynamo.is_compiling())  # torch < 2.3


def pooling_weights(size: int, out: int, like: torch.Tensor) -> torch.Tensor:
    """``(out, size)``: ``adaptive_avg_pool2d`` along one axis as a
    matrix."""
    cell = torch.arange(out, device=like.device)
    start = torch.div(cell * size, out, rounding_mode='floor')
    end = torch.div((cell + 1) * size + out - 1, out, rounding_mode='floor')
    pos = torch.arange(size, device=like.device)
    inside = ((pos >= start[:, None]) & (pos < end[:, None])).to(like.dtype)
    return inside / inside.sum(-1, keepdim=True)


def adaptive_avg_pool2d(grid: torch.Tensor,
                        out: Tuple[int, int]) -> torch.Tensor:
    """``adaptive_avg_pool2d(grid, out)`` as ``P_h grid P_w^T``, cells
    computed in the graph: exporters refuse a non-dividing grid
    (TorchScript) or bake the export size's cells in (dynamo)."""
    h, w = grid.shape[-2:]
    rows = pooling_weights(h, out[0], grid)
    cols = pooling_weights(w, out[1], grid)
    return torch.matmul(torch.matmul(rows, grid), cols.t())
