"""Benchmark white-box encoders against mmseg's ViT, alone and inside the
segmentor.

    python tools/analysis_tools/benchmark_encoders.py [--size s] \
        [--encoders vit crate tost cbt crate-cbt cbsa-vit] \
        [--sizes 512 1024 2048 512x1024] [--device cpu|cuda] \
        [--threads N] [--repeats 5] [--max-seconds 60] [--no-backward] \
        [--flops-sizes 512] [--amp bf16|fp16] \
        [--out work_dirs/benchmark_encoders]

Every encoder of one size (T/S/B) under the CBSA head, from this project's
ADE20K configs, with random weights. Per image size: encoder and segmentor
parameters and FLOPs (mmengine's analysis, fused multiply-adds, attention
included; at --flops-sizes), encoder and segmentor forward latency,
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

DEFAULT_SIZES = ('512', '1024', '2048', '512x1024')


def parse_args(argv=None) -> argparse.Namespace:
    p = tool_parser(__doc__)
    p.add_argument('--size', default='s', choices=['t', 's'],
                   help='model size (default: s)')
    p.add_argument('--encoders', nargs='+',
                   choices=list(bench.ENCODER_CONFIGS),
                   default=list(bench.ENCODER_CONFIGS),
                   help='encoders to compare (vit: mmseg\'s, the reference)')
    p.add_argument('--sizes', nargs='+', type=common.size_arg,
                   default=[common.parse_size(s) for s in DEFAULT_SIZES],
                   help=f'image sizes, N or HxW (default: '
                   f'{" ".join(DEFAULT_SIZES)})')
    p.add_argument('--flops-sizes', nargs='*', type=common.size_arg,
                   default=[(512, 512)],
                   help='sizes at which FLOPs are counted (a traced forward '
                   'each; default: 512)')
    common.add_measurement_args(p, 'encoders', repeats=5, warmup=1,
                                  max_seconds=60.0)
    p.add_argument('--out', default='work_dirs/benchmark_encoders')
    args = p.parse_args(argv)
    common.check_measurement_args(p, args)
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
        args.out, args.encoders, args.sizes, args.size, args.flops_sizes,
        common.BenchmarkOptions(
            repeats=args.repeats, warmup=args.warmup,
            max_seconds=args.max_seconds, backward=not args.no_backward,
            amp=args.amp, seed=args.seed),
        args.device, args.threads, args.memory_limit_gb)
    print_summary(report['results'], report['slopes'])
    return report


if __name__ == '__main__':
    run_tool(main)
