"""NaN/Inf in what a model predicts, counted where it is evaluated: a
non-finite logit makes its pixel's argmax, and so the metrics, meaningless."""
from __future__ import annotations

from contextlib import contextmanager
from typing import Any, Iterator, List, Optional, Sequence, Tuple

import torch
import torch.nn as nn
from mmengine.hooks import Hook
from mmengine.logging import print_log
from mmseg.registry import HOOKS

from mmseg_whitebox.utils.distributed import unwrap_model
from mmseg_whitebox.utils.per_image import gather_images

#: how many image names a warning lists
SHOWN = 3


def count_nonfinite(data: torch.Tensor) -> int:
    """Non-finite values in ``data`` (counted only when its sum, one cheap
    reduction, is not finite)."""
    if not data.is_floating_point():
        return 0
    if bool(torch.isfinite(data.sum())):
        return 0
    return int((~torch.isfinite(data)).sum())


@HOOKS.register_module()
class NonFiniteCounter(Hook):
    """Counts non-finite predicted logits (per value and per image) and
    non-finite input images.

    As a Runner hook it counts every test and val iteration and warns after
    each evaluation (:meth:`summary` keeps the line for a tool's final
    report); ``with counter.watching(model):`` counts the predictions of
    the model's forward calls in the block instead, whatever runs them
    (:attr:`fraction` is then the sweep's ``nonfinite_fraction``)."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.images = 0
        self.nonfinite = 0
        self.total = 0
        self.bad_inputs: List[str] = []
        self.bad_predictions: List[str] = []
        #: (non-finite, all) logits of each image, in the order counted
        self.per_image: List[Tuple[int, int]] = []

    @property
    def fraction(self) -> float:
        """The fraction of the counted logits that are NaN/Inf."""
        return self.nonfinite / self.total if self.total else 0.0

    def fraction_over_ranks(self, num_images: Optional[int] = None) -> float:
        """:attr:`fraction` over every process of a distributed run, the
        sampler's padding beyond ``num_images`` dropped
        (:func:`~mmseg_whitebox.utils.per_image.gather_images`). A
        collective."""
        counts = gather_images(self.per_image, num_images)
        total = sum(values for _, values in counts)
        return sum(bad for bad, _ in counts) / total if total else 0.0

    def count(self, outputs: Any, inputs: Sequence[Any] = ()) -> None:
        """Count the ``seg_logits`` of the data samples ``outputs`` and the
        matching ``inputs`` (one tensor per image, if given)."""
        if not isinstance(outputs, (list, tuple)):
            return
        for i, sample in enumerate(outputs):
            self.images += 1
            name = sample.metainfo.get('img_path', f'image {self.images}')
            logits = getattr(sample, 'seg_logits', None)
            bad = values = 0
            if logits is not None:
                bad, values = count_nonfinite(logits.data), logits.data.numel()
                self.nonfinite += bad
                self.total += values
                if bad:
                    self.bad_predictions.append(name)
            self.per_image.append((bad, values))
            if i < len(inputs) and isinstance(inputs[i], torch.Tensor) \
                    and count_nonfinite(inputs[i]):
                self.bad_inputs.append(name)

    @contextmanager
    def watching(self, model: nn.Module) -> Iterator['NonFiniteCounter']:
        """Count (from zero) what ``model`` (or the module a wrapper holds)
        predicts in the block."""
        self.reset()
        handle = unwrap_model(model).register_forward_hook(
            lambda module, args, output: self.count(output))
        try:
            yield self
        finally:
            handle.remove()

    def summary(self) -> Optional[str]:
        """One warning line, or None when everything was finite."""
        parts = []
        for what, names in (('inputs', self.bad_inputs),
                            ('predictions', self.bad_predictions)):
            if names:
                shown = ', '.join(names[:SHOWN]) + (
                    ' ...' if len(names) > SHOWN else '')
                parts.append(f'{len(names)} of {self.images} images have '
                             f'non-finite (NaN/Inf) {what} ({shown})')
        if not parts:
            return None
        return ('; '.join(parts) + ': their predictions are meaningless and '
                'so are the metrics. Check the input files and the '
                'checkpoint (non-finite weights, a diverged training)')

    def before_test_epoch(self, runner: Any) -> None:
        self.reset()

    def after_test_iter(self, runner: Any, batch_idx: int,
                        data_batch: Any = None, outputs: Any = None) -> None:
        inputs = data_batch.get('inputs', []) if isinstance(
            data_batch, dict) else []
        self.count(outputs, inputs)

    def after_test_epoch(self, runner: Any, metrics: Any = None) -> None:
        text = self.summary()
        if text:
            print_log('WARNING: ' + text, logger='current', level=30)

    before_val_epoch = before_test_epoch
    after_val_iter = after_test_iter
    after_val_epoch = after_test_epoch
