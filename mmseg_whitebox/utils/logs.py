"""mmengine's log output turned down while a step runs whose INFO lines
say nothing to the user (evaluations repeated many times, benchmarks)."""
from __future__ import annotations

import logging
from contextlib import contextmanager
from typing import Iterator


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
