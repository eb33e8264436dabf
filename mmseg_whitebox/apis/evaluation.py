"""Testing as ``tools/test.py`` tests, callable from Python
(:func:`evaluate_checkpoint`: the whole tool after its arguments are
parsed)."""
from __future__ import annotations

import contextlib
import os.path as osp
import sys
from typing import Any, Dict, Optional

from mmseg_whitebox.engine.config_checks import (check_tta,
                                                 num_classes_problem)
from mmseg_whitebox.engine.hooks import CheckpointCheckHook, NonFiniteCounter
from mmseg_whitebox.engine.pretrained import reported_errors
from mmseg_whitebox.engine.runner_config import (build_test_runner,
                                                 run_device)
from mmseg_whitebox.utils.input_checks import check_writable_folder
from mmseg_whitebox.utils.run_lock import lock_folder
from mmseg_whitebox.utils.tool_error import ToolError


def evaluate_checkpoint(cfg: Any,
                        checkpoint: str,
                        out: Optional[str] = None,
                        show: bool = False,
                        show_dir: Optional[str] = None,
                        wait_time: float = 2.0,
                        tta: bool = False,
                        allow_partial_checkpoint: bool = False,
                        allow_nonfinite_weights: bool = False,
                        device: Optional[str] = None
                        ) -> Dict[str, float]:
    """Test ``checkpoint`` with the test loop and metric of ``cfg`` (an
    mmengine ``Config`` with its ``work_dir`` set); returns the metrics.

    Args:
        out: a folder for the predictions as PNG label maps.
        show, show_dir, wait_time: paint the predictions on screen (every
            ``wait_time`` s) or into ``show_dir`` (under the work dir).
        tta: the config's test-time augmentation.
        allow_partial_checkpoint, allow_nonfinite_weights: load a
            checkpoint that does not fit the model, or holds NaN/Inf
            weights, instead of refusing it.
        device: ``'cuda'`` or ``'cpu'`` (default: the GPU if one is
            visible, else the CPU for one process; see
            :func:`~mmseg_whitebox.engine.runner_config.run_device`).

    Warnings (a one-class head, non-finite images) go to stderr, before
    and again after mmengine's output. Raises
    :class:`~mmseg_whitebox.utils.tool_error.ToolError` for a bad device
    or input before the Runner is built, and when another run holds the
    work dir or ``out``.
    """
    with contextlib.ExitStack() as locks:
        locks.enter_context(run_device(cfg, device))  # before any work
        if out is not None:
            check_writable_folder(out, '--out')

        def prepare(cfg: Any) -> None:
            if out is not None:
                locks.enter_context(lock_folder(out, '--out'))
            # last: a failure's traceback is logged in the work dir
            locks.enter_context(lock_folder(cfg.work_dir, '--work-dir'))
            if show_dir:
                check_writable_folder(osp.join(cfg.work_dir, show_dir),
                                      '--show-dir')
            if show or show_dir:
                _enable_visualization(cfg, show, show_dir, wait_time)
            if tta:
                check_tta(cfg)
                cfg.test_dataloader.dataset.pipeline = cfg.tta_pipeline
                cfg.tta_model.module = cfg.model
                cfg.model = cfg.tta_model
            if out is not None:
                cfg.test_evaluator['output_dir'] = out
                cfg.test_evaluator['keep_results'] = True

        warnings = [w for w in (num_classes_problem(cfg), ) if w]
        runner = build_test_runner(cfg, checkpoint, prepare)
        for warning in warnings:
            print(f'WARNING: {warning}', file=sys.stderr)
        runner.register_hook(CheckpointCheckHook(
            allow_partial_checkpoint, allow_nonfinite_weights,
            '--allow-partial-checkpoint', '--allow-nonfinite-weights'))
        counter = NonFiniteCounter()
        runner.register_hook(counter)
        with reported_errors(cfg):
            metrics = runner.test()
        warnings += [w for w in (counter.summary(), ) if w]
        for warning in warnings:  # last, after mmengine's own output
            print(f'WARNING: {warning}', file=sys.stderr)
        return metrics


def _enable_visualization(cfg: Any, show: bool, show_dir: Optional[str],
                          wait_time: float) -> None:
    hooks = cfg.default_hooks
    if 'visualization' not in hooks:
        raise ToolError('--show/--show-dir need a visualization hook in '
                        "default_hooks: visualization=dict(type="
                        "'SegVisualizationHook')")
    hooks.visualization.draw = True
    # every test image unless the config says (mmseg: every 50th)
    hooks.visualization.setdefault('interval', 1)
    if show:
        hooks.visualization.show = True
        hooks.visualization.wait_time = wait_time
    if show_dir:
        cfg.visualizer.save_dir = osp.join(cfg.work_dir, show_dir)
