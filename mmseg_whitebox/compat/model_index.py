"""The model-name fix of :mod:`mmseg_whitebox.compat`, applied by
``register_model_index`` when ``mmseg_whitebox`` is imported (mmengine
0.10.7 and onedl-mmengine 0.10.12 checked).

*What it patches.* ``mmengine.infer.infer.BaseInferencer.
_get_models_from_metafile``, the static method through which an
inferencer (``MMSegInferencer(model=<name>)``) reads the model entries of
its scope's package (mmseg's ``model-index.yml`` and metafiles).

*Why.* That lookup reads only the scope's own package, and mmengine has
no public place to add entries: a plugin's configs are never found by
name.

*What it does.* :func:`add_scope_models`: after mmseg's own entries (so
mmseg's names keep their meaning), the lookup of mmseg's folder also
yields the entries the caller gives.
"""
from __future__ import annotations

import os.path as osp
from typing import Callable, Dict, Iterable


def _is_scope_dir(dir: str, scope: str) -> bool:
    """Whether ``dir`` is the package folder of ``scope`` (its ``.mim``
    folder or checkout) that mmengine reads the model entries from."""
    from mmengine.infer.infer import BaseInferencer
    try:
        scope_dir = BaseInferencer._get_repo_or_mim_dir(scope)
    except Exception:  # the package without its .mim folder: nothing to add
        return False
    return osp.realpath(dir) == osp.realpath(scope_dir)


def add_scope_models(models: Callable[[], Iterable[Dict]],
                     scope: str = 'mmseg') -> bool:
    """Let mmengine's model-name lookup for ``scope`` also read the
    entries ``models()`` yields. Idempotent; returns whether it patched."""
    from mmengine.infer.infer import BaseInferencer
    current = BaseInferencer.__dict__['_get_models_from_metafile']
    original = getattr(current, '__func__', current)
    if getattr(original, '_mmseg_whitebox', False):
        return False

    def _get_models_from_metafile(dir: str):
        yield from original(dir)
        if _is_scope_dir(dir, scope):
            yield from models()

    _get_models_from_metafile._mmseg_whitebox = True
    _get_models_from_metafile.__doc__ = original.__doc__
    BaseInferencer._get_models_from_metafile = staticmethod(
        _get_models_from_metafile)
    return True
