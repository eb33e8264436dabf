"""Helpers on top of ``mmseg.apis``: training and testing as the tools do
(:func:`train_model`, :func:`evaluate_checkpoint`), the image demo
(overlays of single images or folders), the model-name index that lets
``MMSegInferencer(model=<config name>)`` find this project's configs, and
:func:`config_path` / :func:`read_config` for what takes a config file
(``init_model``, the tools).
(``image_demo`` is imported on use: it loads mmseg's visualizer.)"""
from mmseg_whitebox.apis.evaluation import evaluate_checkpoint
from mmseg_whitebox.apis.model_index import (config_path, find_model,
                                             project_models, read_config,
                                             register_model_index,
                                             resources_root, tool_path)
from mmseg_whitebox.apis.training import train_model

__all__ = [
    'config_path', 'evaluate_checkpoint', 'find_model', 'project_models',
    'read_config', 'register_model_index', 'resources_root', 'tool_path',
    'train_model'
]
