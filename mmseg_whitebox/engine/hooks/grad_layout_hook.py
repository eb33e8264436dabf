"""Every parameter's gradient in the parameter's own layout, in every run.

The white-box modules hook their own parameters when built
(:func:`~mmseg_whitebox.models.layers.keep_grad_layout`); mmseg's
(``VisionTransformer``, ``SegmenterMaskTransformerHead``) do not, and
under DDP at one image per process their CLS token and class embeddings
would get strided gradients (DDP's "Grad strides do not match bucket view
strides" warning, a copy every step). This hook, in every config's
``custom_hooks``, applies the same to the whole model.
"""
from __future__ import annotations

from typing import Any

from mmengine.hooks import Hook
from mmseg.registry import HOOKS

from mmseg_whitebox.models.layers import keep_grad_layout


@HOOKS.register_module()
class GradLayoutHook(Hook):
    """Before training, hook every trainable parameter with a size-1
    dimension so that its gradient arrives in its own strides."""

    priority = 'VERY_LOW'  # after any hook that changes what trains

    def before_train(self, runner: Any) -> None:
        keep_grad_layout(runner.model)
