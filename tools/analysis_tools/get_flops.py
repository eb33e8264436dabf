"""Whole-model and per-module FLOPs and parameters of a segmentor config.

    python tools/analysis_tools/get_flops.py CONFIG [--shape H [W]] \
        [--depth 3] [--json FILE] [--cfg-options k=v ...]

Traces the encoder and decode head once on a 1 x 3 x H x W input
(default: the config's crop size) with mmengine's FlopAnalyzer, with the
attention products the white-box operators and mmseg's ViT use counted
(mmseg_whitebox.analysis.complexity). One fused multiply-add counts as one
flop, as in mmengine and fvcore; papers that count 2 per multiply-add give
twice these figures. Weights are random: FLOPs do not depend on them.
"""
import argparse

import mmseg_whitebox  # noqa: F401  (compat + registration first)
from mmseg_whitebox.analysis.complexity import (config_complexity,
                                                default_shape)
from mmseg_whitebox.engine.config import read_config
from mmseg_whitebox.cli import add_cfg_options_arg, run_tool, tool_parser
from mmseg_whitebox.cli.options import add_json_arg, add_shape_arg
from mmseg_whitebox.utils.atomic import write_json
from mmseg_whitebox.utils.tool_error import InputError, ToolError


def parse_args(argv=None) -> argparse.Namespace:
    p = tool_parser(__doc__)
    p.add_argument('config')
    add_shape_arg(p, 'input height and width (one value: square; '
                  'default: the config\'s crop size)')
    p.add_argument('--depth', type=int, default=3,
                   help='module levels in the table (default 3)')
    add_json_arg(p, 'also write the totals to this file')
    add_cfg_options_arg(p)
    return p.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    cfg = read_config(args.config, args.cfg_options)
    shape = default_shape(cfg) if args.shape is None else args.shape
    try:
        result = config_complexity(cfg, shape, max_depth=args.depth)
    except InputError as exc:  # e.g. a CBSA grid larger than the tokens
        raise ToolError(f'the model cannot run at {shape[0]}x{shape[1]}: '
                        f'{exc}') from exc
    print(result.table)
    print()
    print(result.summary())
    if args.json:
        write_json(args.json, dict(result.to_dict(), config=args.config),
                   indent=2)
    return result


if __name__ == '__main__':
    run_tool(main)
