"""Inference helpers on top of ``mmseg.apis``: the image demo (overlays
of single images or folders) and the model-name index that lets
``MMSegInferencer(model=<config name>)`` find this project's configs.
(``image_demo`` is imported on use: it loads mmseg's visualizer.)"""
from .model_index import (find_model, project_models,
                          register_model_index)

__all__ = ['find_model', 'project_models', 'register_model_index']
