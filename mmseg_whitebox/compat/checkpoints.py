"""Every checkpoint loaded weights-only, whatever its scheme (mmengine
0.10.7 and onedl-mmengine 0.10; torch 2.1 to 2.13).

``checkpoint loading``
    *Patches* mmengine's ``CheckpointLoader``: one loader,
    :func:`load_from_weights_only`, for every prefix (local files,
    ``http(s)://``, ``torchvision://``, ``modelzoo://``, ``open-mmlab://``,
    ``openmmlab://``, ``mmcls://``, ``pavi://``, ``s3://``, ``petrel://``).
    It finds the file as mmengine does, loads it with ``weights_only=True``
    and decodes the safe checkpoints this project writes
    (:mod:`mmseg_whitebox.utils.checkpoint_codec`); a file that needs full
    unpickling is refused, saying how to convert it. *Why:* mmengine
    0.10.7's local loader calls a bare ``torch.load`` (not weights-only on
    torch < 2.6), and on every stack a URL's file is read from torch's hub
    cache by ``load_state_dict_from_url``, whose ``weights_only`` defaults
    to False, so a file planted there runs its code. Every process
    downloads what it needs (:func:`mmseg_whitebox.utils.downloads.fetch_url`).

``mmengine's weights-only fallback`` (onedl-mmengine only)
    *Patches* ``mmengine.runner.checkpoint._safe_torch_load``, which
    retries a refused weights-only load with ``weights_only=False``; it
    gets the same load and refusal as local files.
"""
from __future__ import annotations

import os
import pickle
import re
import shlex
from typing import Any, Callable, Dict, Optional

import torch

from mmseg_whitebox.utils.tool_error import InputError

#: how to convert a checkpoint that is refused on load (see
#: ``tools/model_converters/weights_only.py``)
WEIGHTS_ONLY_CONVERTER = 'python -m mmseg_whitebox weights-only'


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
