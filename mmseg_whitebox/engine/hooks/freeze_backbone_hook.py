"""Keep a model's encoder exactly at its initialisation while the rest
trains: the demo's default setting, in which the decoder's attention has
to gather whatever context the task needs."""
from __future__ import annotations

from typing import Any

from mmengine.hooks import Hook
from mmengine.model import is_model_wrapper
from mmseg.registry import HOOKS

#: the parameters frozen: the segmentor's ``backbone`` (its encoder)
BACKBONE_PREFIX = 'backbone.'


@HOOKS.register_module()
class FreezeBackboneHook(Hook):
    """Turn off gradients of every ``backbone.`` parameter before training.

    A learning-rate multiplier of 0 does not freeze: mmengine's chainable
    ``PolyLR`` lifts a 0 learning rate towards its ``eta_min`` (1e-5 in
    the demo schedule). Without gradients AdamW skips the parameters, and
    the backward pass stops at the encoder, which also makes training
    cheaper. Runs after the weights are initialised (``before_train``)."""

    priority = 'VERY_HIGH'

    def before_train(self, runner: Any) -> None:
        model = runner.model.module if is_model_wrapper(runner.model) \
            else runner.model
        frozen = freeze_backbone(model)
        runner.logger.info(f'FreezeBackboneHook: {frozen} encoder '
                           'parameters frozen at their initialisation')


def freeze_backbone(model: Any) -> int:
    """Turn off the gradients of ``model``'s ``backbone.`` parameters;
    returns how many tensors (0 raises: nothing to freeze is a wrong
    model, not a frozen one)."""
    frozen = 0
    for name, param in model.named_parameters():
        if name.startswith(BACKBONE_PREFIX):
            param.requires_grad_(False)
            frozen += 1
    if not frozen:
        raise ValueError('FreezeBackboneHook: the model has no backbone '
                         'parameters')
    return frozen
