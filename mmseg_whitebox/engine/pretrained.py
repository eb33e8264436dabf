"""The pretrained weights a config starts from, made available to every
process before the Runner is built: a local file must exist, a URL's file
is fetched by each process itself
(:func:`~mmseg_whitebox.utils.downloads.fetch_url`)."""
from __future__ import annotations

import contextlib
import os.path as osp
import urllib.error
from typing import Any, Dict, Iterator, List, Optional, Tuple

from mmseg_whitebox.utils.downloads import URL_SCHEMES, fetch_url
from mmseg_whitebox.utils.tool_error import ToolError
from .config_checks import config_dicts

#: the types of ``init_cfg`` that load a checkpoint
PRETRAINED_TYPES = ('Pretrained', 'Pretrained_Part')


def pretrained_checkpoints(cfg: Any) -> List[Tuple[str, str]]:
    """``(key, checkpoint)`` for every pretrained checkpoint the model of
    ``cfg`` loads at initialisation: ``model.pretrained`` (and a
    component's ``pretrained``) and every ``init_cfg`` of type
    ``Pretrained`` / ``Pretrained_Part`` (``key`` is where to set another
    one with ``--cfg-options``)."""
    found: Dict[str, str] = {}  # checkpoint -> its first key
    for key, node in config_dicts(cfg.get('model', None), 'model'):
        pretrained = node.get('pretrained', None)
        if isinstance(pretrained, str) and pretrained:
            found.setdefault(pretrained, f'{key}.pretrained')
        if node.get('type') in PRETRAINED_TYPES and node.get('checkpoint'):
            found.setdefault(node['checkpoint'], f'{key}.checkpoint')
    return [(key, checkpoint) for checkpoint, key in found.items()]


def fetch_pretrained_weights(cfg: Any) -> None:
    """Make every pretrained checkpoint of ``cfg`` available to this
    process, or raise a :class:`ToolError` naming the key and what to do.
    Every process of a distributed run calls it."""
    for key, checkpoint in pretrained_checkpoints(cfg):
        if checkpoint.startswith(URL_SCHEMES):
            fetch_url(checkpoint, lambda exc, cached:
                      download_error_message(cfg, exc, cached))
        elif '://' not in checkpoint and \
                not osp.isfile(osp.expanduser(checkpoint)):
            raise ToolError(
                f'{key}: pretrained weights {checkpoint!r} do not exist; '
                f'give the path of the file (--cfg-options {key}=/path/to/'
                'weights.pth: a converted checkpoint, e.g. written by '
                'tools/model_converters/timm2mmseg.py or whitebox2mmseg.py), '
                f'or train from scratch with --cfg-options {key}=None')


def download_error_message(cfg: Any, exc: BaseException,
                           cached: Optional[str] = None) -> str:
    """What to say when fetching a config's pretrained weights failed
    (``cached``: where torch's hub cache keeps the file, if known)."""
    urls = [c for _, c in pretrained_checkpoints(cfg)] + \
        [cfg.get('load_from', None) or '']
    urls = [url for url in urls if url.startswith(URL_SCHEMES)]
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
    """A failed download of the config's pretrained weights as a
    :class:`ToolError` that says what to do."""
    try:
        yield
    except urllib.error.URLError as exc:
        raise ToolError(download_error_message(cfg, exc)) from exc
