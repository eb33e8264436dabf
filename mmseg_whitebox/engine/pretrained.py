"""The pretrained weights a config starts from, made available to every
process before training starts.

mmengine loads a URL's weights on rank 0 first (``load_from_http``:
download, then a barrier the other ranks wait at): when the download
fails, rank 0 stops with an error and every other rank is left waiting
at that barrier until the process group's timeout. Here each process
finds the file itself, before the Runner is built (before any collective
step): a local file must exist; a URL's file is looked up in torch's hub
cache (``torch.hub.get_dir()/checkpoints/<file name>``, where mmengine
and torch read it) and otherwise downloaded into it. The processes of a
machine take turns through a lock beside the cached file, so one
downloads while the others wait and then find it; when the download
fails, each process stops with the same line (a process that waited
while another one failed repeats that failure rather than wait for
another network timeout). mmengine then reads the cached file on every
rank.

A checkpoint URL given as ``load_from`` or as ``tools/test.py``'s
CHECKPOINT is fetched the same way (:func:`fetch_checkpoint`), and
:mod:`mmseg_whitebox.compat`'s weights-only loader reads every URL through
:func:`fetch_url`, so no rank waits at mmengine's barrier for another's
download.
"""
from __future__ import annotations

import os
import os.path as osp
import shutil
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from typing import Any, Callable, Iterator, List, Optional, Tuple

from mmseg_whitebox.utils.atomic import atomic_path
from mmseg_whitebox.utils.tool_error import ToolError

from .config_checks import download_error_message

#: the seconds a download may wait for the server at each step
DOWNLOAD_TIMEOUT = 60
#: the suffix of the note a failed download leaves beside the cached file
FAILED_SUFFIX = '.failed'
#: the types of ``init_cfg`` that load a checkpoint
PRETRAINED_TYPES = ('Pretrained', 'Pretrained_Part')
#: the schemes fetched here (others are left to mmengine's loaders)
URL_SCHEMES = ('http://', 'https://')


def pretrained_checkpoints(cfg: Any) -> List[Tuple[str, str]]:
    """``(key, checkpoint)`` for every pretrained checkpoint the model of
    ``cfg`` loads at initialisation: ``model.pretrained`` (and a
    component's ``pretrained``) and every ``init_cfg`` of type
    ``Pretrained`` / ``Pretrained_Part`` (``key`` is where to set another
    one with ``--cfg-options``)."""
    found: List[Tuple[str, str]] = []
    for key, value in _walk(cfg.get('model', None), 'model'):
        if value not in [c for _, c in found]:
            found.append((key, value))
    return found


def _walk(obj: Any, key: str) -> Iterator[Tuple[str, str]]:
    if isinstance(obj, dict):
        pretrained = obj.get('pretrained', None)
        if isinstance(pretrained, str) and pretrained:
            yield f'{key}.pretrained', pretrained
        inits = obj.get('init_cfg', None)
        for i, init in enumerate(inits if isinstance(inits, (list, tuple))
                                 else [inits]):
            if isinstance(init, dict) and init.get('type') in \
                    PRETRAINED_TYPES and init.get('checkpoint'):
                where = (f'{key}.init_cfg' if not isinstance(inits, (
                    list, tuple)) else f'{key}.init_cfg.{i}')
                yield f'{where}.checkpoint', init['checkpoint']
        for name, value in obj.items():
            if name not in ('pretrained', 'init_cfg'):
                yield from _walk(value, f'{key}.{name}')
    elif isinstance(obj, (list, tuple)):
        for i, value in enumerate(obj):
            yield from _walk(value, f'{key}.{i}')


def hub_cache_path(url: str) -> str:
    """Where torch's ``load_state_dict_from_url`` (and so mmengine's
    ``load_from_http``) keeps the file of ``url``."""
    import torch
    name = osp.basename(urllib.parse.urlparse(url).path)
    return osp.join(torch.hub.get_dir(), 'checkpoints', name)


def fetch_pretrained_weights(cfg: Any) -> None:
    """Make every pretrained checkpoint of ``cfg`` available to this
    process (see the module docstring): raises a :class:`ToolError` that
    names the key and what to do for a local file that does not exist or
    a URL that cannot be downloaded. Every process of a distributed run
    calls it, before any collective step."""
    for key, checkpoint in pretrained_checkpoints(cfg):
        if checkpoint.startswith(URL_SCHEMES):
            _fetch_url(cfg, checkpoint)
        elif '://' not in checkpoint and \
                not osp.isfile(osp.expanduser(checkpoint)):
            raise ToolError(
                f'{key}: pretrained weights {checkpoint!r} do not exist; '
                f'give the path of the file (--cfg-options {key}=/path/to/'
                'weights.pth: a converted checkpoint, e.g. written by '
                'tools/model_converters/timm2mmseg.py or whitebox2mmseg.py), '
                f'or train from scratch with --cfg-options {key}=None')


def _fetch_url(cfg: Any, url: str) -> None:
    """A pretrained URL of ``cfg`` in torch's hub cache (:func:`fetch_url`),
    a failure said as :func:`download_error_message` says it."""
    fetch_url(url, lambda exc, cached: download_error_message(cfg, exc,
                                                              cached))


def checkpoint_download_error(key: str, url: str, exc: BaseException,
                              cached: str) -> str:
    """What to say when the checkpoint ``url`` (given as ``key``:
    ``load_from``, ``checkpoint``) cannot be downloaded to ``cached``."""
    reason = getattr(exc, 'reason', exc)
    return (f'{key}: could not download {url} ({reason}): is this machine '
            'offline, or behind a proxy/firewall? Download the file '
            'elsewhere and give its local path instead, or put it at '
            f'{cached}')


def fetch_checkpoint(checkpoint: Optional[str], key: str) -> Optional[str]:
    """A checkpoint URL (``load_from``, ``tools/test.py``'s CHECKPOINT:
    ``key`` names it in the error) in torch's hub cache, downloaded by this
    process if needed (:func:`fetch_url`); returns the cached file's path,
    or ``checkpoint`` itself when it is not an http(s) URL. Every process
    of a distributed run calls it, before any collective step."""
    if not checkpoint or not checkpoint.startswith(URL_SCHEMES):
        return checkpoint
    return fetch_url(checkpoint, lambda exc, cached: checkpoint_download_error(
        key, checkpoint, exc, cached))


def fetch_url(url: str,
              failure: Callable[[BaseException, str], str]) -> str:
    """``url``'s file in torch's hub cache (:func:`hub_cache_path`),
    downloaded by one process of this machine at a time; returns its
    path. A failed download raises a :class:`ToolError` with
    ``failure(exception, cached path)``, also left beside the cached file
    for the processes that waited meanwhile (see the module docstring)."""
    from filelock import FileLock
    cached = hub_cache_path(url)
    if osp.isfile(cached):
        return cached
    waiting_since = time.time()
    try:
        os.makedirs(osp.dirname(cached), exist_ok=True)
        lock = FileLock(cached + '.lock')
        lock.acquire()
    except OSError as exc:
        raise ToolError(
            f'cannot write torch\'s hub cache {osp.dirname(cached)!r} '
            f'({exc.strerror or exc}) to download {url}: set TORCH_HOME to '
            'a writable folder, or point the config at a local copy of the '
            'file') from exc
    try:
        if osp.isfile(cached):  # another process downloaded it meanwhile
            return cached
        failed = cached + FAILED_SUFFIX
        if osp.isfile(failed) and osp.getmtime(failed) >= waiting_since:
            with open(failed, encoding='utf-8') as f:
                raise ToolError(f.read().strip())
        try:
            _download(url, cached)
        except (urllib.error.URLError, OSError) as exc:
            message = failure(exc, cached)
            with open(failed, 'w', encoding='utf-8') as f:
                f.write(message + '\n')
            raise ToolError(message) from exc
        if osp.isfile(failed):
            os.remove(failed)
        return cached
    finally:
        lock.release()


def _download(url: str, path: str) -> None:
    """Copy ``url`` to ``path``, which exists only once complete."""
    print(f'downloading {url} to {path}', file=sys.stderr)
    with urllib.request.urlopen(url, timeout=DOWNLOAD_TIMEOUT) as response:
        with atomic_path(path) as tmp:
            with open(tmp, 'wb') as f:
                shutil.copyfileobj(response, f)
