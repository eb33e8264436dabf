"""Compatibility layer for the OpenMMLab 1.x stack on recent (CPU) PyTorch.

mmsegmentation 1.2.2, mmengine 0.10.7 and mmcv < 2.2 predate torch 2.13.
:func:`apply` is called once when :mod:`mmseg_whitebox` is imported, before
anything imports mmseg, and applies only the fixes a given environment needs:

``torchvision``
    The PyPI torchvision wheel that matches CPU torch 2.13 is built against
    CUDA; its ``_C`` op library fails to load without ``libc10_cuda.so`` and
    ``import torchvision`` then dies on ``operator torchvision::nms does not
    exist``. That breaks ``import timm`` and, through mmseg's timm backbone
    wrapper (which only catches ``ImportError``), ``import mmseg.models``.
    The fix declares the two op schemas torchvision registers fake kernels
    for, with kernels that raise a clear error. Skipped when the op library
    loads (a CUDA torch with its torchvision) or torchvision is absent.

``mmcv.ops``
    mmcv-lite ships no compiled ``mmcv._ext``, so ``import mmcv.ops`` fails
    and mmseg modules that import from it at module level (point_sample,
    sigmoid_focal_loss, ...) cannot be imported. The fix installs a
    stand-in ``mmcv.ops`` package that keeps the real pure-PyTorch
    submodules importable and turns every compiled op into a callable that
    raises a clear error. Skipped when a compiled mmcv is installed.

``checkpoint loading``
    mmengine loads local checkpoints with a bare ``torch.load``. The fix
    registers a local loader that always passes ``weights_only=True`` (also
    on torch < 2.6, where that was not the default) and decodes the
    weights-only-safe checkpoints this project writes (see
    :mod:`mmseg_whitebox.utils.checkpoint_codec`). A file that needs full
    unpickling is refused with an error that says how to convert it; the
    protection is never switched off.
"""
from __future__ import annotations

import importlib
import importlib.util
import os
import pickle
import sys
import types
import warnings
from typing import Any, Callable, Dict

import torch

# Names mmseg 1.2.2 imports from ``mmcv.ops`` that need the compiled
# extension; everything pure-Python is resolved from the real submodules.
COMPILED_MMCV_OPS = ('sigmoid_focal_loss', 'CrissCrossAttention', 'PSAMask',
                     'DeformConv2d', 'ModulatedDeformConv2d')

STATUS: Dict[str, Any] = {}
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


def mmcv_has_compiled_ops() -> bool:
    """True if ``mmcv.ops`` imports (a full mmcv build)."""
    try:
        importlib.import_module('mmcv.ops')
        return True
    except ImportError:
        return False


def patch_mmcv_ops() -> bool:
    """Install a stand-in ``mmcv.ops`` package when only mmcv-lite exists.

    Returns True if installed, False if a compiled mmcv made it unneeded
    (or mmcv is not installed at all).
    """
    existing = sys.modules.get('mmcv.ops')
    if existing is not None and getattr(existing, '__mmseg_whitebox_shim__',
                                        False):
        return True
    if importlib.util.find_spec('mmcv') is None or mmcv_has_compiled_ops():
        return False
    import mmcv
    for key in [k for k in sys.modules
                if k == 'mmcv.ops' or k.startswith('mmcv.ops.')]:
        del sys.modules[key]
    ops = types.ModuleType('mmcv.ops')
    ops.__path__ = [os.path.join(os.path.dirname(mmcv.__file__), 'ops')]
    ops.__package__ = 'mmcv.ops'
    ops.__doc__ = ('Stand-in for mmcv.ops installed by mmseg_whitebox.compat '
                   '(mmcv-lite: no compiled ops).')
    ops.__mmseg_whitebox_shim__ = True
    sys.modules['mmcv.ops'] = ops
    mmcv.ops = ops
    # point_sample is pure PyTorch (grid_sample) and works as is.
    from mmcv.ops.point_sample import point_sample
    ops.point_sample = point_sample
    how = ('mmcv-lite has no compiled ops; install the full mmcv '
           '(e.g. `pip install -c constraints.txt --no-build-isolation '
           'mmcv==2.1.0`, see README) to use it')
    for name in COMPILED_MMCV_OPS:
        setattr(ops, name, _raise_missing(f'mmcv.ops.{name}', how))
    # mmcv.cnn warns on import that it cannot find this compiled op; with
    # mmcv-lite that is expected and says nothing new
    warnings.filterwarnings(
        'ignore', message='Fail to import ``MultiScaleDeformableAttention``',
        category=UserWarning)
    return True


class UnsafeCheckpointError(pickle.UnpicklingError):
    """A checkpoint needs full unpickling, which is refused on load."""


def load_from_local_weights_only(filename: str, map_location: Any = None) -> Any:
    """``torch.load`` a local checkpoint with ``weights_only=True``.

    Checkpoints written with :class:`WeightsOnlyCheckpointHook` store their
    non-tensor training state as plain data; it is decoded back into the
    mmengine objects here. Anything that would need arbitrary unpickling is
    refused with :class:`UnsafeCheckpointError`.
    """
    from mmseg_whitebox.utils.checkpoint_codec import decode_checkpoint
    filename = os.path.expanduser(filename)
    if not os.path.isfile(filename):
        raise FileNotFoundError(f'{filename} can not be found.')
    try:
        checkpoint = torch.load(
            filename, map_location=map_location, weights_only=True)
    except pickle.UnpicklingError as exc:
        raise UnsafeCheckpointError(
            f'Refusing to load {filename}: it contains pickled Python '
            'objects besides tensors, and unpickling them can run arbitrary '
            'code, so it is only loaded with weights_only=True. It was '
            'probably written by a plain mmengine run. If you trust the '
            'file, convert it once with `python '
            'tools/model_converters/weights_only.py '
            f'{filename} OUT.pth --trust` and use OUT.pth. '
            f'(torch said: {str(exc).splitlines()[0]})') from exc
    return decode_checkpoint(checkpoint)


def patch_checkpoint_loader() -> bool:
    """Make mmengine's local-file checkpoint loader weights-only."""
    from mmengine.runner.checkpoint import CheckpointLoader
    if CheckpointLoader._schemes.get('') is load_from_local_weights_only:
        return True
    CheckpointLoader.register_scheme(
        prefixes='', loader=load_from_local_weights_only, force=True)
    return True


def apply() -> Dict[str, Any]:
    """Apply every fix this environment needs; safe to call repeatedly.

    Returns a dict ``{fix name: applied?}`` (also kept in :data:`STATUS`).
    """
    STATUS['torchvision_shim'] = patch_torchvision()
    STATUS['mmcv_ops_shim'] = patch_mmcv_ops()
    STATUS['weights_only_loader'] = patch_checkpoint_loader()
    return dict(STATUS)
