"""The ``imagecorruptions`` fix of :mod:`mmseg_whitebox.compat`, applied
when the corruptions are first used (imagecorruptions 1.1.2, its last
release; checked with NumPy 1.26 and 2.4, scikit-image 0.25 and 0.26,
setuptools 80 and 84).

*What it patches.* While the library is imported, a stand-in
``pkg_resources`` module in ``sys.modules`` where setuptools no longer
ships one (removed again afterwards); then the names ``gaussian``, ``np``
and ``sk`` in ``imagecorruptions.corruptions``, that module's namespace
only (nothing global).

*Why.* The library calls three APIs that newer libraries removed:
``pkg_resources.resource_filename`` at import (gone from setuptools 81+;
the frost images are found next to the module instead),
``skimage.filters.gaussian(multichannel=True)`` (scikit-image 0.19+:
``channel_axis=-1``, the fix upstream merged but never released) and
``numpy.float_`` (NumPy 2: ``numpy.float64``). And scikit-image's
``random_noise`` (impulse noise) no longer follows ``numpy.random.seed``,
so it gets a seed drawn from the seeded global generator: the corruptions
stay reproducible.
"""
from __future__ import annotations

import contextlib
import functools
import importlib.util
import inspect
import os.path as osp
import sys
import types
import warnings
from typing import Any, Iterator

import numpy as np


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
    """Provide ``pkg_resources.resource_filename`` inside the block when
    setuptools no longer ships ``pkg_resources``."""
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
    replacements in that module's namespace (module docstring)."""
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


def import_imagecorruptions() -> types.ModuleType:
    """``import imagecorruptions``, adapted (module docstring); an
    ImportError where it is missing."""
    with warnings.catch_warnings():
        warnings.simplefilter('ignore')  # deprecated scipy namespaces
        with _pkg_resources_fallback():
            import imagecorruptions
            from imagecorruptions import corruptions
    _adapt(corruptions)
    return imagecorruptions
