"""Test (and evaluate) a segmentor; the same options as mmseg's
``tools/test.py``.

    python tools/test.py CONFIG CHECKPOINT [--work-dir DIR] [--out DIR]
        [--show] [--show-dir DIR] [--tta] [--cfg-options k=v ...]
        [--launcher pytorch] [--allow-partial-checkpoint]
        [--allow-nonfinite-weights]

A checkpoint that does not fit the config (missing, unexpected or
mis-shaped keys: another architecture or num_classes) or holds NaN/Inf
weights is refused unless the matching --allow-* flag is given; images
whose input or prediction is not finite are counted and reported.

The metrics are logged and also written by mmengine to
``WORK_DIR/<timestamp>/<timestamp>.json``.

The checkpoint to evaluate and report is the final one a training run
wrote, ``WORK_DIR/iter_<max_iters>.pth`` (named in
``WORK_DIR/last_checkpoint``): the released Segmenter, CBT and DEPICT code
reports its final model, and the configs' validation split is the split
the papers report, so no checkpoint is selected on it
(docs/training.md#which-checkpoint-to-report).
"""
import argparse
import os.path as osp
import sys

import mmseg_whitebox  # noqa: F401  (compat + registration first)
from mmseg_whitebox.cli import (add_checkpoint_check_args, add_common_args,
                                checkpoint_check_hook, drop_training,
                                load_config, run_tool)
from mmseg_whitebox.cli.run_checks import check_tta, num_classes_problem
from mmseg_whitebox.engine.hooks import NonFiniteCounter
from mmseg_whitebox.utils.checkpoint_checks import (CheckpointError,
                                                    check_checkpoint_file)
from mmseg_whitebox.utils.input_checks import (check_checkpoint,
                                               check_data_roots,
                                               check_work_dir,
                                               check_writable_folder,
                                               reported_errors)
from mmseg_whitebox.utils.tool_error import ToolError


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description='Test (and evaluate) a segmentor')
    parser.add_argument('config', help='config file path')
    parser.add_argument(
        'checkpoint',
        help='checkpoint file; to report a result, the final one of the '
        'run (WORK_DIR/iter_<max_iters>.pth, e.g. iter_161728.pth for the '
        'ADE20K schedule), as the released code reports')
    parser.add_argument(
        '--out',
        help='folder to save the predictions (as PNG label maps) for '
        'offline evaluation')
    parser.add_argument(
        '--show', action='store_true', help='show the predictions')
    parser.add_argument(
        '--show-dir',
        help='save every test image painted with its prediction here '
        '(a relative path is taken inside the work dir)')
    parser.add_argument(
        '--wait-time', type=float, default=2, help='--show interval (s)')
    parser.add_argument(
        '--tta', action='store_true', help='test-time augmentation')
    add_checkpoint_check_args(parser)
    add_common_args(parser)
    return parser.parse_args(argv)


def enable_visualization(cfg, args) -> None:
    hooks = cfg.default_hooks
    if 'visualization' not in hooks:
        raise ToolError('--show/--show-dir need a visualization hook in '
                        "default_hooks: visualization=dict(type="
                        "'SegVisualizationHook')")
    hooks.visualization.draw = True
    # every test image unless the config asks for fewer (mmseg's hook
    # defaults to every 50th)
    hooks.visualization.setdefault('interval', 1)
    if args.show:
        hooks.visualization.show = True
        hooks.visualization.wait_time = args.wait_time
    if args.show_dir:
        cfg.visualizer.save_dir = osp.join(cfg.work_dir, args.show_dir)


def main(argv=None) -> dict:
    args = parse_args(argv)
    if args.out is not None:  # before any work, as the other tools
        check_writable_folder(args.out, '--out')
    check_checkpoint(args.checkpoint)
    try:
        check_checkpoint_file(args.checkpoint)
    except CheckpointError as exc:
        raise ToolError(str(exc)) from exc
    cfg = load_config(args)
    check_work_dir(cfg.work_dir)
    if args.show_dir:
        check_writable_folder(osp.join(cfg.work_dir, args.show_dir),
                              '--show-dir')
    cfg.load_from = args.checkpoint
    if args.show or args.show_dir:
        enable_visualization(cfg, args)
    if args.tta:
        check_tta(cfg)
        cfg.test_dataloader.dataset.pipeline = cfg.tta_pipeline
        cfg.tta_model.module = cfg.model
        cfg.model = cfg.tta_model
    if args.out is not None:
        cfg.test_evaluator['output_dir'] = args.out
        cfg.test_evaluator['keep_results'] = True
    drop_training(cfg)
    check_data_roots(cfg, ('test_dataloader', ))

    warnings = [w for w in (num_classes_problem(cfg), ) if w]
    for warning in warnings:
        print(f'WARNING: {warning}', file=sys.stderr)

    from mmengine.runner import Runner
    runner = Runner.from_cfg(cfg)
    runner.register_hook(checkpoint_check_hook(args))
    counter = NonFiniteCounter()
    runner.register_hook(counter)
    with reported_errors(cfg):
        metrics = runner.test()
    warnings += [w for w in (counter.summary(), ) if w]
    for warning in warnings:  # last, after mmengine's own output
        print(f'WARNING: {warning}', file=sys.stderr)
    return metrics


if __name__ == '__main__':
    run_tool(main)
