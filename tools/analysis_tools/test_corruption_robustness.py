"""Robustness to input corruptions: the ImageNet-C benchmark for a segmentor.

    python tools/analysis_tools/test_corruption_robustness.py CONFIG \
        CHECKPOINT [--corruptions benchmark|all|NAME ...] \
        [--severities 1 2 3 4 5] [--seed 0] [--out DIR] [--resume] \
        [--cfg-options k=v ...]

Evaluates the model clean and under every corruption x severity, with the
config's test pipeline, test loop and IoUMetric (as tools/test.py): an
ImageCorruption transform (the imagecorruptions package's ImageNet-C
corruptions, deterministic per image) is inserted right after
LoadImageFromFile. Reports, as mmdetection's test_robustness.py:

    mPC = mean over corruptions c and severities s of mIoU(c, s)
    rPC = mPC / clean mIoU

Corruptions: names, or the groups benchmark (the 15 ImageNet-C ones, the
default), validation (speckle_noise, gaussian_blur, spatter, saturate),
noise, blur, weather, digital, all. Results are saved after each
evaluation (OUT/results.{json,csv}, OUT/table.{md,csv}); --resume skips
what is done. OUT/corruption_robustness.png plots mIoU against severity.
Needs the corruptions extra: pip install -e '.[corruptions]'.
"""
import argparse
import functools
import os.path as osp

import mmseg_whitebox  # noqa: F401  (compat + registration first)
from mmseg_whitebox.cli import (add_cfg_options_arg, add_checkpoint_check_args,
                                resumable, run_tool, tool_parser)
from mmseg_whitebox.robustness.corruptions import (CorruptionOptions,
                                                   SEVERITIES, markdown_table,
                                                   run_corruption_benchmark)


def parse_args(argv=None) -> argparse.Namespace:
    p = tool_parser(__doc__)
    p.add_argument('config', help='config file path')
    p.add_argument('checkpoint', help='checkpoint file')
    p.add_argument('--corruptions', nargs='+', default=['benchmark'],
                   help='corruption names or groups (default: benchmark, '
                   'the 15 ImageNet-C corruptions)')
    p.add_argument('--severities', nargs='+', default=list(SEVERITIES),
                   help='severities, integers 1..5 (default: all five)')
    p.add_argument('--seed', type=int, default=0,
                   help='base seed of the per-image corruption seeds')
    p.add_argument('--out',
                   help='results folder (default: work_dirs/'
                   'corruption_robustness/<config name>)')
    p.add_argument('--resume', action='store_true',
                   help='continue the results in --out, skipping finished '
                   'evaluations')
    p.add_argument('--name', help='plot title label (default: config name)')
    p.add_argument('--work-dir',
                   help='folder for the Runner\'s logs (default: --out)')
    add_checkpoint_check_args(p)
    add_cfg_options_arg(p)
    return p.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    options = CorruptionOptions(
        corruptions=args.corruptions, severities=args.severities,
        seed=args.seed, out=args.out, resume=args.resume, name=args.name,
        work_dir=args.work_dir, cfg_options=args.cfg_options,
        allow_partial_checkpoint=args.allow_partial_checkpoint,
        allow_nonfinite_weights=args.allow_nonfinite_weights)
    out = options.out_dir(args.config)
    with resumable(out, 'evaluations'):
        store = run_corruption_benchmark(
            args.config, args.checkpoint, options,
            log=functools.partial(print, flush=True))
    print()
    print(markdown_table(store.summary(), store.values(), store.severities))
    print(f'results: {osp.join(out, "results.json")}, '
          f'{osp.join(out, "table.md")}, {osp.join(out, "table.csv")}\n'
          f'plot: {osp.join(out, "corruption_robustness.png")}')
    return store.data


if __name__ == '__main__':
    run_tool(main)
