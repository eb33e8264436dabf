"""Parameter-perturbation robustness: a noise sweep over attention weights.

    python tools/noise_robustness.py CONFIG CHECKPOINT \
        [--sigmas 0.001 0.01 0.1 ...] [--draws 3] [--seed 0] \
        [--target decoder-attention|decoder|encoder-attention|REGEX] \
        [--layers each|0 1 ...] [--mode absolute|relative] [--out DIR] \
        [--resume] [--no-ablation] [--compare DIR ...] \
        [--groups [GROUP ...]] [--subspace-angles [--angle-images N]] \
        [--max-heads N | --no-shared-encoder] \
        [--cfg-options k=v ...] [--work-dir DIR] [--launcher pytorch]
        [--device cuda|cpu]

For every sigma, each of --draws noise draws adds N(0, sigma^2) noise
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
from mmseg_whitebox.cli import options_from_args, resumable, run_tool
from mmseg_whitebox.cli.robustness_parsers import noise_sweep_parser
from mmseg_whitebox.robustness import (NoiseSweepOptions, format_summary,
                                       run_noise_sweep)


def parse_args(argv=None) -> argparse.Namespace:
    return noise_sweep_parser(__doc__).parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    options = options_from_args(NoiseSweepOptions, args)
    out = options.out_dir(args.config)
    with resumable(out, 'draws'):
        data = run_noise_sweep(args.config, args.checkpoint, options)
    from mmengine.dist import is_main_process
    if is_main_process():
        print(format_summary(data, options.legend_label(args.config)))
        print(f'\nresults: {osp.join(out, "results.csv")}, '
              f'{osp.join(out, "results.json")}\nplot: '
              f'{osp.join(out, "robustness.png")}')
    return data


if __name__ == '__main__':
    run_tool(main)
