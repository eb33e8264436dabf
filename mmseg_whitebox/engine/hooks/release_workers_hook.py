"""Dataloader worker processes stopped when a run ends, not when the
garbage collector finds them: in a process that runs a second Runner, the
second run's workers would hold the first run's workers' pipes, and
PyTorch would wait for each of those to exit
(docs/notes/design-measurements.md).
"""
from __future__ import annotations

from typing import Any, List

from mmengine.hooks import Hook
from mmseg.registry import HOOKS

from mmseg_whitebox.compat import stop_persistent_workers


@HOOKS.register_module()
class ReleaseDataloaderWorkersHook(Hook):
    """Stops the workers of the dataloaders the run used (noted when their
    loop starts) when it ends."""

    priority = 'VERY_LOW'  # after every other hook's after_run

    def __init__(self) -> None:
        self._loaders: List[Any] = []

    def _note(self, loader: Any) -> None:
        if not any(loader is seen for seen in self._loaders):
            self._loaders.append(loader)

    def before_train(self, runner: Any) -> None:
        self._note(runner.train_dataloader)

    def before_val(self, runner: Any) -> None:
        self._note(runner.val_dataloader)

    def before_test(self, runner: Any) -> None:
        self._note(runner.test_dataloader)

    def after_run(self, runner: Any) -> None:
        for loader in self._loaders:
            stop_persistent_workers(loader)
