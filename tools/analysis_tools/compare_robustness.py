"""Compare noise sweeps: one table (Markdown + CSV) and one plot.

    python tools/analysis_tools/compare_robustness.py SWEEP_DIR [...] \
        --out DIR [--labels A B ...] [--sigmas 0.01 0.1 ...] [--title T]

Each SWEEP_DIR is an output folder of tools/noise_robustness.py (older ones
too: everything is computed from the stored draws). Per model and
selection: clean and attention-removed mIoU, the normalised AUC over
log10(sigma) with its 95% CI over seeds, sigma_50, and per sigma the mean
+- 95% CI, retention and attention retention; AUC and sigma_50 are taken
over the sigmas all sweeps share. Writes DIR/comparison.{md,csv,png}.
"""
import argparse

from mmseg_whitebox.cli import run_tool, tool_parser
from mmseg_whitebox.cli.options import (add_labels_arg, add_out_arg,
                                        add_sigmas_arg, add_title_arg)
from mmseg_whitebox.robustness.compare import compare_sweeps


def parse_args(argv=None) -> argparse.Namespace:
    p = tool_parser(__doc__)
    p.add_argument('folders', nargs='+', help='noise sweep output folders')
    add_out_arg(p, 'folder for comparison.{md,csv,png} (default: '
                'robustness_comparison)', default='robustness_comparison')
    add_labels_arg(p)
    add_sigmas_arg(p, 'per-sigma table columns (default: every sigma the '
                   'sweeps share)')
    add_title_arg(p, 'table and plot title')
    return p.parse_args(argv)


def main(argv=None) -> dict:
    args = parse_args(argv)
    # bad input is a ToolError raised where it is found
    out = compare_sweeps(args.folders, args.out, args.labels,
                         args.sigmas, args.title)
    print(out['markdown'])
    print(f'wrote {out["md"]}, {out["csv"]}, {out["png"]}')
    return out


if __name__ == '__main__':
    run_tool(main)
