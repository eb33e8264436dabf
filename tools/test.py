"""Test (and evaluate) a segmentor; the same options as mmseg's
``tools/test.py``.

    python tools/test.py CONFIG CHECKPOINT [--work-dir DIR] [--out DIR]
        [--show] [--show-dir DIR] [--tta] [--cfg-options k=v ...]
        [--launcher pytorch] [--device cuda|cpu]
        [--allow-partial-checkpoint] [--allow-nonfinite-weights]

``--device``: cuda when a GPU is visible, else cpu; a launched run
(``--launcher``) without a visible GPU stops unless ``--device cpu`` asks
for CPU processes (docs/training.md, "Distributed runs").

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

import mmseg_whitebox  # noqa: F401  (compat + registration first)
from mmseg_whitebox.apis.evaluation import evaluate_checkpoint
from mmseg_whitebox.cli import (add_checkpoint_check_args, add_common_args,
                                load_config, run_tool)
from mmseg_whitebox.cli.options import add_out_arg


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description='Test (and evaluate) a segmentor')
    parser.add_argument('config', help='config file path')
    parser.add_argument(
        'checkpoint',
        help='checkpoint file; to report a result, the final one of the '
        'run (WORK_DIR/iter_<max_iters>.pth, e.g. iter_161728.pth for the '
        'ADE20K schedule), as the released code reports')
    add_out_arg(parser, 'folder to save the predictions (as PNG label maps) '
                'for offline evaluation')
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


def main(argv=None) -> dict:
    args = parse_args(argv)
    return evaluate_checkpoint(
        load_config(args), args.checkpoint, args.out, args.show,
        args.show_dir, args.wait_time, args.tta,
        args.allow_partial_checkpoint, args.allow_nonfinite_weights,
        args.device)


if __name__ == '__main__':
    run_tool(main)
