"""Model names for ``MMSegInferencer(model=<name>)``.

mmengine resolves a model name from the metafiles of the scope's package
(mmseg's), so a plugin's configs are never found by name.
:func:`register_model_index` (called by ``import mmseg_whitebox``) makes
that lookup also read this project's ``configs/*/metafile.yaml``, after
mmseg's own: names mmseg already uses are reachable under their
``mmseg_whitebox:`` alias. :func:`config_path` turns a name into the
config file, for what takes a path. The configs and tools are in the
checkout, or in a wheel's ``.mim`` folder (see ``setup.py``).
"""
from __future__ import annotations

import difflib
import glob
import os.path as osp
from typing import Dict, Iterator, List, Optional

from mmseg_whitebox.compat import add_scope_models

_PACKAGE_DIR = osp.dirname(osp.dirname(osp.abspath(__file__)))


def resources_root() -> Optional[str]:
    """The folder holding ``configs/`` and ``tools/``: the checkout (an
    editable install, so that no copy shadows the files being edited) or
    the package's ``.mim`` folder (a wheel)."""
    checkout = osp.dirname(_PACKAGE_DIR)
    for root, marker in ((checkout, 'pyproject.toml'),
                         (osp.join(_PACKAGE_DIR, '.mim'), 'model-index.yml')):
        if osp.isfile(osp.join(root, marker)) and glob.glob(
                osp.join(root, 'configs', '*', 'metafile.yaml')):
            return root
    return None


def metafiles() -> List[str]:
    """This project's ``configs/*/metafile.yaml`` files, sorted."""
    root = resources_root()
    if root is None:
        return []
    return sorted(glob.glob(osp.join(root, 'configs', '*', 'metafile.yaml')))


def project_models() -> Iterator[Dict]:
    """The ``Models`` entries of this project's metafiles, ``Config`` made
    absolute (mmengine would join it to mmseg's folder)."""
    from mmengine.fileio import load
    root = resources_root()
    for path in metafiles():
        for model in load(path).get('Models', []) or []:
            model = dict(model)
            model['Config'] = osp.join(root, model['Config'])
            yield model


def find_model(name: str) -> Optional[Dict]:
    """The project's metafile entry named (or aliased) ``name``."""
    name = name.lower()
    for model in project_models():
        aliases = model.get('Alias') or []
        if isinstance(aliases, str):
            aliases = [aliases]
        if name == model['Name'].lower() or name in (
                a.lower() for a in aliases):
            return model
    return None


def config_path(name: str) -> str:
    """The config file ``name`` means: an existing file (as is), a model
    name or alias of this project's metafiles, a config file name with or
    without ``.py``, or a path relative to ``configs/``, optionally after
    ``mmseg_whitebox::``. Raises FileNotFoundError naming close matches."""
    if osp.isfile(name):
        return name
    root = resources_root()
    if root is None:
        raise FileNotFoundError(
            f'no config {name!r}: this mmseg_whitebox install has no '
            'configs (neither a checkout nor a wheel\'s .mim folder)')
    configs = osp.join(root, 'configs')
    relative = name.split('::', 1)[1] if '::' in name else name
    if relative.startswith('configs/'):
        relative = relative[len('configs/'):]
    candidates = [osp.join(configs, relative),
                  osp.join(configs, relative + '.py')]
    model = find_model(name)
    if model is not None:
        candidates.insert(0, model['Config'])
    for path in candidates:
        if osp.isfile(path):
            return osp.abspath(path)
    stem = osp.splitext(osp.basename(relative))[0]
    by_stem = {osp.splitext(osp.basename(p))[0]: p
               for p in glob.glob(osp.join(configs, '*', '*.py'))
               if osp.basename(osp.dirname(p)) != '_base_'}
    if stem in by_stem:
        return osp.abspath(by_stem[stem])
    close = difflib.get_close_matches(stem, list(by_stem), n=3)
    hint = f'; close: {", ".join(close)}' if close else ''
    raise FileNotFoundError(f'no config named {name!r} in {configs}{hint}')


def tool_path(relative: str) -> str:
    """The file of ``tools/<relative>`` (checkout or the wheel's ``.mim``)."""
    root = resources_root()
    path = osp.join(root, 'tools', relative) if root else None
    if path is None or not osp.isfile(path):
        raise FileNotFoundError(
            f'tools/{relative} is not part of this mmseg_whitebox install')
    return path


def register_model_index() -> bool:
    """Let mmengine's model-name lookup for ``mmseg`` also read this
    project's metafiles. Idempotent; returns whether it patched."""
    return add_scope_models(project_models)
