"""What the installed torch can do, probed once: every version or feature
gate of the package reads its answer here (as timm's
``timm/layers/config.py``), so a gate names what it tests.

Each name probes the feature it is named for. Where a feature cannot be
probed without running it (what a compiler manages), the gate compares
:data:`TORCH_RELEASE` with the release it names and says which releases
were checked. The probes that decide whether a patch of another library
applies live with that patch (:mod:`mmseg_whitebox.compat`).
"""
from __future__ import annotations

import functools
import inspect
import re
from typing import Callable, Optional, Tuple

import torch


def release(version: str) -> Optional[Tuple[int, int]]:
    """``(major, minor)`` of a version string (``'2.13.0+cpu'``), None
    where it starts with no numbers."""
    found = re.match(r'(\d+)\.(\d+)', version)
    return (int(found.group(1)), int(found.group(2))) if found else None


#: the installed torch's version string
TORCH_VERSION: str = torch.__version__
#: its ``(major, minor)``; a version without numbers counts as the newest
TORCH_RELEASE: Tuple[int, int] = release(TORCH_VERSION) or (10**6, 0)

#: ``torch.is_autocast_enabled(device_type)`` and
#: ``torch.get_autocast_dtype(device_type)`` (torch >= 2.4); torch 2.1-2.3
#: have one function pair for CUDA and one for the CPU
AUTOCAST_DEVICE_QUERIES: bool = hasattr(torch, 'get_autocast_dtype')

_COMPILER = getattr(torch, 'compiler', None)
#: ``torch.compiler.is_exporting`` (recent torch), else None
COMPILER_IS_EXPORTING: Optional[Callable[[], bool]] = getattr(
    _COMPILER, 'is_exporting', None)
#: ``torch.compiler.is_compiling`` (torch >= 2.3), else None (then
#: ``torch._dynamo.is_compiling``)
COMPILER_IS_COMPILING: Optional[Callable[[], bool]] = getattr(
    _COMPILER, 'is_compiling', None)

#: inductor compiles a scalar that dynamo captured
#: (``capture_scalar_outputs``): not torch 2.1 (C++ error "'i3' was not
#: declared"). Checked on 2.1 and 2.13; the releases between are taken as
#: 2.1 below 2.4 and as 2.13 from 2.4 on
COMPILES_CAPTURED_SCALARS: bool = TORCH_RELEASE >= (2, 4)
#: dynamo's DDP graph splitter (``optimize_ddp``) takes mmseg's ViT: torch
#: 2.1's takes every attribute the graph reads for a tensor and fails on
#: a submodule (``AttributeError: 'Dropout' object has no attribute
#: 'requires_grad'``). Checked on 2.1 and 2.13; the releases between are
#: taken as for :data:`COMPILES_CAPTURED_SCALARS`
DDP_GRAPH_SPLIT_TAKES_SUBMODULES: bool = TORCH_RELEASE >= (2, 4)
#: inductor's CPU code computes a backward pass right with one thread
#: (``torch.get_num_threads() == 1``): not torch 2.1 (2.1.2: the demo CBSA
#: model's gradients off by about their own size, its loss right; 2
#: threads right), right on 2.13 (tests/test_compile.py). The releases
#: between are taken as for :data:`COMPILES_CAPTURED_SCALARS`
INDUCTOR_ONE_THREAD_GRADIENTS_RIGHT: bool = TORCH_RELEASE >= (2, 4)


@functools.lru_cache(maxsize=None)
def onnx_dynamo_export() -> bool:
    """Whether ``torch.onnx.export`` takes ``dynamo=True`` (torch >= 2.5;
    asked on first use: ``torch.onnx`` is imported lazily)."""
    return 'dynamo' in inspect.signature(torch.onnx.export).parameters


@functools.lru_cache(maxsize=None)
def dynamo_recompile_limit_key() -> str:
    """The name of dynamo's limit of graphs per function:
    ``recompile_limit`` (torch >= 2.6), ``cache_size_limit`` before
    (asked on first use: ``torch._dynamo`` is imported lazily)."""
    import torch._dynamo.config as config
    return ('recompile_limit' if hasattr(config, 'recompile_limit') else
            'cache_size_limit')
