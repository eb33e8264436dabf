"""The package-config fix of :mod:`mmseg_whitebox.compat` (every stack).

``package configs`` (``_base_ = ['mmseg::ccnet/<name>.py']``)
    mmengine finds a package's configs by its distribution name
    (``mmseg`` -> ``mmsegmentation``) and asks whether that is installed
    before it looks in the package's ``.mim`` folder. mmengine 0.10.7 asks
    ``pkg_resources``, which setuptools 81+ no longer ships (every
    ``mmseg::`` base then fails with ``No module named 'pkg_resources'``);
    onedl-mmengine 0.10.12 asks ``importlib.metadata`` for the
    distribution ``mmsegmentation``, which the fork installs as
    ``onedl-mmsegmentation`` ("mmsegmentation is not installed"). The fix
    answers both questions from the importable module (``mmseg``), where
    the configs are: the module's folder. Applied on every stack (it is
    what either mmengine means).
"""
from __future__ import annotations

import importlib.util
import os.path as osp
from typing import Callable, Optional


def _module_folder(package: str) -> Optional[str]:
    """The folder of the module that the distribution ``package`` (as
    mmengine names it: ``mmsegmentation``) installs, or None."""
    from mmengine.config.utils import PKG2PROJECT
    module = {dist: mod for mod, dist in PKG2PROJECT.items()}.get(
        package, package)
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        return None
    if spec is None or spec.origin is None:
        return None
    return osp.dirname(spec.origin)


def _installed(package: str) -> bool:
    """mmengine's ``is_installed`` for a package's configs: whether its
    module is importable."""
    return _module_folder(package) is not None


def _installed_path(original: Callable) -> Callable:
    """mmengine's ``get_installed_path``: the module's folder, else
    mmengine's own answer (``original``)."""

    def get_installed_path(package: str) -> str:
        folder = _module_folder(package)
        return original(package) if folder is None else folder

    get_installed_path.__wrapped__ = original  # type: ignore[attr-defined]
    return get_installed_path


def patch_package_configs() -> bool:
    """Let ``<package>::<config>`` bases resolve through the installed
    module (``is_installed`` and ``get_installed_path`` as mmengine's
    config module sees them). Returns True (applied on every stack)."""
    from mmengine.config import config
    if config.is_installed is not _installed:
        config.is_installed = _installed
        config.get_installed_path = _installed_path(
            config.get_installed_path)
    return True
