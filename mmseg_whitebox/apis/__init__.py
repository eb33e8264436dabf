"""Helpers on top of ``mmseg.apis``: training and testing as the tools do
(:func:`train_model`, :func:`evaluate_checkpoint`), the model-name index
that lets ``MMSegInferencer(model=<config name>)`` find this project's
configs, and :func:`config_path` / :func:`read_config`. ``image_demo`` is
imported on use (it loads mmseg's visualizer)."""
from mmseg_whitebox.apis.evaluation import evaluate_checkpoint
from mmseg_whitebox.apis.training import train_model
from mmseg_whitebox.engine.config import read_config
from mmseg_whitebox.engine.model_index import (config_path, find_model,
                                               project_models,
                                               register_model_index,
                                               resources_root, tool_path)

__all__ = [
    'config_path', 'evaluate_checkpoint', 'find_model', 'project_models',
    'read_config', 'register_model_index', 'resources_root', 'tool_path',
    'train_model'
]
