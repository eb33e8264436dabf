"""What the installed torch can do, probed once: every version or feature
gate of the package reads its answer here, named for what it tests.
Where a feature cannot be probed without running it (what a compiler
manages), the gate compares :data:`TORCH_RELEASE` with a release. Probes
deciding whether a patch of another library applies live with the patch
(:mod:`mmseg_whitebox.compat`).
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

# The three compiler gates below were checked on torch 2.1 (False) and
# 2.13 (True); the releases between are taken as 2.1 below 2.4.
#: inductor compiles a scalar that dynamo captured
#: (``capture_scalar_outputs``)
COMPILES_CAPTURED_SCALARS: bool = TORCH_RELEASE >= (2, 4)
#: dynamo's DDP graph splitter (``optimize_ddp``) takes mmseg's ViT (torch
#: 2.1's fails on a submodule attribute)
DDP_GRAPH_SPLIT_TAKES_SUBMODULES: bool = TORCH_RELEASE >= (2, 4)
#: inductor's CPU code computes a backward pass right with one thread
#: (tests/test_compile.py)
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
