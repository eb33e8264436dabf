"""Reading a config file as every tool and library call does: a model
name or a path, checked when it is read, with ``--cfg-options`` merged in
(what a Runner needs on top: :mod:`.runner_config`)."""
from __future__ import annotations

import os.path as osp
from typing import Optional

from mmengine.config import Config

from mmseg_whitebox.utils.tool_error import ToolError

from .config_checks import (check_config_files, check_config_values,
                            check_model_types, check_package_types)
from .optional_packages import raise_if_missing_package
from .model_index import config_path


def read_config(path: str, cfg_options: Optional[dict] = None) -> Config:
    """The config file ``path`` with ``--cfg-options`` merged in; ``path``
    may also name one of this project's configs (a model name, see
    :func:`~.model_index.config_path`). A missing, empty or unparseable
    file (its ``_base_`` files included), unknown types, settings a class
    does not take and impossible settings are a :class:`ToolError`
    (:mod:`.config_checks`), raised here, before anything is built. The
    config's ``custom_imports`` are imported here too, after the config
    is checked: an error in one of those modules is the module's, not the
    config's, unless it is an optional package this environment lacks
    (mmdet, mmpretrain, mmcv's compiled ops): that is an ``InputError``
    naming the package and how to install it, as is a type of such a
    package (``mmdet.PixelDecoder``) or a class that needs compiled ops
    (:func:`~.optional_packages.missing_package_error`).
    (:func:`~.runner_config.runner_config` adds what running a Runner
    needs: work dir, launcher, checkpoint hook.)"""
    if not osp.exists(path):
        try:
            path = config_path(path)
        except FileNotFoundError as exc:
            raise ToolError(f'config file {path!r} does not exist '
                            f'({exc})') from exc
    check_config_files(path)
    cfg = Config.fromfile(path, import_custom_modules=False)
    if cfg_options:
        cfg.merge_from_dict(cfg_options)
    check_config_values(cfg)
    check_package_types(cfg)
    if cfg.get('custom_imports', None):
        from mmengine.utils import import_modules_from_strings
        try:
            import_modules_from_strings(**cfg['custom_imports'])
        except ImportError as exc:
            raise_if_missing_package(
                exc,
                f"custom_imports {cfg['custom_imports'].get('imports')!r}")
            raise
    check_model_types(cfg)
    return cfg
