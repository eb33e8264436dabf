"""Run the project's benchmarks on one GPU in float32 and bfloat16: one report.

    python tools/analysis_tools/gpu_report.py --out DIR [--device cuda] \
        [--dry-run]

The decoder, encoder, training-step and shared-encoder-sweep benchmarks
(the benchmark_*.py tools of this folder) at GPU sizes -- decode heads on
ViT-S features for images of 512 to 4096 pixels square (up to 65,536
tokens), encoders and the training step (ViT-S + Segmenter, ViT-S + CBSA,
CBT-S + CBSA, each also with the banded loss) on crops of 512 to 2048
pixels square, the sweep on 4 images of 512x683 with 20 settings -- each
in float32 and under bfloat16 autocast, sized to take under 8 minutes on
one current GPU. Writes DIR/gpu_report.md (one table per benchmark, with
the device name, torch version and date) and DIR/<benchmark>.json. On a
machine without a GPU it says so in one line and exits 0; --dry-run runs
the same plan on the CPU at tiny sizes instead (a check of the code
path: its figures mean nothing). See docs/benchmarks.md ("GPU report").
"""
import argparse

import mmseg_whitebox  # noqa: F401  (compat + registration first)
from mmseg_whitebox.cli import run_tool, tool_parser
from mmseg_whitebox.cli.options import add_device_arg, add_out_arg
from mmseg_whitebox.utils.tool_error import ToolError


def parse_args(argv=None) -> argparse.Namespace:
    p = tool_parser(__doc__)
    add_out_arg(p, 'folder for gpu_report.md and the JSONs', required=True)
    add_device_arg(p, 'cuda', 'cuda or cuda:N (default: cuda)')
    p.add_argument('--dry-run', action='store_true',
                   help='the same plan on the CPU at tiny sizes')
    return p.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    from mmseg_whitebox.analysis.gpu_report import (REPORT, missing_gpu,
                                                    run_gpu_report)
    try:
        missing = None if args.dry_run else missing_gpu(args.device)
    except RuntimeError as exc:  # not a device name torch knows
        raise ToolError(f'--device {args.device}: {exc}') from exc
    if missing:
        print(missing)
        return 0
    run_gpu_report(args.out, args.device, args.dry_run)
    print(f'\nwritten to {args.out}: {REPORT} and one JSON per benchmark')
    return 0


if __name__ == '__main__':
    run_tool(main)
