"""Parameter-perturbation robustness: a noise sweep over attention weights.

    python tools/noise_robustness.py CONFIG CHECKPOINT \
        [--sigmas 0.001 0.01 0.1 ...] [--seeds 3] \
        [--target decoder-attention|decoder|encoder-attention|REGEX] \
        [--layers each|0 1 ...] [--mode absolute|relative] [--out DIR] \
        [--resume] [--no-ablation] [--compare DIR ...] \
        [--groups [GROUP ...]] [--subspace-angles [--angle-images N]] \
        [--max-heads N | --no-shared-encoder] \
        [--cfg-options k=v ...] [--work-dir DIR] [--launcher pytorch]

For every sigma, each of --seeds noise draws adds N(0, sigma^2) noise
(relative mode: sigma times each tensor's RMS) to every selected parameter,
evaluates with mmseg's test loop and metric (as tools/test.py), and restores
the weights bit for bit. Besides the noisy points the sweep evaluates the
clean model and the model with the selected attention layers removed
(their residual updates set to zero), and measures how much each attention
layer changes the residual stream. Results are saved as each draw finishes
(OUT/results.{json,csv}, OUT/attention_usage.{json,csv}); --resume skips
what is done. OUT/robustness.png plots mIoU against sigma.

Summary metrics (OUT/summary.csv, results.json "summary", the printout):
the 95% t-confidence interval over draws at every sigma, retention
mIoU/clean, attention retention (mIoU - removed)/(clean - removed), the
normalised area under the mIoU-vs-log10(sigma) curve, and sigma_50 (where
mIoU falls to half of clean). --groups adds the same sweep with noise on
one parameter group at a time (bases U, step sizes, output projection,
biases; q/k/v for mmcv attention); --subspace-angles measures, per subspace
layer and sigma, the principal angles between span(U_k) and
span(U_k + noise) and the relative change of the attention update
(OUT/subspace_angles.{json,csv}). Compare sweeps with
tools/analysis_tools/compare_robustness.py.

Shared encoder: when every perturbed parameter lies in the decode head
(decoder-attention, decoder, or a regex matching only head parameters),
the noise draws are evaluated --max-heads at a time (default 8) in one
pass over the data: the encoder runs once per image (per window in slide
mode) and every perturbed copy of the head runs on its features, with the
same results as one draw at a time (the model's weights are not touched).
Otherwise, or with --no-shared-encoder, one draw at a time (with a
message).
"""
import argparse
import os.path as osp

import mmseg_whitebox  # noqa: F401  (compat + registration first)
from mmseg_whitebox.cli import (add_checkpoint_check_args, add_common_args,
                                resumable, run_tool, tool_parser)
from mmseg_whitebox.robustness import (NAMED_TARGETS, NoiseSweepOptions,
                                       PAPER_SIGMAS, format_summary,
                                       run_noise_sweep)
from mmseg_whitebox.robustness.groups import GROUPS
from mmseg_whitebox.robustness.perturbation import MODES


def layer_index(value: str):
    """A --layers entry: "each" or a layer index."""
    if value == 'each':
        return value
    try:
        return int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f'takes "each" or layer indices, not {value!r}') from None


def parse_args(argv=None) -> argparse.Namespace:
    p = tool_parser(__doc__)
    p.add_argument('config', help='config file path')
    p.add_argument('checkpoint', help='checkpoint file')
    p.add_argument('--sigmas', type=float, nargs='+',
                   default=list(PAPER_SIGMAS),
                   help='noise standard deviations (default: the CBSA '
                   'paper\'s grid, 1e-3 ... 1.0)')
    p.add_argument('--seeds', type=int, default=3,
                   help='noise draws per sigma (default 3)')
    p.add_argument('--seed', type=int, default=0,
                   help='seed of the first draw (draw i uses seed+i)')
    p.add_argument('--target', default='decoder-attention',
                   help=', '.join(NAMED_TARGETS) + ' (the first is the '
                   'default), or a regular expression over parameter names')
    p.add_argument('--layers', nargs='+', type=layer_index,
                   help='perturb one attention layer at a time (its '
                   'attention parameters within the target, also with '
                   '--target decoder): "each", or layer indices (printed by '
                   'the tool)')
    p.add_argument('--mode', choices=MODES, default='absolute',
                   help='absolute sigma (the paper\'s), or relative to each '
                   'tensor\'s RMS')
    p.add_argument('--out',
                   help='results folder (default: work_dirs/'
                   'noise_robustness/<config>_<target>_<mode>)')
    p.add_argument('--name', help='legend label (default: config name)')
    p.add_argument('--resume', action='store_true',
                   help='continue the sweep in --out, skipping finished '
                   'points')
    p.add_argument('--no-ablation', action='store_true',
                   help='skip the attention-removed reference')
    p.add_argument('--compare', nargs='+', default=[],
                   help='other sweep folders to overlay in robustness.png')
    p.add_argument('--groups', nargs='*', choices=GROUPS, metavar='GROUP',
                   help='also sweep each parameter group of the attention '
                   'layers alone (all groups the head has, or those named: '
                   + ', '.join(GROUPS) + ')')
    p.add_argument('--subspace-angles', action='store_true',
                   help='measure, per subspace attention layer and sigma, '
                   'the principal angles between span(U_k) and '
                   'span(U_k + noise) and the relative change of the '
                   'attention update (CBSA, MSSA, TSSA heads)')
    p.add_argument('--angle-images', type=int, default=4,
                   help='test images the update change is measured on '
                   '(default 4)')
    p.add_argument('--max-heads', type=int, default=8,
                   help='perturbed copies of the decode head evaluated '
                   'together in one pass over the data (shared-encoder '
                   'sweep; default 8; bounds the memory)')
    p.add_argument('--no-shared-encoder', action='store_true',
                   help='evaluate one noise draw at a time, encoder '
                   'included, even for decode-head noise')
    add_checkpoint_check_args(p, 'sweep')
    add_common_args(p)
    args = p.parse_args(argv)
    if args.layers and 'each' in args.layers:
        if args.layers != ['each']:
            p.error('--layers: "each" or layer indices, not both')
        args.layers = 'each'
    return args


def main(argv=None):
    args = parse_args(argv)
    options = NoiseSweepOptions(
        sigmas=args.sigmas, seeds=args.seeds, seed=args.seed,
        target=args.target, layers=args.layers, mode=args.mode, out=args.out,
        name=args.name, resume=args.resume, ablation=not args.no_ablation,
        compare=args.compare, groups=args.groups,
        subspace_angles=args.subspace_angles, angle_images=args.angle_images,
        max_heads=args.max_heads,
        shared_encoder=not args.no_shared_encoder,
        cfg_options=args.cfg_options, work_dir=args.work_dir,
        launcher=args.launcher,
        allow_partial_checkpoint=args.allow_partial_checkpoint,
        allow_nonfinite_weights=args.allow_nonfinite_weights)
    out = options.out_dir(args.config)
    with resumable(out, 'draws'):
        data = run_noise_sweep(args.config, args.checkpoint, options)
    from mmengine.dist import is_main_process
    if is_main_process():
        print(format_summary(data, options.label(args.config)))
        print(f'\nresults: {osp.join(out, "results.csv")}, '
              f'{osp.join(out, "results.json")}\nplot: '
              f'{osp.join(out, "robustness.png")}')
    return data


if __name__ == '__main__':
    run_tool(main)
