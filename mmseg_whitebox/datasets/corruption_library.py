"""The ``imagecorruptions`` library, made to import on current NumPy,
scikit-image and setuptools (the adaptations are listed in
:mod:`mmseg_whitebox.robustness.corruptions`), and the names and severities
it offers."""
from __future__ import annotations

import contextlib
import functools
import importlib.util
import inspect
import os.path as osp
import re
import sys
import types
import warnings
from typing import Any, Iterator, List, Sequence

import numpy as np

from mmseg_whitebox.utils.tool_error import ToolError, InputError

SEVERITIES = (1, 2, 3, 4, 5)
#: corruption groups of ``imagecorruptions.get_corruption_names``; the
#: 15 ImageNet-C benchmark corruptions are ``benchmark``
GROUPS = ('benchmark', 'all', 'noise', 'blur', 'weather', 'digital',
          'validation')
INSTALL_HINT = ("install the corruptions extra: pip install -e "
                "'.[corruptions]' (or pip install imagecorruptions==1.1.2 "
                "scikit-image)")


# -- the library and its adapter -------------------------------------------
class _Namespace(types.ModuleType):
    """A module seen through a few replaced attributes (the rest are the
    module's own): lets one module call a renamed API without patching the
    library for everyone."""

    def __init__(self, base: types.ModuleType, **overrides: Any) -> None:
        super().__init__(base.__name__, getattr(base, '__doc__', None))
        self._base = base
        self.__dict__.update(overrides)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._base, name)


def _resource_filename(package: str, name: str) -> str:
    """``pkg_resources.resource_filename`` for a file inside a package."""
    return osp.normpath(osp.join(osp.dirname(sys.modules[package].__file__),
                                 name))


@contextlib.contextmanager
def _pkg_resources_fallback() -> Iterator[None]:
    """Provide ``pkg_resources.resource_filename`` while the library is
    imported when setuptools no longer ships ``pkg_resources``; removed
    again afterwards."""
    if importlib.util.find_spec('pkg_resources') is not None:
        yield
        return
    stub = types.ModuleType('pkg_resources')
    stub.resource_filename = _resource_filename
    sys.modules['pkg_resources'] = stub
    try:
        yield
    finally:
        if sys.modules.get('pkg_resources') is stub:
            del sys.modules['pkg_resources']


def _adapt(module: types.ModuleType) -> None:
    """Map the removed APIs ``imagecorruptions.corruptions`` calls to their
    replacements in that module's namespace (see module docstring)."""
    import skimage
    import skimage.filters
    import skimage.util

    gaussian = skimage.filters.gaussian
    if 'multichannel' not in inspect.signature(gaussian).parameters:

        @functools.wraps(gaussian)
        def gaussian_compat(image, *args, multichannel=None, **kwargs):
            if multichannel is not None:
                kwargs.setdefault('channel_axis',
                                  -1 if multichannel else None)
            return gaussian(image, *args, **kwargs)

        module.gaussian = gaussian_compat
    if not hasattr(np, 'float_'):
        module.np = _Namespace(np, float_=np.float64)
    random_noise = skimage.util.random_noise
    params = inspect.signature(random_noise).parameters
    key = 'rng' if 'rng' in params else 'seed' if 'seed' in params else None
    if key is not None:

        @functools.wraps(random_noise)
        def seeded_random_noise(image, *args, **kwargs):
            kwargs.setdefault(key, int(np.random.randint(2**31 - 1)))
            return random_noise(image, *args, **kwargs)

        module.sk = _Namespace(skimage, util=_Namespace(
            skimage.util, random_noise=seeded_random_noise))


@functools.lru_cache(maxsize=None)
def load_imagecorruptions() -> types.ModuleType:
    """The ``imagecorruptions`` package, adapted to this environment.

    Raises:
        ToolError: with install
            instructions, when it is missing.
    """
    try:
        with warnings.catch_warnings():
            warnings.simplefilter('ignore')  # deprecated scipy namespaces
            with _pkg_resources_fallback():
                import imagecorruptions
                from imagecorruptions import corruptions
    except ImportError as exc:
        raise ToolError(f'image corruptions need the '
                        f'imagecorruptions package ({exc}); '
                        f'{INSTALL_HINT}') from exc
    _adapt(corruptions)
    return imagecorruptions


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
    """Corruption names (and group names, expanded) in order, without
    repeats; ``option``: what the errors call the setting (e.g.
    ``--corruptions``).

    Raises:
        InputError: naming the unknown ones and listing the valid
            names and groups.
    """
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
    """Severities as sorted unique ints in 1..5, from ints or their text
    (as a command line gives them); ``option``: what the errors call the
    setting (e.g. ``--severities``).

    Raises:
        InputError: for anything else.
    """
    values = [_severity(s) for s in severities]
    if None in values or not values:
        raise InputError(
            f'{option} must be integers in 1..5 (ImageNet-C levels), got '
            f'{" ".join(map(str, severities)) or "none"}')
    return sorted(set(values))
