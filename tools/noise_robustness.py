"""Parameter-perturbation robustness: a noise sweep over attention weights.

    python tools/noise_robustness.py CONFIG CHECKPOINT \
        [--sigmas 0.001 0.01 0.1 ...] [--seeds 3] \
        [--target decoder-attention|decoder|encoder-attention|REGEX] \
        [--layers each|0 1 ...] [--mode absolute|relative] [--out DIR] \
        [--resume] [--no-ablation] [--compare DIR ...] \
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
"""
import argparse
import os.path as osp
import sys

import mmseg_whitebox  # noqa: F401  (compat + registration first)
from mmseg_whitebox.robustness import (NAMED_TARGETS, PAPER_SIGMAS,
                                       NoiseSweep, ResultStore,
                                       RunnerEvaluation, attention_unused,
                                       build_test_runner,
                                       check_sweep_settings, select_layers)
from mmseg_whitebox.robustness.perturbation import MODES
from mmseg_whitebox.robustness.plotting import (load_results,
                                                plot_robustness,
                                                result_label)
from mmseg_whitebox.utils.cli import ToolError, add_common_args, run_tool


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
    p = argparse.ArgumentParser(
        description='Noise sweep over a model\'s attention parameters',
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=__doc__.split('\n\n', 1)[1])
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
                   help='perturb attention layers one at a time: "each", or '
                   'layer indices (printed by the tool)')
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
    add_common_args(p)
    args = p.parse_args(argv)
    if args.layers and 'each' in args.layers:
        if args.layers != ['each']:
            p.error('--layers: "each" or layer indices, not both')
        args.layers = 'each'
    return args


def print_summary(data, label: str) -> None:
    clean = data['clean']
    print(f'\n== {label}: mIoU under {data["setup"]["mode"]} parameter '
          'noise')
    print(f'clean: mIoU {clean["mIoU"]:.2f}')
    for sel, abl in data['ablation'].items():
        value = abl['metrics']['mIoU']
        verdict = ('attention unused: robustness is not informative'
                   if attention_unused(clean['mIoU'], value) else
                   'attention is used')
        print(f'{sel} removed: mIoU {value:.2f} ({value - clean["mIoU"]:+.2f}'
              f'; {verdict})')
    print(f'{"selection":<26}{"sigma":>9}{"mean":>8}{"std":>7}{"min":>8}'
          f'{"max":>8}{"non-finite":>12}')
    for p in sorted(data['points'], key=lambda p: (p['selection'],
                                                   p['sigma'])):
        print(f'{p["selection"]:<26}{p["sigma"]:>9g}{p["mIoU_mean"]:>8.2f}'
              f'{p["mIoU_std"]:>7.2f}{p["mIoU_min"]:>8.2f}'
              f'{p["mIoU_max"]:>8.2f}{p["nonfinite_fraction"]:>12.2%}')
    if data['attention_usage']:
        print('attention usage, ||update|| / ||residual stream|| '
              '(clean evaluation):')
        for row in data['attention_usage']:
            print(f'  [{row["layer"]}] {row["site"]:<40} mean '
                  f'{row["ratio_mean"]:.4f} (min {row["ratio_min"]:.4f}, '
                  f'max {row["ratio_max"]:.4f})')


def main(argv=None):
    args = parse_args(argv)
    try:
        check_sweep_settings(args.sigmas, args.seeds, args.mode)
        for folder in args.compare:
            load_results(folder)  # (read again for the plot, when newer)
    except (ValueError, FileNotFoundError) as exc:
        raise ToolError(str(exc)) from exc
    name = osp.splitext(osp.basename(args.config))[0]
    target_tag = args.target if args.target in NAMED_TARGETS else 'regex'
    out = args.out or osp.join('work_dirs', 'noise_robustness',
                               f'{name}_{target_tag}_{args.mode}')
    try:
        ResultStore.check_out_dir(out, args.resume)
    except FileExistsError as exc:
        raise ToolError(str(exc)) from exc

    runner = build_test_runner(args.config, args.checkpoint,
                               args.cfg_options, args.work_dir,
                               args.launcher)
    evaluation = RunnerEvaluation(runner)
    try:
        selections = select_layers(evaluation.model, args.target,
                                   args.layers)
    except ValueError as exc:
        raise ToolError(str(exc)) from exc

    from mmengine.dist import is_main_process
    from mmengine.utils import ProgressBar
    main_process = is_main_process()
    if main_process:
        for sel in selections:
            print(sel.describe())
    setup = dict(config=args.config, checkpoint=args.checkpoint,
                 target=args.target, mode=args.mode, num_seeds=args.seeds,
                 seed=args.seed, name=args.name or name,
                 selections=[s.label for s in selections],
                 num_parameters={s.label: s.numel for s in selections})
    try:
        store = ResultStore(out if main_process else None, setup,
                            resume=args.resume)
    except (FileExistsError, ValueError) as exc:
        raise ToolError(str(exc)) from exc
    sweep = NoiseSweep(evaluation.model, evaluation, selections,
                       args.sigmas, args.seeds, args.mode, args.seed, store,
                       ablation=not args.no_ablation)
    if main_process:
        bar = ProgressBar(sweep.num_evaluations)
        sweep.on_progress = lambda status: bar.update()

    def plot():
        if not main_process or not store.data.get('clean'):
            return None
        runs = [(args.name or name, store.data)]
        runs += [(result_label(results, folder), results)
                 for folder, results in ((f, load_results(f))
                                         for f in args.compare)]
        return plot_robustness(runs, osp.join(out, 'robustness.png'))

    try:
        data = sweep.run()
    except KeyboardInterrupt:
        plot()
        print(f'\ninterrupted: finished draws are saved in {out}; rerun '
              'with --resume to continue', file=sys.stderr)
        raise SystemExit(130)
    finally:
        evaluation.close()
    if main_process:
        png = plot()
        print_summary(data, args.name or name)
        print(f'\nresults: {osp.join(out, "results.csv")}, '
              f'{osp.join(out, "results.json")}\nplot: {png}')
    return data


if __name__ == '__main__':
    run_tool(main)
