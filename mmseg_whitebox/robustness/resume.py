"""A results folder that a run fills and a later run resumes, and what
must match for that: the config by what it resolves to (so any path to it,
or a copy, resumes; an edited config does not), the checkpoint as a file,
the other setup values as they are.
"""
from __future__ import annotations

import hashlib
import json
import os.path as osp
from typing import Any, Dict, Iterable, List, Optional, Tuple

from mmseg_whitebox.utils.atomic import read_json, write_json
from mmseg_whitebox.utils.run_lock import RunLock, lock_folder
from mmseg_whitebox.utils.tool_error import InputError, ToolError

DIGEST_KEY = 'config_digest'
RESULTS = 'results.json'


def _plain(obj: Any) -> str:
    """A stable stand-in for what JSON cannot hold (classes, functions)."""
    return getattr(obj, '__qualname__', type(obj).__qualname__)


def config_digest(path: str) -> Optional[str]:
    """The SHA-256 of the config file ``path`` as mmengine resolves it
    (``_base_`` merged, ``custom_imports`` not imported); None when there
    is no such file."""
    if not osp.isfile(path):
        return None
    from mmengine.config import Config
    resolved = Config.fromfile(path, import_custom_modules=False).to_dict()
    text = json.dumps(resolved, sort_keys=True, default=_plain)
    return hashlib.sha256(text.encode()).hexdigest()


def with_config_digest(setup: Dict[str, Any]) -> Dict[str, Any]:
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


class ResultsFolder:
    """The results of a sweep or benchmark: ``data``, saved atomically to
    ``<out_dir>/results.json`` with every update, so an interrupted run
    loses at most the evaluation in progress; the folder is locked while
    the store lives (no ``out_dir``: in memory only). A subclass names
    :attr:`WHAT` (in messages), :attr:`MUST_MATCH` (the setup keys a
    resumed folder must share; None: all) and :meth:`empty`, and writes
    its other files in :meth:`save`."""

    WHAT = 'run'
    MUST_MATCH: Optional[Tuple[str, ...]] = None

    def __init__(self, out_dir: Optional[str] = None,
                 setup: Optional[Dict[str, Any]] = None,
                 resume: bool = False) -> None:
        self.lock = self.check_out_dir(out_dir, resume)
        self.out_dir = out_dir
        self.json_path = osp.join(out_dir, RESULTS) if out_dir else None
        setup = with_config_digest(setup or {}) if out_dir else setup or {}
        setup = json.loads(json.dumps(setup))  # compared as stored
        self.data = dict(self.empty(), setup=setup)
        if self.json_path and osp.isfile(self.json_path):
            data = read_json(self.json_path, f'results of a {self.WHAT}')
            diff = setup_differences(data.get('setup', {}), setup,
                                     self.MUST_MATCH)
            if diff:
                raise InputError(
                    f'cannot resume {out_dir}: it was made with different '
                    'settings (' + '; '.join(diff) + '); resume with those, '
                    'or choose another output folder (--out)')
            self.data = dict(self.empty(), **data)
            self.data['setup'].update(setup)

    @staticmethod
    def empty() -> Dict[str, Any]:
        return dict(setup={})

    @classmethod
    def check_out_dir(cls, out_dir: Optional[str],
                      resume: bool = False) -> Optional[RunLock]:
        """Lock ``out_dir`` and return the lock; raise :class:`ToolError`
        if it holds results and ``resume`` is off, or cannot be written or
        is locked (a tool calls this before building a model)."""
        if not out_dir:
            return None
        lock = lock_folder(out_dir)
        path = osp.join(out_dir, RESULTS)
        if osp.isfile(path):
            if not resume:
                raise ToolError(
                    f'{out_dir} already holds results of a {cls.WHAT}; '
                    'pass --resume (resume=True) to continue them, or '
                    'choose another output folder (--out)')
            read_json(path, f'results of a {cls.WHAT}')  # readable?
        return lock

    @classmethod
    def on_every_rank(cls, out_dir: Optional[str],
                      setup: Optional[Dict[str, Any]] = None,
                      resume: bool = False) -> 'ResultsFolder':
        """The store of a (possibly distributed) run: rank 0 reads and
        writes ``out_dir``; the other ranks get its results (so every rank
        skips the same evaluations, which gather across ranks) and its
        errors."""
        from mmengine.dist import broadcast_object_list, is_main_process
        store, error = cls(None, setup), None
        if is_main_process():
            try:
                store = cls(out_dir, setup, resume)
            except (ToolError, ValueError) as exc:
                error = exc
        shared = [error, store.data]
        broadcast_object_list(shared)
        if shared[0] is not None:
            raise shared[0]
        store.data = shared[1]
        return store

    def save(self) -> None:
        if self.json_path:
            write_json(self.json_path, self.data)
