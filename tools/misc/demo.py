"""The embedded demo behind ``make demo``, on CPU: synthetic ADE20K-layout
data (context variant), the demo models trained, tested, run through
``mmseg.apis`` on one image and swept over decoder-attention noise.

    python tools/misc/demo.py [--models NAME ...] [--iters N] [--no-sweep]

Everything lands in ``work_dirs/demo`` (``summary.json`` holds the
figures). The steps are :func:`mmseg_whitebox.apis.demo.run_demo`'s.
"""
import argparse

import mmseg_whitebox  # noqa: F401  (compat + registration first)
from mmseg_whitebox.apis.demo import (SUMMARY, DemoOptions,
                                      format_demo_results, run_demo)
from mmseg_whitebox.cli import (add_cfg_options_arg, add_dataclass_args,
                                options_from_args, run_tool, tool_parser)


def parse_args(argv=None) -> argparse.Namespace:
    p = tool_parser(__doc__)
    add_dataclass_args(p, DemoOptions)
    add_cfg_options_arg(p)
    return p.parse_args(argv)


def main(argv=None) -> int:
    options = options_from_args(DemoOptions, parse_args(argv))
    summary = run_demo(options)
    print(format_demo_results(summary))
    print(f'summary: {options.out}/{SUMMARY} '
          f'({summary["wall_time_s"]:.0f}s)')
    return 0


if __name__ == '__main__':
    run_tool(main)
