"""Peak resident memory of CPU inference on one large image, with mmseg's
``EncoderDecoder`` and with ``BoundedMemoryEncoderDecoder``, and the
agreement of their predictions.

    python tools/analysis_tools/large_image_memory.py CONFIG [CHECKPOINT]
        [--shape 3000 4000] [--mode slide|whole] [--paths mmseg bounded]
        [--memory-limit-gb GB] [--agreement-shape 300 420] [--json FILE]
        [--threads N] [--cfg-options k=v ...]

Writes a smooth random image of --shape (height width), runs
mmseg.apis.inference_model on it once per path, each in a fresh process,
and prints its peak RSS (VmHWM) and the rise during inference. Without a
checkpoint the weights are random (memory does not depend on them). mmseg's
path is capped at --memory-limit-gb (default: 85% of the free memory) and
reported as failed past it, instead of swapping. When both paths finish,
their predictions on the large image are compared too; the agreement on an
--agreement-shape image is always measured.
"""
import argparse

import mmseg_whitebox  # noqa: F401  (compat + registration first)
from mmseg_whitebox.analysis.large_image_memory import \
    large_image_memory_report
from mmseg_whitebox.cli import add_cfg_options_arg, run_tool, tool_parser
from mmseg_whitebox.cli.options import (add_json_arg, add_memory_limit_arg,
                                        add_shape_arg, add_threads_arg)


def parse_args(argv=None) -> argparse.Namespace:
    p = tool_parser(__doc__)
    p.add_argument('config')
    p.add_argument('checkpoint', nargs='?', help='default: random weights')
    add_shape_arg(p, 'the large image', default=(3000, 4000))
    p.add_argument('--mode', choices=['slide', 'whole'],
                   help="test_cfg.mode (default: the config's)")
    p.add_argument('--paths', nargs='+', choices=['mmseg', 'bounded'],
                   default=['mmseg', 'bounded'])
    add_memory_limit_arg(p, "address-space allowance of mmseg's path "
                         '(default 85%% of MemAvailable)')
    add_shape_arg(p, 'the image both paths are also compared on',
                  default=(300, 420), flag='--agreement-shape')
    add_threads_arg(p, 'torch threads per process')
    add_json_arg(p, 'also write the results to this file')
    add_cfg_options_arg(p)
    return p.parse_args(argv)


def main(argv=None) -> dict:
    args = parse_args(argv)
    return large_image_memory_report(
        args.config, args.checkpoint, args.shape, args.mode, args.paths,
        args.memory_limit_gb, args.agreement_shape, args.threads,
        args.cfg_options, args.json)


if __name__ == '__main__':
    run_tool(main)
