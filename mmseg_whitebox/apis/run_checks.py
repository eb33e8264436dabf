"""Checks :func:`~.training.train_model` and
:func:`~.evaluation.evaluate_checkpoint` (and so the training and test
tools) run on a config before the Runner starts.

Each check raises :class:`~mmseg_whitebox.utils.tool_error.ToolError`
(printed by a tool as ``<tool>: error: ...``, exit status 2), so a problem
that mmengine would report minutes later, or as a bare ``NotADirectoryError``,
``URLError`` or ``end should be larger than begin``, is reported first.
"""
from __future__ import annotations

from typing import Any, Iterator, Optional

from mmseg_whitebox.utils.tool_error import ToolError


def check_param_schedulers(cfg: Any) -> None:
    """Every scheduler ends after it begins (mmengine: ``end should be
    larger than begin``), with the recipe for a shorter schedule."""
    schedulers = cfg.get('param_scheduler', None) or []
    if isinstance(schedulers, dict):
        schedulers = [schedulers]
    max_iters = (cfg.get('train_cfg', None) or {}).get('max_iters')
    for i, sched in enumerate(schedulers):
        begin, end = sched.get('begin', 0), sched.get('end', None)
        if end is None or end > begin:
            continue
        recipe = ''
        if len(schedulers) == 2 and max_iters:
            warm = max(1, min(schedulers[0].get('end', 1), max_iters // 2))
            recipe = (
                f' For a {max_iters}-iteration run with a warm-up of '
                f'{warm}: --cfg-options param_scheduler.0.end={warm} '
                f'param_scheduler.1.begin={warm} param_scheduler.1.end='
                f'{max_iters}')
        raise ToolError(
            f'param_scheduler[{i}] ({sched.get("type")}) has begin={begin} '
            f'and end={end}, but end must be larger than begin. When '
            'shortening a schedule, move the warm-up end and the next '
            'scheduler\'s begin below the new length too.' + recipe)


def _heads(model: Any) -> Iterator[tuple]:
    for key in ('decode_head', 'auxiliary_head'):
        heads = model.get(key, None) if model else None
        if isinstance(heads, dict):
            heads = [heads]
        for j, head in enumerate(heads or []):
            name = f'model.{key}' + (f'.{j}' if len(heads) > 1 else '')
            yield name, head


def num_classes_problem(cfg: Any) -> Optional[str]:
    """The explanation when a head has ``num_classes=1`` (mmseg's softmax
    cross-entropy over one class: loss 0, zero gradients), else None."""
    for name, head in _heads(cfg.get('model', None)):
        if head.get('num_classes') == 1:
            return (
                f'{name}.num_classes=1: with one class mmseg\'s softmax '
                'cross-entropy is 0 for every pixel, so the gradients are '
                'zero, nothing is learnt and every pixel is predicted as '
                'class 0. For binary (object/background) segmentation use '
                'num_classes=2, or mmseg\'s sigmoid recipe: num_classes=2, '
                'out_channels=1, loss_decode=dict(type=\'CrossEntropyLoss\', '
                'use_sigmoid=True) and a threshold (e.g. threshold=0.5)')
    return None


def check_tta(cfg: Any) -> None:
    """``--tta`` needs ``tta_pipeline`` and ``tta_model`` in the config,
    and a segmentor that keeps full-resolution logits."""
    missing = [k for k in ('tta_pipeline', 'tta_model')
               if not cfg.get(k, None)]
    if missing:
        raise ToolError(
            f'--tta needs {" and ".join(missing)} in the config (as in '
            'configs/_base_/datasets/ade20k.py and configs/_base_/'
            'default_runtime.py); add them or test without --tta')
    model_type = str(cfg.get('model', {}).get('type', ''))
    if model_type.rsplit('.', 1)[-1] == 'BoundedMemoryEncoderDecoder':
        raise ToolError(
            '--tta averages full-resolution logits, which '
            'BoundedMemoryEncoderDecoder does not keep (its seg_logits stay '
            'at the network resolution): test with --tta and model.type='
            'EncoderDecoder, or without --tta')
