"""Model names for ``MMSegInferencer(model=<name>)``.

mmengine's ``BaseInferencer`` resolves a model name by reading the
``model-index.yml`` and ``metafile.yaml`` files of the scope's package
(mmseg's ``.mim`` folder), so a plugin's configs are never found by name.
:func:`register_model_index` (called by ``import mmseg_whitebox``) makes
that lookup also read this project's ``configs/*/metafile.yaml``, after
mmseg's own: mmseg's names keep their meaning, and the four Segmenter
configs whose names mmseg already uses are reachable under their
``mmseg_whitebox:`` alias.
"""
from __future__ import annotations

import glob
import os.path as osp
from typing import Dict, Iterator, List, Optional

#: the alias prefix of project models whose name mmseg already uses
ALIAS_PREFIX = 'mmseg_whitebox:'

_PACKAGE_DIR = osp.dirname(osp.dirname(osp.abspath(__file__)))


def configs_root() -> Optional[str]:
    """The folder holding ``configs/``: the checkout (editable install)
    or the package's ``.mim`` folder (a packaged install), as mmengine
    looks for an OpenMMLab package's configs."""
    for root in (osp.dirname(_PACKAGE_DIR), osp.join(_PACKAGE_DIR, '.mim')):
        if glob.glob(osp.join(root, 'configs', '*', 'metafile.yaml')):
            return root
    return None


def metafiles() -> List[str]:
    """This project's ``configs/*/metafile.yaml`` files, sorted."""
    root = configs_root()
    if root is None:
        return []
    return sorted(glob.glob(osp.join(root, 'configs', '*', 'metafile.yaml')))


def project_models() -> Iterator[Dict]:
    """The ``Models`` entries of this project's metafiles, with ``Config``
    made absolute (mmengine joins it to mmseg's folder, which keeps an
    absolute path as it is)."""
    from mmengine.fileio import load
    root = configs_root()
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


def register_model_index() -> bool:
    """Let mmengine's model-name lookup for the ``mmseg`` scope also read
    this project's metafiles. Idempotent; returns whether it patched."""
    from mmengine.infer.infer import BaseInferencer

    current = BaseInferencer.__dict__['_get_models_from_metafile']
    original = getattr(current, '__func__', current)
    if getattr(original, '_mmseg_whitebox', False):
        return False

    def _get_models_from_metafile(dir: str):
        yield from original(dir)
        if _is_mmseg_dir(dir):
            yield from project_models()

    _get_models_from_metafile._mmseg_whitebox = True
    _get_models_from_metafile.__doc__ = original.__doc__
    BaseInferencer._get_models_from_metafile = staticmethod(
        _get_models_from_metafile)
    return True


def _is_mmseg_dir(dir: str) -> bool:
    from mmengine.infer.infer import BaseInferencer
    try:
        mmseg_dir = BaseInferencer._get_repo_or_mim_dir('mmseg')
    except Exception:  # mmseg without its .mim folder: nothing to add to
        return False
    return osp.realpath(dir) == osp.realpath(mmseg_dir)
