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
import os.path as osp
import tempfile

import mmseg_whitebox  # noqa: F401  (compat + registration first)
from mmseg_whitebox.analysis.large_image_memory import (
    GIB, agreement, format_bytes, measure_in_subprocess, write_test_image)
from mmseg_whitebox.analysis.memory import available_memory
from mmseg_whitebox.apis.model_index import read_config
from mmseg_whitebox.cli import add_cfg_options_arg, run_tool, tool_parser
from mmseg_whitebox.utils.atomic import write_json
from mmseg_whitebox.utils.input_checks import check_checkpoint
from mmseg_whitebox.utils.tool_error import ToolError


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
    check_checkpoint(args.checkpoint)
    read_config(args.config, args.cfg_options)  # missing: a ToolError
    options = {k: v for k, v in (args.cfg_options or {}).items()}
    if min(args.size + args.agreement_size) < 1:
        raise ToolError('--size and --agreement-size take positive sizes')
    if args.memory_limit is not None and args.memory_limit <= 0:
        raise ToolError('--memory-limit must be positive (GB)')
    import torch
    limit = (args.memory_limit * GIB if args.memory_limit else
             0.85 * (available_memory(torch.device('cpu')) or 0)) or None
    height, width = args.size
    results = dict(config=args.config, checkpoint=args.checkpoint,
                   size=[height, width], mode=args.mode, paths={})
    with tempfile.TemporaryDirectory() as tmp:
        image = write_test_image(osp.join(tmp, 'large.jpg'), height, width)
        for path in args.paths:
            spec = dict(config=args.config, checkpoint=args.checkpoint,
                        image=image, bounded=path == 'bounded',
                        mode=args.mode, threads=args.threads,
                        options=options,
                        save_pred=osp.join(tmp, f'{path}.npy'),
                        memory_limit=limit if path == 'mmseg' else None)
            res = measure_in_subprocess(spec)
            results['paths'][path] = res
            if res['ok']:
                print(f'{path:8s} {height}x{width}: peak RSS '
                      f'{format_bytes(res["peak_rss"])} (rise during '
                      f'inference {format_bytes(res["inference_rise"])}), '
                      f'{res["seconds"]:.1f} s, seg_logits '
                      f'{res["seg_logits_shape"]}')
            else:
                print(f'{path:8s} {height}x{width}: failed: {res["error"]} '
                      f'(peak RSS {format_bytes(res["peak_rss"])}'
                      + (f', limit {format_bytes(int(limit))}'
                         if spec['memory_limit'] else '') + ')')
        if all(results['paths'].get(p, {}).get('ok')
               for p in ('mmseg', 'bounded')):
            import numpy as np
            a = np.load(osp.join(tmp, 'mmseg.npy'))
            b = np.load(osp.join(tmp, 'bounded.npy'))
            results['large_agreement'] = float((a == b).mean())
            print(f'agreement {height}x{width}: '
                  f'{100 * results["large_agreement"]:.4f}% of pixels')
    ah, aw = args.agreement_size
    same, shapes = agreement(args.config, args.checkpoint, ah, aw,
                             args.mode, options=options)
    results['agreement'] = dict(size=[ah, aw], fraction=same, **shapes)
    print(f'agreement {ah}x{aw}: {100 * same:.4f}% of pixels, '
          f'{shapes["classes"]} classes predicted (seg_logits '
          f'mmseg {shapes["default_seg_logits"]}, bounded '
          f'{shapes["bounded_seg_logits"]})')
    if args.json:
        write_json(args.json, results, indent=2)
    return results


if __name__ == '__main__':
    run_tool(main)
