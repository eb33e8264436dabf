"""What every evaluation of the robustness tools shares: the metrics it
returns, the count of non-finite logits among the predictions, and quiet
logging while it runs (used by both the per-setting and the
shared-encoder evaluations)."""
from __future__ import annotations

import logging
from contextlib import contextmanager
from typing import Any, Callable, Dict, Iterator

import torch
import torch.nn as nn

Metrics = Dict[str, float]
Evaluate = Callable[[], Metrics]


@contextmanager
def quiet_logging(level: int = logging.WARNING) -> Iterator[None]:
    """Silence mmengine's INFO output (e.g. the per-class IoU table that
    every evaluation prints) for the duration of the block."""
    from mmengine.logging import MMLogger
    logger = MMLogger.get_current_instance()
    old = logger.level
    handlers = [(h, h.level) for h in logger.handlers]
    logger.setLevel(level)
    for h, _ in handlers:
        h.setLevel(max(h.level, level))
    try:
        yield
    finally:
        logger.setLevel(old)
        for h, lvl in handlers:
            h.setLevel(lvl)


def count_nonfinite(data: torch.Tensor) -> int:
    """Non-finite values in ``data``. A finite sum means none (a NaN or
    Inf anywhere makes the sum non-finite), which one cheap reduction
    shows for the usual, all-finite logits; only otherwise are they
    counted one by one."""
    if data.is_floating_point() and bool(torch.isfinite(data.sum())):
        return 0
    return int((~torch.isfinite(data)).sum())


class NonFiniteCounter:
    """Counts non-finite values in the segmentation logits a model
    predicts (a forward hook on the segmentor), so that predictions that
    turned NaN/Inf under noise are recorded as such."""

    def __init__(self, model: nn.Module) -> None:
        self.model = getattr(model, 'module', model)
        self.nonfinite = 0
        self.total = 0
        self._handle = None

    def _hook(self, module: nn.Module, args: Any, output: Any) -> None:
        if not isinstance(output, (list, tuple)):
            return
        for sample in output:
            logits = getattr(sample, 'seg_logits', None)
            if logits is None:
                continue
            data = logits.data
            self.nonfinite += count_nonfinite(data)
            self.total += data.numel()

    def __enter__(self) -> 'NonFiniteCounter':
        self.nonfinite = self.total = 0
        self._handle = self.model.register_forward_hook(self._hook)
        return self

    def __exit__(self, *exc) -> bool:
        self._handle.remove()
        return False

    @property
    def fraction(self) -> float:
        return self.nonfinite / self.total if self.total else 0.0
