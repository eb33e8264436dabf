"""Optional packages a config may need (mmdet, mmpretrain, mmcv's compiled
ops): their absence is an ``InputError`` naming the package and how to
install it on this stack, never an internal error."""
from __future__ import annotations

import importlib.util
import inspect
import sys
from typing import Optional

from mmseg_whitebox.compat import STATUS, is_standin
from mmseg_whitebox.utils.tool_error import InputError

#: optional packages a config may need: the module whose absence shows
#: that the package is missing -> (what it is, how to install it on the
#: default stack, on the onedl stack)
OPTIONAL_PACKAGES = {
    'mmdet': ('MMDetection (mmdet)',
              "run `pip install mmdet` (its models need mmcv's compiled "
              'ops too)',
              'run `pip install onedl-mmdetection` (its models need '
              "onedl-mmcv's compiled ops too)"),
    'mmpretrain': ('MMPretrain (mmpretrain)', 'run `pip install mmpretrain`',
                   'run `pip install onedl-mmpretrain`'),
    'mmcv._ext': (
        "mmcv's compiled ops",
        'install a full mmcv built with its CUDA/C++ ops (mmcv, not '
        "mmcv-lite); see mmcv's install guide",
        'install onedl-mmcv built with its CUDA/C++ ops; see its install '
        'guide'),
}
#: the compiled mmcv ops a class of mmseg's needs when it is built:
#: CCHead's and PSAHead's; the onedl fork's mmseg also finds no
#: point_sample (PointHead, SAN) without them
COMPILED_OPS_NEEDED = ('CrissCrossAttention', 'PSAMask', 'point_sample')


def missing_package_error(module: Optional[str],
                          needed_by: str) -> Optional[InputError]:
    """The error saying ``needed_by`` (a config setting) needs the optional
    package of ``module`` and how to install it; None when ``module`` is
    installed or not an optional package's (any other import error stays
    a bug)."""
    if module not in OPTIONAL_PACKAGES or module in sys.modules:
        return None
    try:
        if importlib.util.find_spec(module) is not None:
            return None
    except (ImportError, ValueError):
        pass  # its parent package is missing too
    what, default, onedl = OPTIONAL_PACKAGES[module]
    onedl_stack = STATUS.get('stack', {}).get('name') == 'onedl'
    return InputError(
        f'{needed_by} needs {what}, which this environment lacks; to use '
        f'this config, {onedl if onedl_stack else default}')


def raise_if_missing_package(exc: ImportError, needed_by: str) -> None:
    """Raise :func:`missing_package_error` when the module ``exc`` (or the
    error it was raised while handling, as mmengine's "Failed to import")
    did not find is an optional package's; else return, for the caller to
    re-raise ``exc``."""
    cause = exc if exc.name else exc.__context__
    error = missing_package_error(getattr(cause, 'name', None), needed_by)
    if error is not None:
        raise error from exc


def missing_compiled_op(cls: type) -> Optional[str]:
    """The compiled mmcv op (:data:`COMPILED_OPS_NEEDED`) the module of
    ``cls`` or of a base class lacks (bound to None or to compat's
    stand-in), else None."""
    for klass in inspect.getmro(cls):
        names = getattr(sys.modules.get(klass.__module__), '__dict__', {})
        for op in COMPILED_OPS_NEEDED:
            if op in names and (names[op] is None or is_standin(names[op])):
                return op
    return None
