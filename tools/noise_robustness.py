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

sys.path.insert(0, osp.dirname(osp.dirname(osp.abspath(__file__))))
import mmseg_whitebox  # noqa: E402,F401  (compat + registration first)
from mmseg_whitebox.robustness import (PAPER_SIGMAS, NoiseSweep,  # noqa: E402
                                       ResultStore, RunnerEvaluation,
                                       build_test_runner, select_parameters)
from mmseg_whitebox.robustness.plotting import (load_results,  # noqa: E402
                                                plot_robustness,
                                                result_label)
from mmseg_whitebox.robustness.sites import find_attention_sites  # noqa
from mmseg_whitebox.robustness.sweep import attention_unused  # noqa: E402
from mmseg_whitebox.utils.cli import ToolError, add_common_args  # noqa: E402


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
                   help='decoder-attention (default), decoder, '
                   'encoder-attention, or a regular expression over '
                   'parameter names')
    p.add_argument('--layers', nargs='+',
                   help='perturb attention layers one at a time: "each", or '
                   'layer indices (printed by the tool)')
    p.add_argument('--mode', choices=['absolute', 'relative'],
                   default='absolute',
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
    return p.parse_args(argv)


def make_selections(model, args):
    if not args.layers:
        return [select_parameters(model, args.target)]
    if args.layers == ['each']:
        scope = ('backbone' if args.target == 'encoder-attention' else
                 'decode_head')
        indices = [s.index for s in find_attention_sites(model, scope)]
        if not indices:
            raise ToolError(f'--layers each: no attention layers under '
                            f'{scope}')
    else:
        try:
            indices = [int(i) for i in args.layers]
        except ValueError:
            raise ToolError('--layers takes "each" or layer indices')
    return [select_parameters(model, args.target, [i]) for i in indices]


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
    if args.seeds < 1:
        raise ToolError('--seeds must be >= 1')
    if any(s < 0 for s in args.sigmas):
        raise ToolError('--sigmas must be >= 0')
    for folder in args.compare:
        if not osp.isfile(osp.join(folder, 'results.json')):
            raise ToolError(f'--compare {folder}: no results.json there')
    name = osp.splitext(osp.basename(args.config))[0]
    target_tag = args.target if args.target in (
        'decoder-attention', 'decoder', 'encoder-attention') else 'regex'
    out = args.out or osp.join('work_dirs', 'noise_robustness',
                               f'{name}_{target_tag}_{args.mode}')
    if (osp.isfile(osp.join(out, 'results.json')) and not args.resume):
        raise ToolError(f'{out} already holds sweep results; pass --resume '
                        'to continue them or choose another --out')

    runner = build_test_runner(args.config, args.checkpoint,
                               args.cfg_options, args.work_dir,
                               args.launcher)
    evaluation = RunnerEvaluation(runner)
    try:
        selections = make_selections(evaluation.model, args)
    except ValueError as exc:
        raise ToolError(str(exc))

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
        raise ToolError(str(exc))
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
        runs += [(result_label(load_results(f), f), load_results(f))
                 for f in args.compare]
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
    main()
