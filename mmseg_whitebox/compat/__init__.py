"""Compatibility layer for the OpenMMLab 1.x stack on recent (CPU) PyTorch:
the one home of every patch of another library.

mmsegmentation 1.2.2, mmengine 0.10.7 and mmcv < 2.2 predate torch 2.13;
the maintained fork (onedl-mmsegmentation 1.4, onedl-mmengine 0.10.8+,
onedl-mmcv 2.3) needs a different subset of the fixes.
:func:`apply` is called once when :mod:`mmseg_whitebox` is imported, before
anything imports mmseg, and applies only the fixes a given environment
needs, in this order (each module's docstring says what it patches, why,
and on which versions):

``torchvision``, ``mmcv.ops`` (:mod:`.import_shims`)
    Declare the torchvision ops a CUDA-built torchvision wheel cannot load
    under a CPU torch, and stand in for mmcv-lite's missing compiled
    ``mmcv.ops`` (mmsegmentation only), so timm and ``mmseg.models``
    import.
``checkpoint loading``, ``weights-only fallback`` (:mod:`.checkpoints`)
    One weights-only loader, :func:`load_from_weights_only`, for every
    scheme of mmengine's ``CheckpointLoader``; onedl-mmengine's retry with
    ``weights_only=False`` removed. A file that needs full unpickling is
    refused (:class:`UnsafeCheckpointError`) with how to convert it.
``package configs`` (:mod:`.package_configs`)
    ``_base_ = ['mmseg::<method>/<name>.py']`` resolves through the
    installed ``mmseg`` module (mmengine 0.10.7 needs ``pkg_resources``,
    gone from setuptools 81+; onedl-mmengine looks for the distribution
    ``mmsegmentation``).
``resume skips without loading`` (:mod:`.resume`)
    A resumed run advances the sampler past the trained batches instead of
    loading them (mmengine 0.10.7 loads them all again), creates its data
    iterator without drawing from torch's restored generator
    (onedl-mmengine does) and starts its data workers from their saved
    random states, so it stays bitwise equal to the uninterrupted run.

``STATUS`` maps each fix to whether it is in effect and, once
:func:`apply` ran, ``'stack'`` to the OpenMMLab distributions found
(:func:`stack`, :mod:`.distributions`: ``default`` = mmsegmentation 1.2.2
/ mmengine / mmcv-lite, ``onedl`` = the onedl-* fork).

A script that imports torchvision, timm or ``mmseg.apis`` before this
package meets the failures above: import ``mmseg_whitebox`` first (the
configs' ``custom_imports`` do so for every tool).
"""
from __future__ import annotations

from typing import Any, Dict

from .checkpoints import (WEIGHTS_ONLY_CONVERTER, WEIGHTS_ONLY_SCHEMES,
                          UnsafeCheckpointError, load_from_local_weights_only,
                          load_from_weights_only, patch_checkpoint_loader,
                          patch_safe_torch_load, safe_torch_load_weights_only,
                          torch_load_weights_only)
from .distributions import STACKS, stack
from .import_shims import (COMPILED_MMCV_CLASSES, COMPILED_MMCV_FUNCTIONS,
                           COMPILED_MMCV_OPS, COMPILED_MMCV_TEST_CLASSES,
                           MSDA_WARNING, is_standin, mmcv_ops_standin_needed,
                           mmcv_without_compiled_ops, patch_mmcv_ops,
                           patch_torchvision, torchvision_needs_shim)
from .package_configs import patch_package_configs
from .resume import ResumableDataIterator, patch_resume_skip

__all__ = [
    'COMPILED_MMCV_CLASSES', 'COMPILED_MMCV_FUNCTIONS', 'COMPILED_MMCV_OPS',
    'COMPILED_MMCV_TEST_CLASSES', 'MSDA_WARNING', 'ResumableDataIterator',
    'STACKS', 'STATUS',
    'UnsafeCheckpointError', 'WEIGHTS_ONLY_CONVERTER', 'WEIGHTS_ONLY_SCHEMES',
    'apply', 'is_standin', 'load_from_local_weights_only',
    'load_from_weights_only', 'mmcv_ops_standin_needed',
    'mmcv_without_compiled_ops',
    'patch_checkpoint_loader', 'patch_mmcv_ops', 'patch_package_configs',
    'patch_resume_skip',
    'patch_safe_torch_load', 'patch_torchvision',
    'safe_torch_load_weights_only', 'stack', 'torch_load_weights_only',
    'torchvision_needs_shim'
]

STATUS: Dict[str, Any] = {}


def apply() -> Dict[str, Any]:
    """Apply every fix this environment needs; safe to call repeatedly.

    Returns a dict ``{fix name: applied?, 'stack': stack()}`` (also kept in
    :data:`STATUS`).
    """
    STATUS.update(
        torchvision_shim=patch_torchvision(),
        mmcv_ops_shim=patch_mmcv_ops(),
        weights_only_loader=patch_checkpoint_loader(),
        no_unsafe_load_fallback=patch_safe_torch_load(),
        package_configs=patch_package_configs(),
        resume_skips_without_loading=patch_resume_skip())
    if 'stack' not in STATUS:
        STATUS['stack'] = stack()
    return dict(STATUS)
