"""Overlay the robustness curves of several noise sweeps in one plot.

    python tools/analysis_tools/plot_robustness.py SWEEP_DIR [SWEEP_DIR ...] \
        --out-file compare.png [--labels A B ...] [--title TEXT]

Each SWEEP_DIR is an output folder of tools/noise_robustness.py. Every model
gets its noise curve (the mean over draws with 95% t-interval error bars
and a min-max band from 5 draws per sigma, the min-max band alone with
fewer; the legend says which and over how many draws, with AUC and
sigma_50), its clean mIoU (dashed) and its mIoU with the perturbed
attention removed (dotted), on an mIoU axis from 0 to 100. For a table as
well, see compare_robustness.py.
"""
import argparse

from mmseg_whitebox.cli import run_tool, tool_parser
from mmseg_whitebox.cli.options import (add_labels_arg, add_out_file_arg,
                                        add_title_arg)
from mmseg_whitebox.robustness.plotting import plot_folders
from mmseg_whitebox.utils.tool_error import ToolError


def parse_args(argv=None) -> argparse.Namespace:
    p = tool_parser(__doc__)
    p.add_argument('folders', nargs='+', help='noise sweep output folders')
    add_out_file_arg(p, 'PNG to write (default: robustness_compare.png)',
                     default='robustness_compare.png')
    add_labels_arg(p)
    add_title_arg(p, 'plot title')
    return p.parse_args(argv)


def main(argv=None) -> str:
    args = parse_args(argv)
    if args.labels and len(args.labels) != len(args.folders):
        raise ToolError('give one --labels entry per folder')
    path = plot_folders(args.folders, args.out_file, args.labels, args.title)
    print(f'wrote {path}')
    return path


if __name__ == '__main__':
    run_tool(main)
