"""What must match for a results folder to be resumed.

A sweep or benchmark records its setup in ``results.json``; ``--resume``
continues it only with the same setup. The config is compared by what it
resolves to (inheritance included), not by the path string, so
``configs/x.py`` and ``./configs/x.py`` (or an absolute path, or a copy)
resume the same folder, while a config edited in between does not; the
checkpoint is compared as a file (the same file by any path).
"""
from __future__ import annotations

import hashlib
import json
import os.path as osp
from typing import Any, Dict, Iterable, List, Optional

#: the setup key that holds the digest of the resolved config
DIGEST_KEY = 'config_digest'


def _plain(obj: Any) -> str:
    """A stable stand-in for what JSON cannot hold (classes, functions)."""
    return getattr(obj, '__qualname__', type(obj).__qualname__)


def config_digest(path: str) -> Optional[str]:
    """The SHA-256 of the config file ``path`` as mmengine resolves it
    (``_base_`` files merged; its ``custom_imports`` are not imported:
    that is for :func:`~mmseg_whitebox.engine.config.read_config`, which
    reports a missing package); None when there is no such file."""
    if not osp.isfile(path):
        return None
    from mmengine.config import Config
    resolved = Config.fromfile(path, import_custom_modules=False).to_dict()
    text = json.dumps(resolved, sort_keys=True, default=_plain)
    return hashlib.sha256(text.encode()).hexdigest()


def with_config_digest(setup: Dict[str, Any]) -> Dict[str, Any]:
    """``setup`` with the digest of its ``config`` file added."""
    config = setup.get('config')
    if isinstance(config, str) and DIGEST_KEY not in setup:
        digest = config_digest(config)
        if digest is not None:
            return dict(setup, **{DIGEST_KEY: digest})
    return setup


def _same_file(a: Any, b: Any) -> bool:
    if not (isinstance(a, str) and isinstance(b, str)):
        return a == b
    if osp.normpath(a) == osp.normpath(b):
        return True
    return osp.exists(a) and osp.exists(b) and osp.samefile(a, b)


def setup_differences(old: Dict[str, Any], new: Dict[str, Any],
                      keys: Optional[Iterable[str]] = None) -> List[str]:
    """``'key: X there, Y now'`` for each setting of ``keys`` (default:
    all of ``new``) that differs between a stored setup and a new one."""
    keys = list(new if keys is None else keys)
    differences = []
    for key in keys:
        if key == DIGEST_KEY or key not in old or key not in new:
            continue
        a, b = old[key], new[key]
        if key == 'config' and DIGEST_KEY in old and DIGEST_KEY in new:
            if old[DIGEST_KEY] != new[DIGEST_KEY]:
                differences.append(
                    f'config: {a!r} there, {b!r} now, which resolves to '
                    'other settings')
            continue
        same = _same_file(a, b) if key in ('config', 'checkpoint') \
            else a == b
        if not same:
            differences.append(f'{key}: {a!r} there, {b!r} now')
    return differences
