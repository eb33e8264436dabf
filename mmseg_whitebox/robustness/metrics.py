"""What every evaluation of the robustness tools shares: the metrics it
returns and quiet logging while it runs (used by both the per-setting and the
shared-encoder evaluations)."""
from __future__ import annotations

import logging
from contextlib import contextmanager
from typing import Callable, Dict, Iterator


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
