"""Robustness to input corruptions: the ImageNet-C benchmark for a segmentor.

    python tools/analysis_tools/test_corruption_robustness.py CONFIG \
        CHECKPOINT [--corruptions benchmark|all|NAME ...] \
        [--severities 1 2 3 4 5] [--seed 0] [--out DIR] [--resume] \
        [--cfg-options k=v ...] [--launcher pytorch] [--device cuda|cpu]

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
--launcher and --device as for tools/noise_robustness.py: the GPU when one
is visible, else the CPU; a launched run without a GPU needs --device cpu.
Needs the corruptions extra: pip install -e '.[corruptions]'.
"""
import argparse
import functools
import os.path as osp

import mmseg_whitebox  # noqa: F401  (compat + registration first)
from mmseg_whitebox.cli import options_from_args, resumable, run_tool
from mmseg_whitebox.cli.robustness_parsers import corruption_benchmark_parser
from mmseg_whitebox.robustness.corruptions import (CorruptionOptions,
                                                   markdown_table,
                                                   run_corruption_benchmark)


def parse_args(argv=None) -> argparse.Namespace:
    return corruption_benchmark_parser(__doc__).parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    options = options_from_args(CorruptionOptions, args)
    out = options.out_dir(args.config)
    with resumable(out, 'evaluations'):
        store = run_corruption_benchmark(
            args.config, args.checkpoint, options,
            log=functools.partial(print, flush=True))
    from mmengine.dist import is_main_process
    if is_main_process():
        print()
        print(markdown_table(store.summary(), store.values(),
                             store.severities))
        print(f'results: {osp.join(out, "results.json")}, '
              f'{osp.join(out, "table.md")}, {osp.join(out, "table.csv")}\n'
              f'plot: {osp.join(out, "corruption_robustness.png")}')
    return store.data


if __name__ == '__main__':
    run_tool(main)
