"""Writing result files so that a crash never leaves half of one (every
file a tool writes goes through :func:`atomic_path`), and reading them
back with an error that names a damaged one."""
from __future__ import annotations

import contextlib
import csv
import json
import os
import os.path as osp
import re
import tempfile
from typing import Any, Dict, Iterator, List, Optional, Sequence

from mmseg_whitebox.utils.tool_error import InputError


@contextlib.contextmanager
def atomic_path(path: str) -> Iterator[str]:
    """A temporary path (same folder, same suffix) to write ``path``'s new
    content to; it replaces ``path`` when the block ends without an error
    and is removed when it raises."""
    folder = osp.dirname(osp.abspath(path))
    os.makedirs(folder, exist_ok=True)
    name, suffix = osp.splitext(osp.basename(path))
    handle, tmp = tempfile.mkstemp(prefix=f'.{name}.', suffix=suffix,
                                   dir=folder)
    os.close(handle)
    try:
        yield tmp
        if osp.exists(path):  # keep the old file's permissions
            os.chmod(tmp, os.stat(path).st_mode & 0o7777)
        else:
            umask = os.umask(0)
            os.umask(umask)
            os.chmod(tmp, 0o666 & ~umask)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.remove(tmp)
        raise


def stale_temporaries(folder: str, suffix: str,
                      target: Optional[str] = None) -> List[str]:
    """The temporary files a killed :func:`atomic_path` left in ``folder``
    for targets ending in ``suffix`` (of ``target``, without its suffix,
    if given). Only the holder of the folder's lock may remove them."""
    stem = '.+' if target is None else re.escape(target)
    pattern = re.compile(r'\.' + stem + r'\.[a-z0-9_]{8}' + re.escape(suffix)
                         + '$')
    if not osp.isdir(folder):
        return []
    return sorted(osp.join(folder, name) for name in os.listdir(folder)
                  if pattern.match(name))


def check_not_input(output: str, inputs: Sequence[str],
                    option: str = 'the output') -> None:
    """Raise :class:`InputError` if ``output`` is one of ``inputs``
    (the same file by another path included)."""
    for source in inputs:
        if not source:
            continue
        same = osp.abspath(source) == osp.abspath(output) or (
            osp.exists(source) and osp.exists(output)
            and osp.samefile(source, output))
        if same:
            raise InputError(
                f'{option} {output!r} is the input {source!r}: writing it '
                'would destroy the input. Write to a new file (and rename '
                'it afterwards if you want to replace the input)')


def save_torch(obj: Any, path: str) -> None:
    """``torch.save(obj, path)``, atomically."""
    import torch
    with atomic_path(path) as tmp:
        torch.save(obj, tmp)


@contextlib.contextmanager
def atomic_open(path: str, mode: str = 'w', **kwargs: Any) -> Iterator[Any]:
    """``open(path, mode)`` through :func:`atomic_path`."""
    with atomic_path(path) as tmp:
        with open(tmp, mode, **kwargs) as f:
            yield f


def write_json(path: str, obj: Any, indent: int = 1) -> None:
    """``obj`` as JSON in ``path``, atomically."""
    with atomic_open(path) as f:
        json.dump(obj, f, indent=indent)


def write_csv(path: str, fields: Sequence[str],
              rows: List[Dict[str, Any]]) -> None:
    """``rows`` under the header ``fields`` in ``path``, atomically
    (other keys of the rows are left out)."""
    with atomic_open(path, newline='') as f:
        writer = csv.DictWriter(f, fieldnames=list(fields),
                                extrasaction='ignore')
        writer.writeheader()
        writer.writerows(rows)


def write_text(path: str, text: str) -> None:
    """``text`` in ``path``, atomically."""
    with atomic_open(path, encoding='utf-8') as f:
        f.write(text)


def save_figure(fig: Any, path: str, **kwargs: Any) -> None:
    """``fig.savefig(path, **kwargs)``, atomically (the format from
    ``path``'s suffix)."""
    with atomic_path(path) as tmp:
        fig.savefig(tmp, **kwargs)


def read_json(path: str, what: str = 'results',
              advice: str = 'Restore it from a copy, or move it away and '
              'start again without --resume') -> Any:
    """The JSON in ``path``; a damaged file is an :class:`InputError`
    naming it and ending with ``advice``."""
    try:
        with open(path, encoding='utf-8') as f:
            return json.load(f)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise InputError(
            f'{path!r} is damaged ({exc}): it does not hold complete {what} '
            f'(cut off by a crash or a full disk, or edited). {advice}') \
            from exc
