"""Gradients laid out as their parameters, for DistributedDataParallel.

DDP warns ("Grad strides do not match bucket view strides") and copies
every step when a gradient's strides differ from its parameter's. Autograd
ignores the strides of size-1 dimensions, so a CLS token or class
embeddings ``(1, n, d)`` expanded to the batch and concatenated with ``N``
tokens receive, at one image per process, a slice of the tokens' gradient
(strides ``((N + n) * d, d, 1)``), which also keeps that whole gradient
alive. :func:`keep_grad_layout` hooks such parameters so that their
gradient arrives in their own layout (copied only when it differs).
"""
from __future__ import annotations

import weakref
from typing import Iterable, Union

import torch
import torch.nn as nn

#: the parameters already hooked, by ``id``, held weakly (a WeakSet would
#: compare tensors with ``==``, elementwise)
_HOOKED: 'weakref.WeakValueDictionary[int, torch.Tensor]' = \
    weakref.WeakValueDictionary()


class _ParamLayout:
    """A gradient hook: the gradient in its parameter's strides (the
    parameter held weakly: no cycle through its own hooks)."""

    #: ``torch.save(model)`` leaves the hook out, without torch's warning
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
    parameters) with a size-1 dimension, once; returns how many were
    hooked now."""
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
