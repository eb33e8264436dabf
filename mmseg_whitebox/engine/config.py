"""Reading a config file as every tool and library call does: a model
name or a path, checked when it is read, with ``--cfg-options`` merged in
(what a Runner needs on top: :mod:`.runner_config`)."""
from __future__ import annotations

import os.path as osp
from typing import Optional

from mmengine.config import Config

from mmseg_whitebox.utils.input_checks import (check_config_file,
                                               check_config_values)
from mmseg_whitebox.utils.tool_error import ToolError

from .model_index import config_path


def read_config(path: str, cfg_options: Optional[dict] = None) -> Config:
    """The config file ``path`` with ``--cfg-options`` merged in; ``path``
    may also name one of this project's configs (a model name, see
    :func:`~.model_index.config_path`). A missing, empty or unparseable
    file and impossible settings are a :class:`ToolError`
    (:mod:`~mmseg_whitebox.utils.input_checks`).
    (:func:`~.runner_config.runner_config` adds what running a Runner
    needs: work dir, launcher, checkpoint hook.)"""
    if not osp.exists(path):
        try:
            path = config_path(path)
        except FileNotFoundError as exc:
            raise ToolError(f'config file {path!r} does not exist '
                            f'({exc})') from exc
    check_config_file(path)
    cfg = Config.fromfile(path)
    if cfg_options:
        cfg.merge_from_dict(cfg_options)
    check_config_values(cfg)
    return cfg
