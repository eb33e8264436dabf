"""The import shims of :mod:`mmseg_whitebox.compat`: torchvision, timm
and mmseg's models import on a stack without compiled ops (torch 2.13 CPU
with the PyPI torchvision wheel; mmcv-lite).
:func:`~mmseg_whitebox.compat.apply` installs them first, before anything
imports mmseg.

``torchvision``
    The PyPI torchvision wheel that matches CPU torch 2.13 is built against
    CUDA; its ``_C`` op library fails to load without ``libc10_cuda.so`` and
    ``import torchvision`` then dies on ``operator torchvision::nms does not
    exist``. That breaks ``import timm`` and, through mmseg's timm backbone
    wrapper (which only catches ``ImportError``), ``import mmseg.models``.
    The fix declares the two op schemas torchvision registers fake kernels
    for, with kernels that raise a clear error. Skipped when the op library
    loads (a CUDA torch with its torchvision) or torchvision is absent.

``mmcv.ops`` (mmsegmentation only)
    mmcv-lite ships no compiled ``mmcv._ext``, so ``import mmcv.ops`` fails,
    and mmsegmentation 1.2.2 imports from it at module level (point_sample,
    sigmoid_focal_loss, CrissCrossAttention, PSAMask), so ``import
    mmseg.models`` fails. The fix installs a stand-in ``mmcv.ops`` package
    (with a proper ``__spec__``) that keeps the real pure-PyTorch
    submodules importable (``point_sample`` works) and provides those
    compiled ops as a function and classes that import fine and raise a
    clear error when used. Skipped when a compiled mmcv is installed, and
    on the onedl fork, whose mmseg guards these imports and reports a
    missing op itself (its messages name onedl-mmcv, not mmcv). Without
    compiled ops, on either stack, mmcv's import-time warning that
    MultiScaleDeformableAttention is missing is silenced.
"""
from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys
import types
import warnings
from typing import Any, Callable

import torch

from .distributions import STACKS, _dist_version

# The compiled ops mmsegmentation 1.2.2 imports from ``mmcv.ops`` at
# module level (everything else mmseg, mmengine and mmcv's cnn bricks take
# from it is imported inside functions that first check for a compiled
# mmcv); point_sample is pure PyTorch and comes from the real submodule.
#: functions: calling one raises the stand-in's error
COMPILED_MMCV_FUNCTIONS = ('sigmoid_focal_loss', )
#: ``nn.Module`` classes: real classes (``isinstance`` checks and
#: subclassing work); creating an instance raises
COMPILED_MMCV_CLASSES = ('CrissCrossAttention', 'PSAMask')
#: classes mmseg's own unit tests import (not its package), made the same
#: way: DeformConv2dPack is imported by mmsegmentation 1.2.2's
#: tests/test_models/test_backbones/test_resnet.py, which must still run
#: with this package imported (``make mmseg-tests``)
COMPILED_MMCV_TEST_CLASSES = ('DeformConv2dPack', )
#: every compiled op the stand-in provides
COMPILED_MMCV_OPS = (COMPILED_MMCV_FUNCTIONS + COMPILED_MMCV_CLASSES +
                     COMPILED_MMCV_TEST_CLASSES)

_TORCHVISION_LIB = None


def _raise_missing(what: str, how: str) -> Callable[..., Any]:

    def _missing(*args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError(f'{what} is not available here: {how}')

    _missing.__name__ = what.rsplit('.', 1)[-1]
    return _missing


def torchvision_needs_shim() -> bool:
    """True if torchvision is installed but its compiled op library cannot
    be loaded by this torch (the CUDA-built wheel under a CPU torch)."""
    if 'torchvision' in sys.modules:  # imported fine already
        return False
    spec = importlib.util.find_spec('torchvision')
    if spec is None or spec.origin is None:
        return False
    if hasattr(torch.ops, 'torchvision') and hasattr(torch.ops.torchvision,
                                                     'nms'):
        return False
    lib_dir = os.path.dirname(spec.origin)
    candidates = [f for f in os.listdir(lib_dir)
                  if f.startswith('_C') and f.endswith(('.so', '.pyd'))]
    if not candidates:
        return True
    try:
        torch.ops.load_library(os.path.join(lib_dir, candidates[0]))
    except (OSError, RuntimeError):
        return True
    return False


def patch_torchvision() -> bool:
    """Declare ``torchvision::nms``/``qnms`` so torchvision can import.

    Returns True if the shim was installed, False if it was not needed.
    """
    global _TORCHVISION_LIB
    if _TORCHVISION_LIB is not None:
        return True
    if not torchvision_needs_shim():
        return False
    lib = torch.library.Library('torchvision', 'DEF')
    how = ('this torchvision wheel was built for CUDA and its compiled ops '
           'do not load with a CPU-only torch; install a torchvision that '
           'matches your torch to use them')
    for name, schema in (
            ('nms', 'nms(Tensor dets, Tensor scores, float iou_threshold) '
             '-> Tensor'),
            ('qnms', 'qnms(Tensor dets, Tensor scores, float iou_threshold) '
             '-> Tensor')):
        lib.define(schema)
        lib.impl(name, _raise_missing(f'torchvision.ops.{name}', how),
                 'CompositeExplicitAutograd')
    _TORCHVISION_LIB = lib
    return True


def mmcv_without_compiled_ops() -> bool:
    """True if mmcv is installed without its compiled ``mmcv._ext``
    (mmcv-lite; onedl-mmcv built without ops)."""
    return importlib.util.find_spec('mmcv') is not None and \
        importlib.util.find_spec('mmcv._ext') is None


def mmcv_ops_standin_needed() -> bool:
    """True if mmcv has no compiled ops and mmseg is mmsegmentation, whose
    modules import ``mmcv.ops`` at module level. The onedl fork
    (onedl-mmsegmentation) guards those imports."""
    return mmcv_without_compiled_ops() and \
        _dist_version(STACKS['onedl'][0]) is None


#: what mmcv's transformer bricks warn on import without compiled ops
MSDA_WARNING = 'Fail to import ``MultiScaleDeformableAttention``'


def is_standin(obj: Any) -> bool:
    """Whether ``obj`` is a stand-in that :func:`patch_mmcv_ops` made: the
    ``mmcv.ops`` package, or the class of a compiled op it lacks."""
    return getattr(obj, '__mmseg_whitebox_shim__', False)


_MMCV_OPS_HOW = ('mmcv-lite has no compiled ops; install the full mmcv '
                 '(e.g. `pip install -c constraints.txt --no-build-isolation '
                 'mmcv==2.1.0`, see docs/install.md) to use it')


class _StandinLoader(importlib.abc.Loader):
    """Loader of the stand-in ``mmcv.ops``: it is built in place by
    :func:`patch_mmcv_ops`, so there is nothing to execute."""

    def __init__(self, module: types.ModuleType) -> None:
        self._module = module

    def create_module(self, spec: Any) -> types.ModuleType:
        return self._module

    def exec_module(self, module: types.ModuleType) -> None:
        pass

    def is_package(self, fullname: str) -> bool:
        return True


def _missing_op_class(name: str) -> type:
    """An ``nn.Module`` subclass named like mmcv's compiled op ``name``
    whose instantiation raises the stand-in's error."""
    what = f'mmcv.ops.{name}'

    def __new__(cls, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError(f'{what} is not available here: '
                                  f'{_MMCV_OPS_HOW}')

    return type(name, (torch.nn.Module, ), {
        '__new__': __new__,
        '__module__': 'mmcv.ops',
        '__qualname__': name,
        '__doc__': f'Stand-in for the compiled {what} (mmcv-lite): '
                   'creating one raises NotImplementedError.',
        '__mmseg_whitebox_shim__': True,
    })


def patch_mmcv_ops() -> bool:
    """Install a stand-in ``mmcv.ops`` package when only mmcv-lite exists.

    Returns True if installed, False if not needed
    (:func:`mmcv_ops_standin_needed`). Without compiled ops (either stack)
    mmcv's warning that MultiScaleDeformableAttention is missing is
    silenced.
    """
    if is_standin(sys.modules.get('mmcv.ops')):
        return True
    if mmcv_without_compiled_ops():
        # mmcv's transformer bricks (imported by mmseg's models) warn that
        # this compiled op is missing and to install mmcv "rather than
        # mmcv-lite": expected here, on either stack, and it would come
        # before every tool's one-line error message
        warnings.filterwarnings('ignore', message=MSDA_WARNING,
                                category=UserWarning)
    if not mmcv_ops_standin_needed():
        return False
    import mmcv
    for key in [k for k in sys.modules
                if k == 'mmcv.ops' or k.startswith('mmcv.ops.')]:
        del sys.modules[key]
    ops = types.ModuleType('mmcv.ops')
    # a real spec, so importlib.util.find_spec('mmcv.ops') answers (it
    # raises ValueError for a module in sys.modules whose __spec__ is None)
    # and submodules resolve from mmcv's own ops folder
    spec = importlib.machinery.ModuleSpec(
        'mmcv.ops', _StandinLoader(ops), is_package=True)
    spec.submodule_search_locations = [
        os.path.join(os.path.dirname(mmcv.__file__), 'ops')]
    ops.__spec__ = spec
    ops.__loader__ = spec.loader
    ops.__path__ = list(spec.submodule_search_locations)
    ops.__package__ = 'mmcv.ops'
    ops.__doc__ = ('Stand-in for mmcv.ops installed by mmseg_whitebox.compat '
                   '(mmcv-lite: no compiled ops).')
    ops.__mmseg_whitebox_shim__ = True
    sys.modules['mmcv.ops'] = ops
    mmcv.ops = ops
    # point_sample is pure PyTorch (grid_sample) and works as is.
    from mmcv.ops.point_sample import point_sample
    ops.point_sample = point_sample
    for name in COMPILED_MMCV_FUNCTIONS:
        setattr(ops, name, _raise_missing(f'mmcv.ops.{name}', _MMCV_OPS_HOW))
    for name in COMPILED_MMCV_CLASSES + COMPILED_MMCV_TEST_CLASSES:
        setattr(ops, name, _missing_op_class(name))
    ops.__all__ = ['point_sample'] + list(COMPILED_MMCV_OPS)
    return True
