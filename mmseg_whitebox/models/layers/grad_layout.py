"""Gradients laid out as their parameters, for DistributedDataParallel.

DDP copies each gradient into a bucket view laid out as the parameter and
warns ("Grad strides do not match bucket view strides") when the strides
differ, which then costs a strided copy every step. Autograd's layout
contract ignores the strides of size-1 dimensions, so a parameter with
one can end up holding a gradient in another layout: a CLS token or class
embeddings ``(1, n, d)`` expanded to the batch and concatenated with the
``N`` other tokens (mmseg's ``VisionTransformer`` and
``SegmenterMaskTransformerHead``,
:class:`~mmseg_whitebox.models.backbones.WhiteBoxViT`) receive, at one
image per process (the ``8xb1`` configs), a slice of the concatenated
tokens' gradient: strides ``((N + n) * d, d, 1)`` instead of
``(n * d, d, 1)``. That slice also keeps the whole ``(1, N + n, d)``
gradient alive until the next ``zero_grad``.

:func:`keep_grad_layout` hooks such parameters so that their gradient
arrives in their own layout: the same values, copied (``n * d`` numbers)
only when the layout differs.
"""
from __future__ import annotations

import weakref
from typing import Iterable, Union

import torch
import torch.nn as nn

#: the parameters already hooked, by ``id`` (held weakly; a parameter
#: copied by ``deepcopy`` is a new tensor without the hook, not in here).
#: Not a WeakSet: its lookups compare tensors with ``==``, elementwise
_HOOKED: 'weakref.WeakValueDictionary[int, torch.Tensor]' = \
    weakref.WeakValueDictionary()


class _ParamLayout:
    """A gradient hook: the gradient in its parameter's strides. Holds the
    parameter weakly (a strong reference would be a cycle through the
    parameter's own hooks)."""

    #: pickling a model (``torch.save(model)``) leaves the hook out
    #: without torch's warning: the hook changes no value, and
    #: :func:`keep_grad_layout` puts it back on a rebuilt model
    __torch_unserializable__ = True

    def __init__(self, param: torch.Tensor) -> None:
        self.param = weakref.ref(param)

    def __call__(self, grad: torch.Tensor) -> torch.Tensor:
        param = self.param()
        if (param is None or grad.layout != torch.strided
                or grad.stride() == param.stride()
                or grad.shape != param.shape):
            return grad
        out = torch.empty_strided(param.shape, param.stride(),
                                  dtype=grad.dtype, device=grad.device)
        return out.copy_(grad)


def keep_grad_layout(
        params: Union[nn.Module, Iterable[torch.Tensor]]) -> int:
    """Hook every trainable parameter of ``params`` (a module, or
    parameters) that has a size-1 dimension, so that its gradient comes
    in the parameter's own strides (module docstring). Other parameters
    need none: autograd already lays their gradients out as them.
    Parameters hooked before are skipped; returns how many were hooked
    now."""
    if isinstance(params, nn.Module):
        params = params.parameters()
    hooked = 0
    for param in params:
        if not param.requires_grad or 1 not in param.shape or \
                _HOOKED.get(id(param)) is param:
            continue
        param.register_hook(_ParamLayout(param))
        _HOOKED[id(param)] = param
        hooked += 1
    return hooked
