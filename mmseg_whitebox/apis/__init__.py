"""Inference helpers on top of ``mmseg.apis``: the image demo (overlays
of single images or folders), the model-name index that lets
``MMSegInferencer(model=<config name>)`` find this project's configs, and
:func:`config_path` / :func:`read_config` for what takes a config file
(``init_model``, the tools).
(``image_demo`` is imported on use: it loads mmseg's visualizer.)"""
from mmseg_whitebox.apis.model_index import (config_path, find_model,
                                             project_models, read_config,
                                             register_model_index,
                                             resources_root, tool_path)

__all__ = [
    'config_path', 'find_model', 'project_models', 'read_config',
    'register_model_index', 'resources_root', 'tool_path'
]
