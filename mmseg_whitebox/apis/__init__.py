"""Inference helpers on top of ``mmseg.apis``: the image demo (overlays
of single images or folders), the model-name index that lets
``MMSegInferencer(model=<config name>)`` find this project's configs, and
:func:`config_path` for what takes a config file (``init_model``).
(``image_demo`` is imported on use: it loads mmseg's visualizer. The
index lives in :mod:`mmseg_whitebox.utils.model_index`, below the tools'
config handling that resolves names with it.)"""
from mmseg_whitebox.utils.model_index import (config_path, find_model,
                                              project_models,
                                              register_model_index,
                                              resources_root, tool_path)

__all__ = [
    'config_path', 'find_model', 'project_models', 'register_model_index',
    'resources_root', 'tool_path'
]
