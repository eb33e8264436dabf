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
CHECKPOINT is fetched the same way, and :mod:`mmseg_whitebox.compat`'s
weights-only loader reads every URL the same way, so no rank waits at
mmengine's barrier for another's download: the downloads are in
:mod:`mmseg_whitebox.utils.downloads` (:func:`fetch_url`,
:func:`fetch_checkpoint`), a layer below both.
"""
from __future__ import annotations

import contextlib
import os.path as osp
import urllib.error
from typing import Any, Iterator, List, Optional, Tuple

from mmseg_whitebox.utils.downloads import URL_SCHEMES, fetch_url
from mmseg_whitebox.utils.tool_error import ToolError

#: the types of ``init_cfg`` that load a checkpoint
PRETRAINED_TYPES = ('Pretrained', 'Pretrained_Part')


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


def pretrained_urls(cfg: Any) -> List[str]:
    """The http(s) URLs a config downloads weights from."""
    urls = []

    def walk(obj: Any) -> None:
        if isinstance(obj, dict):
            for value in obj.values():
                walk(value)
        elif isinstance(obj, (list, tuple)):
            for value in obj:
                walk(value)
        elif isinstance(obj, str) and obj.startswith(('http://',
                                                      'https://')):
            if obj not in urls:
                urls.append(obj)

    walk(cfg.get('model', None))
    walk(cfg.get('load_from', None))
    return urls


def download_error_message(cfg: Any, exc: BaseException,
                           cached: Optional[str] = None) -> str:
    """What to say when fetching a config's pretrained weights failed
    (``cached``: where torch's hub cache keeps the file, if known)."""
    urls = pretrained_urls(cfg)
    reason = getattr(exc, 'reason', exc)
    where = ', '.join(urls) if urls else 'a URL in the config'
    cache = (f'put it at {cached}' if cached else "put it in torch's cache "
             '(~/.cache/torch/hub/checkpoints/, or $TORCH_HOME/hub/'
             'checkpoints/)')
    return (
        f'could not download the pretrained weights {where} ({reason}): '
        'is this machine offline, or behind a proxy/firewall? Download the '
        'file elsewhere (and '
        'convert it if needed, e.g. tools/model_converters/timm2mmseg.py for '
        'timm ViTs), then point the config at the local copy: --cfg-options '
        'model.pretrained=/path/to/weights.pth (or model.backbone.init_cfg.'
        f'checkpoint=... where the config sets init_cfg), or {cache}; '
        'model.pretrained=None trains from scratch')


@contextlib.contextmanager
def reported_errors(cfg: Any) -> Iterator[None]:
    """A failed download of the config's pretrained weights (offline, a
    proxy) as a :class:`ToolError` that says what to do; the data and
    checkpoint checks raise their own typed errors."""
    try:
        yield
    except urllib.error.URLError as exc:
        raise ToolError(download_error_message(cfg, exc)) from exc
