"""A test's metrics file written by one process.

mmengine's ``LoggerHook.after_test_epoch`` dumps the test metrics to
``<log_dir>/<timestamp>.json`` on every rank (mmengine 0.10.7 and
onedl-mmengine 0.10.12), and all ranks share that path: two processes
then write the same file at once, each from offset 0, and a shorter
record leaves the tail of a longer one behind (a CI run of
``tools/dist_test.sh`` read ``{... "time": 0.0399}}``). Every rank holds
the same gathered metrics, so the main process alone writes them.
"""
from __future__ import annotations

from typing import Any, Dict, Optional

from mmengine.dist import is_main_process
from mmengine.hooks import LoggerHook
from mmseg.registry import HOOKS


@HOOKS.register_module()
class MainProcessLoggerHook(LoggerHook):
    """mmengine's ``LoggerHook`` (same arguments) whose test metrics file
    is written by the main process only; the other ranks still log the
    line."""

    def after_test_epoch(self, runner: Any,
                         metrics: Optional[Dict[str, float]] = None) -> None:
        if is_main_process():
            super().after_test_epoch(runner, metrics)
            return
        _, line = runner.log_processor.get_log_after_epoch(
            runner, len(runner.test_dataloader), 'test',
            with_non_scalar=True)
        runner.logger.info(line)
