"""Benchmark white-box encoders against mmseg's ViT, alone and inside the
segmentor.

    python tools/analysis_tools/benchmark_encoders.py [--arch s] \
        [--models vit crate tost cbt crate-cbt cbsa-vit] \
        [--shapes 512 1024 2048 512x1024] [--device cpu|cuda] \
        [--threads N] [--repeats 5] [--max-seconds 60] [--no-backward] \
        [--flops-shapes 512] [--amp [--amp-dtype float16|bfloat16]] \
        [--out work_dirs/benchmark_encoders]

Every encoder of one size (T/S/B) under the CBSA head, from this project's
ADE20K configs, with random weights. Per image size: encoder and segmentor
parameters and FLOPs (mmengine's analysis, fused multiply-adds, attention
included; at --flops-shapes), encoder and segmentor forward latency,
encoder forward+backward latency, peak memory, each as a ratio to mmseg's
ViT, and log-log slopes of cost against tokens. Writes benchmark.json,
benchmark.md and benchmark.png to --out. The last measurements are in
docs/benchmarks.md ("Encoder benchmark"), the project's targets in
docs/notes/benchmark-targets.md.
"""
import argparse
from typing import Dict, List

import mmseg_whitebox  # noqa: F401  (compat + registration first)
from mmseg_whitebox.analysis import benchmark as common
from mmseg_whitebox.analysis import encoder_benchmark as bench
from mmseg_whitebox.analysis.report import ratio_lines
from mmseg_whitebox.cli import run_tool, tool_parser
from mmseg_whitebox.cli.options import (add_arch_arg, add_measurement_args,
                                        add_models_arg, add_out_arg,
                                        add_shapes_arg, amp_dtype,
                                        check_measurement_args)

DEFAULT_SIZES = ('512', '1024', '2048', '512x1024')


def parse_args(argv=None) -> argparse.Namespace:
    p = tool_parser(__doc__)
    add_arch_arg(p, choices=('t', 's'))
    add_models_arg(p, bench.ENCODER_CONFIGS, list(bench.ENCODER_CONFIGS),
                   'encoders to compare (vit: mmseg\'s, the reference)')
    add_shapes_arg(p, 'image sizes, H or HxW', DEFAULT_SIZES, minimum=16)
    add_shapes_arg(p, 'sizes at which FLOPs are counted (a traced forward '
                   'each; none: no FLOPs)', ('512', ), flag='--flops-shapes',
                   minimum=16, nargs='*')
    add_measurement_args(p, 'encoders', repeats=5, warmup=1,
                         max_seconds=60.0)
    add_out_arg(p, 'output folder (default: work_dirs/benchmark_encoders)',
                default='work_dirs/benchmark_encoders')
    args = p.parse_args(argv)
    check_measurement_args(p, args)
    return args


def print_summary(rows: List[Dict], fits: Dict) -> None:
    print('\nslopes of cost vs tokens (log-log; 1 = linear, ViT ~2):')
    for name, fit in fits.items():
        fitted = '  '.join(f'{k} {v:.2f}' for k, v in fit.items())
        print(f'  {name:<10} {fitted}')
    print('\nencoder forward / ViT (latency, peak memory):')
    print('\n'.join(ratio_lines(rows, bench.REFERENCE, 'enc_fwd_ms_vs_vit',
                                'enc_mem_fwd_vs_vit')))


def main(argv=None) -> Dict:
    args = parse_args(argv)
    report = bench.run_encoder_benchmark(
        args.out, args.models, args.shapes, args.arch, args.flops_shapes,
        common.BenchmarkOptions(
            repeats=args.repeats, warmup=args.warmup,
            max_seconds=args.max_seconds, backward=not args.no_backward,
            amp=amp_dtype(args), seed=args.seed),
        args.device, args.threads, args.memory_limit_gb)
    print_summary(report['results'], report['slopes'])
    return report


if __name__ == '__main__':
    run_tool(main)
