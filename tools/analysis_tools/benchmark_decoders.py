"""Benchmark decode heads side by side on the same encoder features.

    python tools/analysis_tools/benchmark_decoders.py [--arch s] \
        [--models segmenter linear mssa mssa-ca tssa cbsa cbsa-rigorous \
                  cbsa-straightforward] \
        [--shapes 512 768 1024 1536 2048 512x1024] [--device cpu|cuda] \
        [--threads N] [--repeats 10] [--max-seconds 30] [--no-backward] \
        [--amp [--amp-dtype float16|bfloat16]] [--compile] \
        [--out work_dirs/benchmark_decoders]

Per image size and head: parameters and FLOPs (mmengine's analysis, fused
multiply-adds, attention included), forward latency (no_grad) and
forward+backward latency (median over --repeats interleaved calls), peak
memory (CUDA: max_memory_allocated; CPU: the rise of the resident-set
high-water mark), each as a ratio to mmseg's Segmenter mask head.

``--compile`` adds every head compiled (``torch.compile``, a graph per
size), timed in the same interleaved rounds as the eager heads, with its
compilation time and its ratios to the same head eager.

``cbsa`` runs the operators' equations, ``cbsa-straightforward`` the CBSA
paper's Appendix D listing with the same parameters; the first is also
reported as a ratio to the second, with the largest output difference. A
run predicted (from the smaller sizes) not to fit in memory is skipped and
marked so. Writes benchmark.json, benchmark.md (the table)
and benchmark.png (latency and memory against tokens, log-log, with fitted
slopes) to --out. The last measurements are in docs/benchmarks.md
("Decoder benchmark"), the project's targets in
docs/notes/benchmark-targets.md.
"""
import argparse
from typing import Dict, List

import mmseg_whitebox  # noqa: F401  (compat + registration first)
from mmseg_whitebox.analysis import benchmark as common
from mmseg_whitebox.analysis import decoder_benchmark as bench
from mmseg_whitebox.analysis.report import compiled_lines
from mmseg_whitebox.cli import run_tool, tool_parser
from mmseg_whitebox.cli.options import (add_arch_arg, add_compile_arg,
                                        add_measurement_args, add_models_arg,
                                        add_out_arg, add_shapes_arg,
                                        amp_dtype, check_measurement_args)

DEFAULT_SIZES = ('512', '768', '1024', '1536', '2048', '512x1024')


def parse_args(argv=None) -> argparse.Namespace:
    p = tool_parser(__doc__)
    add_arch_arg(p, help='ViT whose configs (feature width, head sizes) '
                 'are used')
    add_models_arg(p, bench.HEAD_CONFIGS, list(bench.HEAD_CONFIGS),
                   'decode heads to compare')
    add_shapes_arg(p, 'image sizes, H or HxW', DEFAULT_SIZES, minimum=16)
    add_measurement_args(p, 'heads', repeats=10, warmup=2, max_seconds=30.0)
    p.add_argument('--no-flops', action='store_true',
                   help='skip the FLOP counts')
    add_compile_arg(p, 'head')
    add_out_arg(p, 'output folder (default: work_dirs/benchmark_decoders)',
                default='work_dirs/benchmark_decoders')
    args = p.parse_args(argv)
    check_measurement_args(p, args)
    return args


def print_compiled(rows: List[Dict]) -> None:
    lines = compiled_lines(rows, bench.COMPILED_LABELS)
    if lines:
        print('\ncompiled / eager (same head, same size):')
        print('\n'.join(lines))


def print_summary(rows: List[Dict], fits: Dict) -> None:
    print('\nslopes of cost vs tokens (log-log; 1 = linear):')
    for head, fit in fits.items():
        print(f'  {head:<22} ' + '  '.join(f'{k} {v:.2f}'
                                          for k, v in fit.items()))
    compared = [r for r in rows if 'fwd_ms_vs_straightforward' in r]
    if compared:
        print('\nforward latency / straightforward CBSA (same parameters):')
    for r in compared:
        print(f'  {r["head"]:<10} {r["size"]:>9}: '
              f'{r["fwd_ms_vs_straightforward"]:.3f}  (max |out - '
              'straightforward| = '
              f'{r.get("max_abs_diff_vs_straightforward", float("nan")):.1e})')


def main(argv=None) -> Dict:
    args = parse_args(argv)
    report = bench.run_decoder_benchmark(
        args.out, args.models, args.shapes, args.arch,
        common.BenchmarkOptions(
            repeats=args.repeats, warmup=args.warmup,
            max_seconds=args.max_seconds, backward=not args.no_backward,
            flops=not args.no_flops, amp=amp_dtype(args),
            seed=args.seed, compile=args.compile),
        args.device, args.threads, args.memory_limit_gb)
    print_summary(report['results'], report['slopes'])
    print_compiled(report['results'])
    return report


if __name__ == '__main__':
    run_tool(main)
