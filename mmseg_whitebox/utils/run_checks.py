"""Checks the tools run on a config before the Runner starts, and the
translation of errors from inside a run into one clear message.

Each check raises :class:`~mmseg_whitebox.utils.cli.ToolError` (printed by
``run_tool`` as ``<tool>: error: ...``, exit status 2), so a problem that
mmengine would report minutes later, or as a bare ``NotADirectoryError``,
``URLError`` or ``end should be larger than begin``, is reported first.
"""
from __future__ import annotations

import contextlib
import urllib.error
from typing import Any, Iterator, List, Optional

from mmseg_whitebox.datasets.checks import DatasetCheckError
from mmseg_whitebox.utils.checkpoint_checks import CheckpointError
from mmseg_whitebox.utils.cli import ToolError
from mmseg_whitebox.utils.input_checks import check_writable_folder


def check_work_dir(work_dir: str) -> None:
    """The work dir can be created and written to (mmengine would fail with
    a raw ``NotADirectoryError``/``PermissionError`` later): logs and
    checkpoints go there."""
    check_writable_folder(work_dir, '--work-dir', f'work dir {work_dir!r}')


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


def pretrained_urls(cfg: Any) -> List[str]:
    """The http(s) URLs a config downloads weights from."""
    urls = []

    def walk(obj: Any) -> None:
        if isinstance(obj, dict):
            for value in obj.values():
                walk(value)
        elif isinstance(obj, (list, tuple)):
            for value in obj:
                walk(value)
        elif isinstance(obj, str) and obj.startswith(('http://',
                                                      'https://')):
            if obj not in urls:
                urls.append(obj)

    walk(cfg.get('model', None))
    walk(cfg.get('load_from', None))
    return urls


def download_error_message(cfg: Any, exc: BaseException) -> str:
    """What to say when fetching a config's pretrained weights failed."""
    urls = pretrained_urls(cfg)
    reason = getattr(exc, 'reason', exc)
    where = ', '.join(urls) if urls else 'a URL in the config'
    return (
        f'could not download the pretrained weights {where} ({reason}): '
        'is this machine offline, or behind a proxy/firewall? Download the '
        'file elsewhere (and '
        'convert it if needed, e.g. tools/model_converters/timm2mmseg.py for '
        'timm ViTs), then point the config at the local copy: --cfg-options '
        'model.pretrained=/path/to/weights.pth (or model.backbone.init_cfg.'
        'checkpoint=... where the config sets init_cfg), or put it in '
        "torch's cache (~/.cache/torch/hub/checkpoints/); "
        'model.pretrained=None trains from scratch')


def _clean(exc: BaseException) -> str:
    """The message of an error re-raised from a DataLoader worker (torch
    prepends the worker's traceback)."""
    text = str(exc)
    marker = f'{type(exc).__name__}: '
    if 'Original Traceback' in text and marker in text:
        text = text.rsplit(marker, 1)[1]
    return text.strip()


@contextlib.contextmanager
def reported_errors(cfg: Any) -> Iterator[None]:
    """Turn the bad-input errors raised inside a run (data checks,
    checkpoint checks, an offline download) into :class:`ToolError`."""
    try:
        yield
    except (DatasetCheckError, CheckpointError) as exc:
        raise ToolError(_clean(exc)) from exc
    except urllib.error.URLError as exc:
        raise ToolError(download_error_message(cfg, exc)) from exc


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
