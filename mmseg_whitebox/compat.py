"""Compatibility layer for the OpenMMLab 1.x stack on recent (CPU) PyTorch.

mmsegmentation 1.2.2, mmengine 0.10.7 and mmcv < 2.2 predate torch 2.13;
the maintained fork (onedl-mmsegmentation 1.4, onedl-mmengine 0.10.8+,
onedl-mmcv 2.3) needs a different subset of the fixes.
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

``checkpoint loading``
    The fix registers ONE loader, :func:`load_from_weights_only`, for
    every prefix of mmengine's ``CheckpointLoader`` (local files,
    ``http(s)://``, ``torchvision://``, ``modelzoo://``,
    ``open-mmlab://``, ``openmmlab://``, ``mmcls://``, ``pavi://``,
    ``s3://``, ``petrel://``: mmengine 0.10.7 and onedl-mmengine 0.10
    alike). It finds the file as mmengine does, always loads it with
    ``weights_only=True`` and decodes the weights-only-safe checkpoints
    this project writes (see :mod:`mmseg_whitebox.utils.checkpoint_codec`);
    without the decoding, a resumed run drops the message hub's logged
    scalars and gets numpy values back as tagged dicts. A file that needs
    full unpickling is refused with an error that says how to convert it
    (``python -m mmseg_whitebox weights-only``, from any directory); the
    protection is never switched off. Without the fix: mmengine 0.10.7's
    local loader calls a bare ``torch.load`` (weights-only by default
    since torch 2.6, so not on torch 2.1); onedl-mmengine's retries a
    refused load with ``weights_only=False`` (see the next fix); on every
    stack, a URL's file (also behind ``torchvision://``, ``mmcls://``,
    ``open-mmlab://``) is read from torch's hub cache by
    ``torch.hub.load_state_dict_from_url``, whose ``weights_only``
    defaults to False (torch 2.1 to 2.13), so a file planted there runs
    its code. A URL is downloaded by every process that needs it
    (:func:`mmseg_whitebox.utils.downloads.fetch_url`; mmengine
    downloads on rank 0 while the others wait at a barrier), and a failed
    download is one line.

``mmengine's weights-only fallback`` (onedl-mmengine only)
    The maintained fork's ``mmengine.runner.checkpoint._safe_torch_load``,
    which its other loaders (``pavi://``, ``openmmlab://`` from the
    mmengine home, ...) call with a file path, retries a refused
    weights-only load with ``weights_only=False``, i.e. it unpickles
    whatever the file holds. The
    fix replaces it with the same weights-only load and refusal as local
    files. Skipped on mmengine 0.10.7, whose loaders call ``torch.load``
    without that fallback (weights-only by default since torch 2.6).

``resume replays skipped batches`` (onedl-mmengine only)
    On ``--resume`` the fork's iteration loop fast-forwards the sampler (or
    advances it index by index) without loading the batches already
    trained on, so the data pipeline's random transforms draw different
    numbers than in the uninterrupted run and a resumed run is no longer
    bitwise equal to it; its lazily created DataLoader iterator also draws
    from torch's random state after the resume restored it. The fix loads
    and discards each skipped batch and keeps the restored state, as
    mmengine 0.10.7 does. Skipped on mmengine 0.10.7 (no ``skip_iter``).

``STATUS`` maps each fix to whether it is in effect and, once
:func:`apply` ran, ``'stack'`` to the OpenMMLab distributions found
(:func:`stack`: ``default`` = mmsegmentation 1.2.2 / mmengine / mmcv-lite,
``onedl`` = the onedl-* fork).

A script that imports torchvision, timm or ``mmseg.apis`` before this
package meets the failures above: import ``mmseg_whitebox`` first (the
configs' ``custom_imports`` do so for every tool).
"""
from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import os
import pickle
import re
import shlex
import sys
import types
import warnings
from typing import Any, Callable, Dict, Optional

import torch

from mmseg_whitebox.utils.tool_error import InputError

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

#: how to convert a checkpoint that is refused on load (see
#: ``tools/model_converters/weights_only.py``)
WEIGHTS_ONLY_CONVERTER = 'python -m mmseg_whitebox weights-only'

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


def _is_standin(module: Any) -> bool:
    return getattr(module, '__mmseg_whitebox_shim__', False)


_MMCV_OPS_HOW = ('mmcv-lite has no compiled ops; install the full mmcv '
                 '(e.g. `pip install -c constraints.txt --no-build-isolation '
                 'mmcv==2.1.0`, see README) to use it')


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
    if _is_standin(sys.modules.get('mmcv.ops')):
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


class UnsafeCheckpointError(InputError, pickle.UnpicklingError):
    """A checkpoint needs full unpickling, which is refused on load: the
    user's file (an :class:`InputError`, one line from a tool), and an
    ``UnpicklingError`` to torch's callers."""


def torch_load_weights_only(file: Any, map_location: Any = None,
                            name: Optional[str] = None) -> Any:
    """``torch.load(file, weights_only=True)``; a file that needs full
    unpickling raises :class:`UnsafeCheckpointError`, saying how to convert
    it when ``file`` is a path. ``name``: what the user gave (a URL, an
    ``s3://`` path), said before the file."""
    try:
        return torch.load(file, map_location=map_location, weights_only=True)
    except pickle.UnpicklingError as exc:
        if isinstance(file, (str, os.PathLike)):
            # absolute, so the printed command works from any directory
            src = shlex.quote(os.path.abspath(file))
            what = os.fspath(file)
            if name is not None and name != what:
                what = f'{name} ({what})'
        else:
            src, what = 'IN.pth', name or 'the checkpoint'
        raise UnsafeCheckpointError(
            f'Refusing to load {what}: it contains pickled Python '
            'objects besides tensors, and unpickling them can run arbitrary '
            'code, so it is only loaded with weights_only=True. It was '
            'probably written by a plain mmengine run. If you trust the '
            'file, convert it once with '
            f'`{WEIGHTS_ONLY_CONVERTER} {src} OUT.pth --trust` and use '
            'OUT.pth. '
            f'(torch said: {str(exc).splitlines()[0]})') from exc


def load_from_local_weights_only(filename: str,
                                 map_location: Any = None,
                                 name: Optional[str] = None) -> Any:
    """``torch.load`` a local checkpoint with ``weights_only=True``.

    Checkpoints written with :class:`WeightsOnlyCheckpointHook` store their
    non-tensor training state as plain data; it is decoded back into the
    mmengine objects here. Anything that would need arbitrary unpickling is
    refused with :class:`UnsafeCheckpointError` (``name``: what the user
    gave for this file, e.g. a URL, said in the error).
    """
    # imported here, at load time: compat is the first module the package
    # root imports (before mmengine/mmseg), and these modules import mmseg
    from mmseg_whitebox.utils.checkpoint_codec import decode_checkpoint
    filename = os.path.expanduser(filename)
    if not os.path.isfile(filename):
        raise FileNotFoundError(f'{filename} can not be found.')
    # an empty or non-checkpoint file gets its own message, not EOFError /
    # "contains pickled Python objects"
    from mmseg_whitebox.utils.checkpoint_checks import check_checkpoint_file
    check_checkpoint_file(filename)
    return decode_checkpoint(
        torch_load_weights_only(filename, map_location, name))


def _from_url(url: str, map_location: Any, name: str) -> Any:
    """http(s): the file in torch's hub cache, downloaded by this process
    if it is not there (every rank, no barrier; a failure is one line);
    ``name``: what the user gave (the URL, ``torchvision://NAME``)."""
    from mmseg_whitebox.utils.downloads import fetch_checkpoint
    return load_from_local_weights_only(
        fetch_checkpoint(url, 'checkpoint'), map_location, name)


def _from_http(filename: str, map_location: Any) -> Any:
    """``http://`` and ``https://``: :func:`_from_url`."""
    return _from_url(filename, map_location, filename)


def _from_torchvision(filename: str, map_location: Any) -> Any:
    """``torchvision://NAME`` (``modelzoo://NAME``): torchvision's URL."""
    from mmengine.runner import checkpoint
    name = filename.split('://', 1)[1]
    return _from_url(checkpoint.get_torchvision_models()[name],
                     map_location, filename)


def _from_openmmlab(filename: str, map_location: Any) -> Any:
    """``open-mmlab://NAME`` (``openmmlab://NAME``): mmengine's URL or a
    file in mmengine's home (deprecated names renamed, as mmengine
    does)."""
    from mmengine.runner import checkpoint
    name = filename.split('://', 1)[1]
    name = checkpoint.get_deprecated_model_names().get(name, name)
    url = checkpoint.get_external_models()[name]
    if url.startswith(('http://', 'https://')):
        return _from_url(url, map_location, filename)
    return load_from_local_weights_only(
        os.path.join(checkpoint._get_mmengine_home(), url), map_location,
        filename)


def _from_mmcls(filename: str, map_location: Any) -> Any:
    """``mmcls://NAME``: mmcls's URL, its backbone weights kept."""
    from mmengine.runner import checkpoint
    url = checkpoint.get_mmcls_models()[filename.split('://', 1)[1]]
    return checkpoint._process_mmcls_checkpoint(
        _from_url(url, map_location, filename))


def _from_pavi(filename: str, map_location: Any) -> Any:
    """``pavi://PATH``: downloaded from pavi's model cloud by this
    process into a temporary folder."""
    import tempfile
    try:
        from pavi import modelcloud
    except ImportError as exc:
        raise ImportError('Please install pavi to load checkpoint from '
                          'modelcloud.') from exc
    model = modelcloud.get(filename[len('pavi://'):])
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, model.name)
        model.download(path)
        return load_from_local_weights_only(path, map_location, filename)


def _from_ceph(filename: str, map_location: Any) -> Any:
    """``s3://`` / ``petrel://`` (with an optional ``NAME:`` before): the
    bytes from mmengine's petrel file backend."""
    import io
    from mmengine.runner import checkpoint
    from mmseg_whitebox.utils.checkpoint_codec import decode_checkpoint
    backend = checkpoint.get_file_backend(
        filename, backend_args={'backend': 'petrel'})
    with io.BytesIO(backend.get(filename)) as buffer:
        return decode_checkpoint(
            torch_load_weights_only(buffer, map_location, filename))


#: how :func:`load_from_weights_only` reads each prefix of mmengine's
#: ``CheckpointLoader`` (mmengine 0.10.7 and onedl-mmengine 0.10 register
#: these and no others), as ``prefix: loader(filename, map_location)``
WEIGHTS_ONLY_SCHEMES: Dict[str, Callable[[str, Any], Any]] = {
    '': load_from_local_weights_only,
    'http://': _from_http,
    'https://': _from_http,
    'torchvision://': _from_torchvision,
    'modelzoo://': _from_torchvision,
    'open-mmlab://': _from_openmmlab,
    'openmmlab://': _from_openmmlab,
    'mmcls://': _from_mmcls,
    'pavi://': _from_pavi,
    r'(\S+\:)?s3://': _from_ceph,
    r'(\S+\:)?petrel://': _from_ceph,
}


def load_from_weights_only(filename: str, map_location: Any = None) -> Any:
    """mmengine's checkpoint loader for every scheme: the file is found as
    mmengine finds it (a local path, a URL's file in torch's hub cache,
    downloaded there by this process if missing, a model-zoo name's URL,
    a pavi or s3 download), then loaded by
    :func:`torch_load_weights_only` and decoded. A prefix mmengine knows
    and :data:`WEIGHTS_ONLY_SCHEMES` does not is refused (with what to do)
    rather than loaded by mmengine's own, unpickling loader."""
    from mmengine.runner.checkpoint import CheckpointLoader
    # the prefix mmengine picks (its order: longer prefixes first)
    prefix = next((p for p in CheckpointLoader._schemes
                   if re.match(p, filename) is not None), '')
    load = WEIGHTS_ONLY_SCHEMES.get(prefix)
    if load is None:
        raise InputError(
            f'checkpoint {filename!r}: mmseg_whitebox loads every checkpoint '
            f'weights-only and has no loader for the scheme {prefix!r}; '
            'download the file and give its local path')
    return load(filename, map_location)


def patch_checkpoint_loader() -> bool:
    """Make every scheme of mmengine's checkpoint loader weights-only: each
    prefix ``CheckpointLoader`` has is registered anew with
    :func:`load_from_weights_only`."""
    from mmengine.runner.checkpoint import CheckpointLoader
    stale = [prefix for prefix, loader in CheckpointLoader._schemes.items()
             if loader is not load_from_weights_only]
    if '' not in CheckpointLoader._schemes:
        stale.append('')
    if stale:
        CheckpointLoader.register_scheme(
            prefixes=stale, loader=load_from_weights_only, force=True)
    return True


def safe_torch_load_weights_only(file: Any,
                                 map_location: Any = None,
                                 weights_only: Any = None) -> Any:
    """Stand-in for onedl-mmengine's ``_safe_torch_load``: always
    weights-only (``weights_only`` is accepted and ignored), decoded as
    :func:`load_from_local_weights_only` does, never a retry with full
    unpickling."""
    from mmseg_whitebox.utils.checkpoint_codec import decode_checkpoint
    return decode_checkpoint(torch_load_weights_only(file, map_location))


def patch_safe_torch_load() -> bool:
    """Remove onedl-mmengine's fallback to ``weights_only=False``.

    Returns True if mmengine has the fallback (``_safe_torch_load``) and it
    is replaced, False on an mmengine without it (0.10.7).
    """
    from mmengine.runner import checkpoint
    current = getattr(checkpoint, '_safe_torch_load', None)
    if current is None:
        return False
    if current is not safe_torch_load_weights_only:
        checkpoint._safe_torch_load = safe_torch_load_weights_only
    return True


def _replay_skipped_batches(self: Any, num_iters: int) -> None:
    """``_InfiniteDataloaderIterator.skip_iter`` as mmengine 0.10.7 resumes:
    each skipped batch is loaded, so the pipeline's random transforms
    advance exactly as in the uninterrupted run. Creating the DataLoader
    iterator draws its base seed from torch's generator; 0.10.7 does that
    before the resume restores torch's random state (see
    :class:`RNGStateCheckpointHook`), so here the draw must leave that
    restored state as it was."""
    state = torch.get_rng_state()
    self._ensure_iterator()
    torch.set_rng_state(state)
    for _ in range(num_iters):
        next(self)


def patch_resume_skip() -> bool:
    """Make onedl-mmengine's resume load the skipped batches.

    Returns True if this mmengine's loop iterator has ``skip_iter`` (the
    fork) and it is replaced, False otherwise (0.10.7).
    """
    from mmengine.runner import loops
    iterator_cls = getattr(loops, '_InfiniteDataloaderIterator', None)
    if iterator_cls is None or not hasattr(iterator_cls, 'skip_iter'):
        return False
    iterator_cls.skip_iter = _replay_skipped_batches
    return True


#: OpenMMLab distributions per stack, ``stack: (mmseg, mmengine, mmcv
#: choices)``; the first stack whose mmseg distribution is installed wins
STACKS = {
    'onedl': ('onedl-mmsegmentation', 'onedl-mmengine', ('onedl-mmcv', )),
    'default': ('mmsegmentation', 'mmengine', ('mmcv-lite', 'mmcv')),
}


def _dist_version(dist: str) -> Any:
    """The installed version of distribution ``dist``, or None."""
    from importlib import metadata
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def stack() -> Dict[str, str]:
    """Which OpenMMLab stack is installed: ``{'name': 'default' | 'onedl' |
    'unknown', distribution: version, ...}`` (torch and numpy too)."""
    found: Dict[str, str] = {'name': 'unknown'}
    for name, (mmseg_dist, mmengine_dist, mmcv_dists) in STACKS.items():
        if _dist_version(mmseg_dist) is None:
            continue
        found['name'] = name
        for dist in (mmseg_dist, mmengine_dist) + mmcv_dists:
            if _dist_version(dist) is not None:
                found[dist] = _dist_version(dist)
        break
    for dist in ('torch', 'numpy'):
        found[dist] = _dist_version(dist)
    return found


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
        resume_replays_skipped_batches=patch_resume_skip())
    if 'stack' not in STATUS:
        STATUS['stack'] = stack()
    return dict(STATUS)
