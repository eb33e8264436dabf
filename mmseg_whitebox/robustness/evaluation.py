"""Evaluating a (perturbed) model the way ``tools/test.py`` does: with
the test loop of a Runner built as it builds one
(:class:`RunnerEvaluation`), or of a hand-built model, dataloader and
evaluator (:class:`LoopEvaluation`)."""
from __future__ import annotations

from contextlib import nullcontext
from typing import Any

import torch
import torch.nn as nn

from mmseg_whitebox.utils.logs import quiet_logging
from .shared_encoder import Metrics, SharedEncoderEvaluation


class RunnerEvaluation:
    """Callable returning the test metrics of ``runner.model`` as it is now.

    Loads the runner's checkpoint once (so the selected parameters can be
    perturbed after that) and runs ``runner.test_loop`` on each call.
    """

    def __init__(self, runner: Any, quiet: bool = True) -> None:
        self.runner = runner
        self.quiet = quiet
        runner.load_or_resume()
        runner.call_hook('before_run')

    @property
    def model(self) -> nn.Module:
        return self.runner.model

    @property
    def num_images(self) -> int:
        """The test set's size (without a distributed run's padding)."""
        return len(self.runner.test_dataloader.dataset)

    def __call__(self) -> Metrics:
        with quiet_logging() if self.quiet else nullcontext():
            metrics = self.runner.test_loop.run()
        return {k: float(v) for k, v in metrics.items()}

    def shared_encoder(self, max_heads: int = 8) -> Any:
        """A :class:`~.shared_encoder.SharedEncoderEvaluation` on the
        runner's test dataloader and evaluator."""
        loop = self.runner.test_loop
        return SharedEncoderEvaluation(self.model, loop.dataloader,
                                       loop.evaluator, max_heads,
                                       fp16=getattr(loop, 'fp16', False),
                                       quiet=self.quiet)

    def close(self) -> None:
        self.runner.call_hook('after_run')


class LoopEvaluation:
    """The test loop for a model, dataloader and evaluator (mmengine
    ``Evaluator`` or its config) built by hand."""

    def __init__(self, model: nn.Module, dataloader: Any,
                 evaluator: Any) -> None:
        from mmengine.evaluator import Evaluator
        self.model = model
        self.dataloader = dataloader
        self.evaluator = (evaluator if isinstance(evaluator, Evaluator) else
                          Evaluator(evaluator))
        dataset = dataloader.dataset
        if getattr(self.evaluator, 'dataset_meta', None) is None:
            self.evaluator.dataset_meta = getattr(dataset, 'metainfo', None)

    @property
    def num_images(self) -> int:
        return len(self.dataloader.dataset)

    def __call__(self) -> Metrics:
        self.model.eval()
        with torch.no_grad():
            for batch in self.dataloader:
                outputs = self.model.test_step(batch)
                self.evaluator.process(data_samples=outputs,
                                       data_batch=batch)
        metrics = self.evaluator.evaluate(len(self.dataloader.dataset))
        return {k: float(v) for k, v in metrics.items()}

    def shared_encoder(self, max_heads: int = 8) -> Any:
        """As :meth:`RunnerEvaluation.shared_encoder`, on this loop's
        model, dataloader and evaluator."""
        return SharedEncoderEvaluation(self.model, self.dataloader,
                                       self.evaluator, max_heads,
                                       quiet=False)
