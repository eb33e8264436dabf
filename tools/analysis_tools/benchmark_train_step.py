"""Benchmark one training step of whole segmentors against ViT + Segmenter.

    python tools/analysis_tools/benchmark_train_step.py [--arch s] \
        [--models vit+segmenter vit+cbsa cbt+cbsa crate+cbsa tost+cbsa \
                  cbsa-vit+cbsa] \
        [--shapes 512 1024 2048] [--batch 2] [--with-cp] \
        [--banded-loss [ROWS]] \
        [--device cpu|cuda] [--threads N] \
        [--amp [--amp-dtype float16|bfloat16]] [--compile] \
        [--repeats 3] [--max-seconds 60] \
        [--out work_dirs/benchmark_train_step]

Every model of one size (T/S/B) from this project's ADE20K configs, with
random weights: per crop size, one optimizer step of the whole segmentor
(forward with the config's loss, backward, the config's optimizer step)
on --batch random crops with random labels; median time, peak memory,
each as a ratio to ViT + Segmenter's mask head (with mmseg's loss), and
log-log slopes of cost against tokens. --banded-loss also measures every
model with its decode loss computed in bands of ROWS label rows
(BandedLossEncoderDecoder: the same loss and gradients without the class
maps at the crop size), as '<model> banded'. --compile also times every
model with its loss compiled (torch.compile, as --cfg-options compile=True
trains: forward and backward compiled, a graph per crop size), as
'<model>+compile', with its ratios to itself eager and its compilation
timed apart. Sizes predicted to need
more memory than there is are skipped (from a model's two smaller sizes:
its first two sizes always run, so start with small ones). Writes
benchmark.json (after every size, so that a run killed for memory keeps
what it measured), benchmark.md and benchmark.png to --out. The last
measurements are in docs/benchmarks.md ("Training-step benchmark").
"""
import argparse
from typing import Dict, List

import mmseg_whitebox  # noqa: F401  (compat + registration first)
from mmseg_whitebox.analysis import benchmark as common
from mmseg_whitebox.analysis import train_step_benchmark as bench
from mmseg_whitebox.analysis.report import compiled_lines, ratio_lines
from mmseg_whitebox.cli import run_tool, tool_parser
from mmseg_whitebox.cli.options import (add_arch_arg, add_compile_arg,
                                        add_measurement_args, add_models_arg,
                                        add_out_arg, add_shapes_arg,
                                        amp_dtype, check_measurement_args)
from mmseg_whitebox.models.losses import DEFAULT_BAND_ROWS

DEFAULT_SIZES = ('512', '1024', '2048')


def parse_args(argv=None) -> argparse.Namespace:
    p = tool_parser(__doc__)
    add_arch_arg(p, choices=('t', 's'))
    add_models_arg(p, bench.TRAIN_CONFIGS, list(bench.DEFAULT_MODELS),
                   f'models to compare ({bench.REFERENCE}: the reference)')
    add_shapes_arg(p, 'crop sizes, H or HxW', DEFAULT_SIZES, minimum=16)
    p.add_argument('--batch', type=int, default=2,
                   help='crops per step (default: 2)')
    p.add_argument('--with-cp', action='store_true',
                   help='activation checkpointing in the encoder '
                   '(backbone.with_cp=True)')
    p.add_argument('--banded-loss', type=int, nargs='?', metavar='ROWS',
                   const=DEFAULT_BAND_ROWS, default=None,
                   help='also every model with the decode loss in bands of '
                   f'ROWS label rows (default ROWS: {DEFAULT_BAND_ROWS})')
    add_measurement_args(p, 'models', repeats=3, warmup=1, max_seconds=60.0)
    add_compile_arg(p, 'model')
    add_out_arg(p, 'output folder (default: work_dirs/benchmark_train_step)',
                default='work_dirs/benchmark_train_step')
    args = p.parse_args(argv)
    check_measurement_args(p, args)
    if args.batch < 1:
        p.error('--batch must be >= 1')
    if args.banded_loss is not None and args.banded_loss < 1:
        p.error('--banded-loss ROWS must be >= 1')
    return args


def print_summary(rows: List[Dict]) -> None:
    print(f'\ntraining step / {bench.REFERENCE} (time, peak memory):')
    print('\n'.join(ratio_lines(rows, bench.REFERENCE, 'step_ms_vs_ref',
                                'mem_step_vs_ref')))
    compiled = compiled_lines(rows, bench.COMPILED_LABELS)
    if compiled:
        print('\ncompiled / eager (same model, same crop):')
        print('\n'.join(compiled))


def main(argv=None) -> Dict:
    args = parse_args(argv)
    report = bench.run_train_step_benchmark(
        args.out, args.models, args.shapes, args.arch, args.batch,
        args.with_cp, args.banded_loss,
        common.BenchmarkOptions(
            repeats=args.repeats, warmup=args.warmup,
            max_seconds=args.max_seconds, amp=amp_dtype(args),
            seed=args.seed, compile=args.compile),
        args.device, args.threads, args.memory_limit_gb)
    print_summary(report['results'])
    return report


if __name__ == '__main__':
    run_tool(main)
