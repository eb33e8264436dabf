"""The ``imagecorruptions`` library, made to import on current NumPy,
scikit-image and setuptools (:mod:`mmseg_whitebox.compat.imagecorruptions`
lists the adaptations), and the names and severities it offers."""
from __future__ import annotations

import functools
import re
import types
from typing import Any, List, Sequence

import numpy as np

from mmseg_whitebox.compat import import_imagecorruptions
from mmseg_whitebox.utils.tool_error import ToolError, InputError

SEVERITIES = (1, 2, 3, 4, 5)
#: corruption groups of ``imagecorruptions.get_corruption_names``; the
#: 15 ImageNet-C benchmark corruptions are ``benchmark``
GROUPS = ('benchmark', 'all', 'noise', 'blur', 'weather', 'digital',
          'validation')
INSTALL_HINT = ("install the corruptions extra: pip install -e "
                "'.[corruptions]' (or pip install imagecorruptions==1.1.2 "
                "scikit-image)")


# -- the library ------------------------------------------------------------
@functools.lru_cache(maxsize=None)
def load_imagecorruptions() -> types.ModuleType:
    """The ``imagecorruptions`` package, adapted to this environment; a
    :class:`ToolError` with install instructions when it is missing."""
    try:
        return import_imagecorruptions()
    except ImportError as exc:
        raise ToolError(f'image corruptions need the '
                        f'imagecorruptions package ({exc}); '
                        f'{INSTALL_HINT}') from exc


def corruption_names(group: str = 'all') -> List[str]:
    """The corruption names of a group of :data:`GROUPS` (``benchmark``:
    the 15 of the ImageNet-C benchmark; ``validation``: its 4 held-out
    ones; ``all``: both)."""
    if group not in GROUPS:
        raise InputError(f'unknown corruption group {group!r}; groups: '
                         + ', '.join(GROUPS))
    lib = load_imagecorruptions()
    return list(lib.get_corruption_names(
        'common' if group == 'benchmark' else group))


def resolve_corruptions(names: Sequence[str],
                        option: str = 'corruptions') -> List[str]:
    """Corruption names (group names expanded) in order, without repeats;
    an :class:`InputError` names unknown ones (``option``: the setting)."""
    valid = corruption_names('all')
    out: List[str] = []
    unknown = []
    for name in names:
        if name in GROUPS:
            expanded = corruption_names(name)
        elif name in valid:
            expanded = [name]
        else:
            unknown.append(name)
            continue
        out += [n for n in expanded if n not in out]
    if unknown:
        raise InputError(
            f'{option}: unknown corruption(s): '
            f'{", ".join(map(repr, unknown))}; valid names: '
            f'{", ".join(valid)}; or groups: {", ".join(GROUPS)}')
    if not out:
        raise InputError(f'{option}: no corruptions given')
    return out


def _severity(value: Any) -> Any:
    """An ImageNet-C severity from an int or its text; None otherwise."""
    if isinstance(value, str) and re.fullmatch(r'\s*\d+\s*', value):
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        return None
    return int(value) if value in SEVERITIES else None


def check_severities(severities: Sequence[Any],
                     option: str = 'severities') -> List[int]:
    """Severities (ints or their text) as sorted unique ints in 1..5; an
    :class:`InputError` for anything else (``option``: the setting)."""
    values = [_severity(s) for s in severities]
    if None in values or not values:
        raise InputError(
            f'{option} must be integers in 1..5 (ImageNet-C levels), got '
            f'{" ".join(map(str, severities)) or "none"}')
    return sorted(set(values))
