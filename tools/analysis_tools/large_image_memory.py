"""Peak resident memory of CPU inference on one large image, with mmseg's
``EncoderDecoder`` and with ``BoundedMemoryEncoderDecoder``, and the
agreement of their predictions.

    python tools/analysis_tools/large_image_memory.py CONFIG [CHECKPOINT]
        [--size 3000 4000] [--mode slide|whole] [--paths mmseg bounded]
        [--memory-limit GB] [--agreement-size 300 420] [--json FILE]
        [--cfg-options k=v ...]

Writes a smooth random image of --size (height width), runs
mmseg.apis.inference_model on it once per path, each in a fresh process,
and prints its peak RSS (VmHWM) and the rise during inference. Without a
checkpoint the weights are random (memory does not depend on them). mmseg's
path is capped at --memory-limit (default: 85% of the free memory) and
reported as failed past it, instead of swapping. When both paths finish,
their predictions on the large image are compared too; the agreement on an
--agreement-size image is always measured.
"""
import argparse

import mmseg_whitebox  # noqa: F401  (compat + registration first)
from mmseg_whitebox.analysis.large_image_memory import \
    large_image_memory_report
from mmseg_whitebox.cli import add_cfg_options_arg, run_tool, tool_parser


def parse_args(argv=None) -> argparse.Namespace:
    p = tool_parser(__doc__)
    p.add_argument('config')
    p.add_argument('checkpoint', nargs='?', help='default: random weights')
    p.add_argument('--size', type=int, nargs=2, default=[3000, 4000],
                   metavar=('H', 'W'), help='large image (default 3000 4000)')
    p.add_argument('--mode', choices=['slide', 'whole'],
                   help="test_cfg.mode (default: the config's)")
    p.add_argument('--paths', nargs='+', choices=['mmseg', 'bounded'],
                   default=['mmseg', 'bounded'])
    p.add_argument('--memory-limit', type=float, metavar='GB',
                   help="address-space allowance of mmseg's path (default "
                   '85%% of MemAvailable)')
    p.add_argument('--agreement-size', type=int, nargs=2, default=[300, 420],
                   metavar=('H', 'W'))
    p.add_argument('--threads', type=int, help='torch threads per process')
    p.add_argument('--json', help='also write the results to this file')
    add_cfg_options_arg(p)
    return p.parse_args(argv)


def main(argv=None) -> dict:
    args = parse_args(argv)
    return large_image_memory_report(
        args.config, args.checkpoint, args.size, args.mode, args.paths,
        args.memory_limit, args.agreement_size, args.threads,
        args.cfg_options, args.json)


if __name__ == '__main__':
    run_tool(main)
