"""The one home of every patch of another library, for the OpenMMLab 1.x
stacks on recent PyTorch (mmsegmentation 1.2.2 / mmengine 0.10.7 /
mmcv-lite, and the onedl-* fork, which needs another subset).

:func:`apply` runs once when :mod:`mmseg_whitebox` is imported, before
anything imports mmseg, and applies the patches this environment needs.
Each module says what it patches, why, and on which versions:
:mod:`.import_shims` (torchvision ops, mmcv-lite's missing ``mmcv.ops``),
:mod:`.checkpoints` (every checkpoint loaded weights-only),
:mod:`.package_configs` (``mmseg::`` config paths), :mod:`.resume` (a
resume that skips the trained batches without loading them).
:data:`STATUS` maps each patch to whether it is in effect, and
``'stack'`` to the distributions found (:func:`stack`).

The other patches change another library only where a feature is used,
and the code that uses it applies them: :mod:`.checkpoint_hook`
(``last_checkpoint`` written atomically), :mod:`.dataloader` (persistent
workers stopped), :mod:`.config_text` (yapf's formatting memoized),
:mod:`.argparse_errors` (usage errors recorded), :mod:`.model_index`
(model names of this project's metafiles), :mod:`.compile` (torch 2.1's
inductor decompositions), :mod:`.devices` (GPUs hidden from a CPU run),
:mod:`.modules` (a module view with its own children),
:mod:`.imagecorruptions` (the corruptions library on current NumPy,
scikit-image and setuptools) and :mod:`.export_sizes` (ONNX graphs valid
at every input size).

A script that imports torchvision, timm or ``mmseg.apis`` before this
package meets the failures these patches fix: import ``mmseg_whitebox``
first (the configs' ``custom_imports`` do so for every tool).
"""
from __future__ import annotations

from typing import Any, Dict

from .argparse_errors import parser_errors_reported_to
from .checkpoint_hook import (LAST_CHECKPOINT,
                              last_checkpoint_written_atomically)
from .checkpoints import (WEIGHTS_ONLY_CONVERTER, WEIGHTS_ONLY_SCHEMES,
                          UnsafeCheckpointError, load_from_local_weights_only,
                          load_from_weights_only, patch_checkpoint_loader,
                          patch_safe_torch_load, safe_torch_load_weights_only,
                          torch_load_weights_only)
from .compile import DECOMPOSED_OPS, decompose_as_newer_torch
from .config_text import format_config_text_once
from .dataloader import stop_persistent_workers
from .devices import cuda_hidden
from .distributions import STACKS, stack
from .export_sizes import export_friendly
from .imagecorruptions import import_imagecorruptions
from .import_shims import (COMPILED_MMCV_CLASSES, COMPILED_MMCV_FUNCTIONS,
                           COMPILED_MMCV_OPS, COMPILED_MMCV_TEST_CLASSES,
                           MSDA_WARNING, is_standin, mmcv_ops_standin_needed,
                           mmcv_without_compiled_ops, patch_mmcv_ops,
                           patch_torchvision, torchvision_needs_shim)
from .model_index import add_scope_models
from .modules import module_view
from .package_configs import patch_package_configs
from .resume import (ResumableDataIterator, patch_resume_skip,
                     process_random_state, runner_resumes,
                     set_process_random_state)

__all__ = [
    'COMPILED_MMCV_CLASSES', 'COMPILED_MMCV_FUNCTIONS', 'COMPILED_MMCV_OPS',
    'COMPILED_MMCV_TEST_CLASSES', 'DECOMPOSED_OPS', 'LAST_CHECKPOINT',
    'MSDA_WARNING', 'ResumableDataIterator', 'STACKS', 'STATUS',
    'process_random_state', 'runner_resumes', 'set_process_random_state',
    'UnsafeCheckpointError', 'WEIGHTS_ONLY_CONVERTER', 'WEIGHTS_ONLY_SCHEMES',
    'add_scope_models', 'apply', 'cuda_hidden', 'decompose_as_newer_torch',
    'export_friendly',
    'format_config_text_once', 'import_imagecorruptions', 'is_standin',
    'last_checkpoint_written_atomically', 'load_from_local_weights_only',
    'load_from_weights_only', 'mmcv_ops_standin_needed',
    'mmcv_without_compiled_ops', 'module_view', 'parser_errors_reported_to',
    'patch_checkpoint_loader', 'patch_mmcv_ops', 'patch_package_configs',
    'patch_resume_skip', 'patch_safe_torch_load', 'patch_torchvision',
    'safe_torch_load_weights_only', 'stack', 'stop_persistent_workers',
    'torch_load_weights_only', 'torchvision_needs_shim'
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
