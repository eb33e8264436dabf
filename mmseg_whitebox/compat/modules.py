"""The module-view fix of :mod:`mmseg_whitebox.compat`, used by the
shared-encoder noise sweep (torch 2.1 and 2.13 checked).

*What it patches.* The private ``_modules`` dict of a shallow copy of a
``torch.nn.Module`` (never of the module copied).

*Why.* ``copy.copy`` of a module shares its ``_modules`` dict with the
original, and torch offers no public way to give the copy children of
its own: setting a child on the copy sets it on the original too.

*What it does.* :func:`module_view`.
"""
from __future__ import annotations

import copy

import torch.nn as nn


def module_view(module: nn.Module, **children: nn.Module) -> nn.Module:
    """A shallow copy of ``module`` whose named children are ``children``
    (the others shared); ``module`` is not touched."""
    view = copy.copy(module)
    view._modules = dict(module._modules, **children)
    return view
