"""A test's metrics file written by one process.

mmengine's ``LoggerHook.after_test_epoch`` dumps the test metrics to the
same ``<log_dir>/<timestamp>.json`` on every rank, so concurrent writes
can leave a shorter record with a longer one's tail. Every rank holds the
same gathered metrics: the main process alone writes them.
"""
from __future__ import annotations

from typing import Any, Dict, Optional

from mmengine.dist import is_main_process
from mmengine.hooks import LoggerHook
from mmseg.registry import HOOKS


@HOOKS.register_module()
class MainProcessLoggerHook(LoggerHook):
    """mmengine's ``LoggerHook`` (same arguments) whose test metrics file
    only the main process writes; the other ranks still log the line."""

    def after_test_epoch(self, runner: Any,
                         metrics: Optional[Dict[str, float]] = None) -> None:
        if is_main_process():
            super().after_test_epoch(runner, metrics)
            return
        _, line = runner.log_processor.get_log_after_epoch(
            runner, len(runner.test_dataloader), 'test',
            with_non_scalar=True)
        runner.logger.info(line)
