"""Reading a config (a model name or a path) as every tool and library call
does: checked, with ``--cfg-options`` merged in."""
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
    """The config ``path`` (or model name,
    :func:`~.model_index.config_path`) with ``cfg_options`` merged in,
    checked by :mod:`.config_checks` before anything is built (a
    :class:`ToolError`). Its ``custom_imports`` are imported here; their
    errors stay theirs, unless an optional package is missing
    (:func:`~.optional_packages.raise_if_missing_package`)."""
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
