"""Downloads of checkpoint URLs into torch's hub cache, each process for
itself (mmengine downloads on rank 0 while the others wait at a barrier,
until the process group's timeout if it fails). The processes of a
machine take turns through a lock beside the cached file; one that waited
while another failed repeats that failure rather than wait for another
network timeout.
"""
from __future__ import annotations

import os
import os.path as osp
import socket
import sys
import time
import urllib.error
import urllib.parse
from typing import Callable, Optional

from mmseg_whitebox.utils.tool_error import ToolError

#: the seconds a download may wait for the server at each step
DOWNLOAD_TIMEOUT = 60
#: the suffix of the note a failed download leaves beside the cached file
FAILED_SUFFIX = '.failed'
#: the schemes fetched here (others are left to mmengine's loaders)
URL_SCHEMES = ('http://', 'https://')


def hub_cache_path(url: str) -> str:
    """Where torch's ``load_state_dict_from_url`` (and so mmengine's
    ``load_from_http``) keeps the file of ``url``."""
    import torch
    name = osp.basename(urllib.parse.urlparse(url).path)
    return osp.join(torch.hub.get_dir(), 'checkpoints', name)


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
    """The cached file of a checkpoint URL (``key`` names it in the error),
    fetched by :func:`fetch_url`; ``checkpoint`` itself when it is not an
    http(s) URL. Every process of a distributed run calls it."""
    if not checkpoint or not checkpoint.startswith(URL_SCHEMES):
        return checkpoint
    return fetch_url(checkpoint, lambda exc, cached: checkpoint_download_error(
        key, checkpoint, exc, cached))


def fetch_url(url: str,
              failure: Callable[[BaseException, str], str]) -> str:
    """The path of ``url``'s file in torch's hub cache, downloaded if
    needed. A failed download raises a :class:`ToolError` with
    ``failure(exception, cached path)``, also left beside the cached file
    for the processes that waited."""
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
    """Copy ``url`` to ``path`` with torch's downloader, waiting at most
    :data:`DOWNLOAD_TIMEOUT` seconds per step (torch sets no limit)."""
    import torch
    print(f'downloading {url} to {path}', file=sys.stderr)
    timeout = socket.getdefaulttimeout()
    socket.setdefaulttimeout(DOWNLOAD_TIMEOUT)
    try:
        torch.hub.download_url_to_file(url, path, progress=False)
    finally:
        socket.setdefaulttimeout(timeout)
