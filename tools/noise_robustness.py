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
from mmseg_whitebox.robustness import (NAMED_TARGETS, PAPER_SIGMAS,
                                       NoiseSweep, ResultStore,
                                       RunnerEvaluation, attention_unused,
                                       build_test_runner,
                                       check_sweep_settings, select_layers)
from mmseg_whitebox.robustness.groups import GROUPS, group_selections
from mmseg_whitebox.robustness.perturbation import MODES
from mmseg_whitebox.robustness.plotting import (load_results,
                                                plot_robustness,
                                                result_label)
from mmseg_whitebox.robustness.subspaces import (missing_sigmas,
                                                 subspace_change,
                                                 subspace_sites,
                                                 take_batches)
from mmseg_whitebox.robustness.summary import (fmt, markdown_table,
                                               summarize_results,
                                               summary_rows)
from mmseg_whitebox.utils.cli import (ToolError, add_checkpoint_check_args,
                                      add_common_args, checkpoint_check_hook,
                                      resumable, run_tool, tool_parser)
from mmseg_whitebox.utils.run_checks import reported_errors


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
    if args.angle_images < 1:
        p.error('--angle-images must be >= 1')
    if args.max_heads < 1:
        p.error('--max-heads must be >= 1')
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
    shown = set()  # parameter groups share their layers' ablation
    for sel, abl in data['ablation'].items():
        if tuple(abl.get('sites', [sel])) in shown:
            continue
        shown.add(tuple(abl.get('sites', [sel])))
        value = abl['metrics']['mIoU']
        verdict = ('attention unused: robustness is not informative'
                   if attention_unused(clean['mIoU'], value) else
                   'attention is used')
        print(f'{sel} removed: mIoU {value:.2f} ({value - clean["mIoU"]:+.2f}'
              f'; {verdict})')
    summaries = summarize_results(data)
    width = max([26] + [len(s) + 2 for s in summaries])
    print(f'{"selection":<{width}}{"sigma":>9}{"mean":>8}{"95% CI":>8}'
          f'{"min":>8}{"max":>8}{"retain":>8}{"att.ret":>8}'
          f'{"non-finite":>12}')
    stored = {(p['selection'], p['sigma']): p for p in data['points']}
    for sel, summary in summaries.items():
        for q in summary['points']:
            p = stored[sel, q['sigma']]
            ci = '-' if q['ci95'] is None else f'+-{q["ci95"]:.2f}'
            print(f'{sel:<{width}}{q["sigma"]:>9g}{q["mean"]:>8.2f}'
                  f'{ci:>8}{p["mIoU_min"]:>8.2f}{p["mIoU_max"]:>8.2f}'
                  f'{fmt(q["retention"]):>8}'
                  f'{fmt(q["attention_retention"]):>8}'
                  f'{p["nonfinite_fraction"]:>12.2%}')
    print('\nsummary (AUC: area under mIoU over log10 sigma / (range x '
          'clean); sigma_50: mIoU at half of clean):')
    print(markdown_table(summary_rows(
        summaries, label=label,
        num_parameters=data['setup'].get('num_parameters'))))
    if data['attention_usage']:
        print('attention usage, ||update|| / ||residual stream|| '
              '(clean evaluation):')
        for row in data['attention_usage']:
            print(f'  [{row["layer"]}] {row["site"]:<40} mean '
                  f'{row["ratio_mean"]:.4f} (min {row["ratio_min"]:.4f}, '
                  f'max {row["ratio_max"]:.4f})')
    if data.get('subspace_angles'):
        print('subspace change under noise (principal angles between '
              'span(U_k) and span(U_k + noise), degrees; relative change of '
              'the attention update, isolated / propagated):')
        for r in data['subspace_angles']:
            print(f'  {r["selection"]} [{r["layer"]}] {r["site"]:<34} sigma '
                  f'{r["sigma"]:<7g} angle mean {r["angle_mean_deg"]:7.3f} '
                  f'max {r["angle_max_deg"]:7.3f}  update change '
                  f'{r["update_change_isolated"]:.4f} / '
                  f'{r["update_change_propagated"]:.4f}')


def measure_subspaces(evaluation, selections, store, args) -> None:
    """--subspace-angles: the rows not measured yet, saved per selection."""
    batches = take_batches(evaluation.runner.test_dataloader,
                           args.angle_images)
    done = store.data.get('subspace_angles', [])
    for sel in selections:
        sigmas = missing_sigmas(done, sel.label, args.sigmas)
        if not subspace_sites(sel) or not sigmas:
            continue
        print(f'subspace angles: {sel.label}, {len(sigmas)} sigmas x '
              f'{args.seeds} draws on {args.angle_images} images')
        store.add_subspace_rows(subspace_change(
            evaluation.model, sel, sigmas, batches, args.seeds, args.mode,
            args.seed))


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
    runner.register_hook(checkpoint_check_hook(args))
    with reported_errors(runner.cfg):
        evaluation = RunnerEvaluation(runner)
    try:
        bases = select_layers(evaluation.model, args.target, args.layers)
        selections = list(bases)
        if args.groups is not None:
            selections = [g for sel in bases for g in [sel] +
                          group_selections(sel, args.groups or None)]
    except ValueError as exc:
        raise ToolError(str(exc)) from exc
    if args.subspace_angles and not any(subspace_sites(s) for s in bases):
        raise ToolError(
            '--subspace-angles needs subspace attention layers (CBSA, MSSA, '
            'TSSA) among the perturbed ones; perturbed layers: ' +
            (', '.join(st.name for s in bases for st in s.sites) or 'none'))

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
                 num_parameters={s.label: s.numel for s in selections},
                 cfg_options=args.cfg_options or {})
    try:
        store = ResultStore.on_every_rank(out, setup, resume=args.resume)
    except (FileExistsError, ValueError) as exc:
        raise ToolError(str(exc)) from exc
    if args.subspace_angles:
        measure_subspaces(evaluation, bases, store, args)
    sweep = NoiseSweep(evaluation.model, evaluation, selections,
                       args.sigmas, args.seeds, args.mode, args.seed, store,
                       ablation=not args.no_ablation,
                       shared=None if args.no_shared_encoder else
                       evaluation.shared_encoder(args.max_heads),
                       log=(lambda msg: print('\n' + msg)) if main_process
                       else (lambda msg: None))
    if args.no_shared_encoder and main_process:
        print('shared-encoder sweep off (--no-shared-encoder): evaluating '
              'one noise setting at a time')
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
        with resumable(out, 'draws', plot):
            data = sweep.run()
    except ValueError as exc:  # e.g. an evaluator without mIoU
        raise ToolError(str(exc)) from exc
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
