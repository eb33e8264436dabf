"""Which OpenMMLab stack is installed (``compat.STATUS['stack']``): the
distributions of each stack and their versions. The import shims ask it
whether mmseg is the onedl fork (whose mmseg guards its ``mmcv.ops``
imports)."""
from __future__ import annotations

from typing import Any, Dict


#: OpenMMLab distributions per stack, ``stack: (mmseg, mmengine, mmcv
#: choices)``; the first stack whose mmseg distribution is installed wins
STACKS = {
    'onedl': ('onedl-mmsegmentation', 'onedl-mmengine', ('onedl-mmcv', )),
    'default': ('mmsegmentation', 'mmengine', ('mmcv-lite', 'mmcv')),
}


def _dist_version(dist: str) -> Any:
    """The installed version of distribution ``dist``, or None."""
    from importlib import metadata
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def stack() -> Dict[str, str]:
    """Which OpenMMLab stack is installed: ``{'name': 'default' | 'onedl' |
    'unknown', distribution: version, ...}`` (torch and numpy too)."""
    found: Dict[str, str] = {'name': 'unknown'}
    for name, (mmseg_dist, mmengine_dist, mmcv_dists) in STACKS.items():
        if _dist_version(mmseg_dist) is None:
            continue
        found['name'] = name
        for dist in (mmseg_dist, mmengine_dist) + mmcv_dists:
            if _dist_version(dist) is not None:
                found[dist] = _dist_version(dist)
        break
    for dist in ('torch', 'numpy'):
        found[dist] = _dist_version(dist)
    return found
