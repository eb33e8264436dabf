"""Keep a model's encoder exactly at its initialisation while the rest
trains: the demo's default setting, in which the decoder's attention has
to gather whatever context the task needs."""
from __future__ import annotations

from typing import Any, List

from mmengine.hooks import Hook
from mmengine.model import is_model_wrapper
from mmseg.registry import HOOKS

from mmseg_whitebox.utils.distributed import unwrap_model
from mmseg_whitebox.utils.tool_error import InputError

#: the parameters frozen: the segmentor's ``backbone`` (its encoder)
BACKBONE_PREFIX = 'backbone.'
#: the config setting that freezes the encoder when it is built (mmseg's
#: ``VisionTransformer`` and ``WhiteBoxViT``)
BUILD_TIME_FREEZE = 'model.backbone.frozen_exclude=[]'


@HOOKS.register_module()
class FreezeBackboneHook(Hook):
    """Turn off gradients of every ``backbone.`` parameter before training
    (after the weights are initialised).

    A learning-rate multiplier of 0 does not freeze: mmengine's chainable
    ``PolyLR`` lifts it towards ``eta_min``. Without gradients AdamW skips
    the parameters and the backward pass stops at the encoder.

    One process only: DDP wraps the model before any hook runs and would
    keep reducing the encoder's gradients. A distributed run freezes it at
    build (:data:`BUILD_TIME_FREEZE`); the hook refuses a wrapped model
    whose encoder still trains.
    """

    priority = 'VERY_HIGH'

    def before_run(self, runner: Any) -> None:
        if not is_model_wrapper(runner.model):
            return
        trainable = trainable_backbone_parameters(runner.model.module)
        if trainable:
            raise InputError(
                'FreezeBackboneHook cannot freeze the encoder of a '
                f'distributed run: {type(runner.model).__name__} wrapped the '
                'model when it was built, with the encoder\'s '
                f'{len(trainable)} trainable parameters registered for '
                'gradient reduction; '
                'freeze it at build instead: --cfg-options '
                f'{BUILD_TIME_FREEZE} (mmseg\'s ViT and WhiteBoxViT; another '
                'backbone: its own freezing setting)')

    def before_train(self, runner: Any) -> None:
        frozen = freeze_backbone(unwrap_model(runner.model))
        runner.logger.info(f'FreezeBackboneHook: {frozen} encoder '
                           'parameters frozen at their initialisation')


def trainable_backbone_parameters(model: Any) -> List[str]:
    """``model``'s ``backbone.`` parameters that require gradients."""
    return [name for name, param in model.named_parameters()
            if name.startswith(BACKBONE_PREFIX) and param.requires_grad]


def freeze_backbone(model: Any) -> int:
    """Turn off the gradients of ``model``'s ``backbone.`` parameters;
    returns how many (none raises: a wrong model)."""
    frozen = 0
    for name, param in model.named_parameters():
        if name.startswith(BACKBONE_PREFIX):
            param.requires_grad_(False)
            frozen += 1
    if not frozen:
        raise ValueError('FreezeBackboneHook: the model has no backbone '
                         'parameters')
    return frozen
