"""Time a shared-encoder noise sweep against one evaluation per setting.

    python tools/analysis_tools/benchmark_shared_encoder.py \
        [CONFIG] [--num-images 2] [--shape 512 683] [--settings 20] \
        [--max-heads 20] [--target decoder-attention] [--threads N] \
        [--device cpu|cuda] [--amp [--amp-dtype float16|bfloat16]] \
        [--data-root DIR] [--profile] [--out DIR] [--cfg-options k=v ...]

CONFIG (default: configs/cbsa/cbsa_vit-s_8xb1-160k_ade20k-512x512.py):
builds its model with random weights (no pretrained encoder, no
checkpoint), writes --num-images synthetic ADE20K-layout validation images
of exactly --shape (mmseg_whitebox.datasets.synthetic_ade20k) and
evaluates --settings noise settings (the CBSA paper's sigmas, one draw
each) on them with the config's own test pipeline, inference mode (slide
for the ADE20K configs) and IoUMetric: once one setting at a time
(ParameterNoise + the test loop, encoder included, as tools/
noise_robustness.py --no-shared-encoder) and once with the shared encoder
(--max-heads head copies per pass). Prints both times, their ratio
(shared / sequential), the encoder's share of one evaluation and whether
every setting's metrics are identical (exit 2 if not); --amp runs both
under autocast, --out writes benchmark.json and the one-row table
benchmark.md there; --profile adds the ops that take the time of a shared
sweep (torch's profiler, one more, untimed run). A measurement to print,
not a test: the ratio depends on the machine. The last measurements are
in docs/benchmarks.md.
"""
import argparse
import os.path as osp
import sys

import mmseg_whitebox  # noqa: F401  (compat + registration first)
from mmseg_whitebox.cli import add_cfg_options_arg, run_tool, tool_parser
from mmseg_whitebox.cli.options import (add_amp_args, add_data_root_arg,
                                        add_device_arg, add_num_images_arg,
                                        add_out_arg, add_shape_arg,
                                        add_threads_arg, amp_dtype)
from mmseg_whitebox.utils.tool_error import ToolError

REPO = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))
DEFAULT_CONFIG = osp.join('configs', 'cbsa',
                          'cbsa_vit-s_8xb1-160k_ade20k-512x512.py')


def parse_args(argv=None) -> argparse.Namespace:
    p = tool_parser(__doc__)
    p.add_argument('config', nargs='?', default=DEFAULT_CONFIG,
                   help=f'the model\'s config (default: {DEFAULT_CONFIG})')
    add_num_images_arg(p, 2, 'synthetic validation images')
    add_shape_arg(p, 'size of every image', default=(512, 683))
    p.add_argument('--settings', type=int, default=20,
                   help='noise settings, one draw per sigma of the paper\'s '
                   'grid, repeated if more (default 20)')
    p.add_argument('--max-heads', type=int, default=None,
                   help='head copies per pass (default: all settings)')
    p.add_argument('--target', default='decoder-attention')
    add_threads_arg(p, 'torch intra-op threads (default: torch\'s)')
    add_device_arg(p)
    add_amp_args(p, 'evaluate both sweeps')
    add_data_root_arg(p, 'where the synthetic dataset is written (DIR/'
                      'ADEChallengeData2016; default: a temporary folder)')
    p.add_argument('--profile', action='store_true',
                   help='print the ops that take the shared sweep\'s time')
    add_out_arg(p, 'folder for benchmark.json and benchmark.md (default: '
                'none, printed only)')
    add_cfg_options_arg(p)
    args = p.parse_args(argv)
    if args.num_images < 1 or args.settings < 1:
        p.error('--num-images and --settings must be >= 1')
    if args.max_heads is not None and args.max_heads < 1:
        p.error('--max-heads must be >= 1')
    return args


def main(argv=None) -> float:
    args = parse_args(argv)
    from mmseg_whitebox.analysis.shared_encoder_benchmark import (
        SharedSweepOptions, run_shared_encoder_benchmark)
    options = SharedSweepOptions(
        config=(args.config if osp.isabs(args.config) else
                osp.join(REPO, args.config)),
        images=args.num_images, image_size=args.shape,
        settings=args.settings, max_heads=args.max_heads,
        target=args.target, device=args.device, threads=args.threads,
        data_dir=args.data_root, cfg_options=args.cfg_options,
        profile=args.profile, amp=amp_dtype(args), out=args.out)
    report = run_shared_encoder_benchmark(options)
    seq, shared = report['sequential_s'], report['shared_s']
    print(f'sequential: {seq:.1f} s ({args.settings} evaluations)')
    print(f'shared encoder: {shared:.1f} s ({report["passes"]} pass(es), '
          f'up to {report["max_heads"]} head copies each)')
    print(f'ratio shared / sequential: {report["ratio"]:.3f}')
    share = report['encoder_s'] / report['evaluation_s']
    per_setting = (shared - report['passes'] * report['encoder_s']
                   ) / args.settings
    print(f'encoder (extract_feat): {report["encoder_s"]:.1f} s of '
          f'{report["evaluation_s"]:.1f} s in one evaluation ({share:.0%}); '
          f'the rest of a shared pass, per setting (head, merging, argmax, '
          f'metric): about {per_setting:.2f} s')
    if 'profile' in report:
        print('\nthe shared sweep, by op (torch profiler):\n'
              + report['profile'])
    print('identical metrics in every setting: '
          + ('yes' if report['identical'] else 'NO'))
    if not report['identical']:
        for sigma, a, b in zip(report['sigmas'],
                               report['metrics']['sequential'],
                               report['metrics']['shared']):
            print(f'  sigma {sigma:g}: {a} vs {b}', file=sys.stderr)
        raise ToolError('the shared-encoder results differ')
    return report['ratio']


if __name__ == '__main__':
    run_tool(main)
