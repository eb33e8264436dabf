"""The whole noise sweep of ``tools/noise_robustness.py`` as one call
(:func:`run_noise_sweep`), and the printout it shows after it
(:func:`format_summary`)::

    data = run_noise_sweep('configs/...py', 'ckpt.pth',
                           NoiseSweepOptions(sigmas=[0.01, 0.1], draws=2))
"""
from __future__ import annotations

import os.path as osp
from typing import Any, Callable, Dict, Optional

from mmseg_whitebox.engine.runner_config import (build_test_runner,
                                                 run_device, runner_config)
from mmseg_whitebox.engine.pretrained import reported_errors
from mmseg_whitebox.engine.hooks import CheckpointCheckHook
from mmseg_whitebox.utils.tool_error import ToolError
from .evaluation import RunnerEvaluation
from .groups import group_selections
from .plotting import load_results, load_runs, plot_robustness
from .selection import select_layers
from .subspaces import (missing_sigmas, subspace_change, subspace_sites,
                        take_batches)
from .summary import (attention_unused, fmt, markdown_table,
                      summarize_results, summary_rows)
from .sweep import NoiseSweep, ResultStore
from .sweep_options import NoiseSweepOptions

Log = Callable[[str], None]


def run_noise_sweep(config: str,
                    checkpoint: str,
                    options: Optional[NoiseSweepOptions] = None,
                    log: Log = print) -> Dict[str, Any]:
    """Run (or, with ``options.resume``, continue) the sweep: build the
    test Runner as ``tools/test.py`` does, select what to perturb, measure
    subspace angles if asked, run the :class:`~.sweep.NoiseSweep` and plot
    ``robustness.png`` (also on Ctrl-C); returns the results as saved in
    ``options.out_dir(config)``.

    Bad input raises a :class:`~mmseg_whitebox.utils.tool_error.ToolError`
    as early as it can be found (settings, ``compare`` folders and the
    results folder before a model is built).
    """
    options = options or NoiseSweepOptions()
    for folder in options.compare:
        load_results(folder)
    ResultStore.check_out_dir(options.out_dir(config), options.resume)
    cfg = runner_config(config, options.cfg_options, options.work_dir,
                        options.launcher)
    with run_device(cfg, options.device):
        return _sweep(config, checkpoint, cfg, options, log)


def _sweep(config: str, checkpoint: str, cfg: Any,
           options: NoiseSweepOptions, log: Log) -> Dict[str, Any]:
    out = options.out_dir(config)

    runner = build_test_runner(cfg, checkpoint)
    runner.register_hook(CheckpointCheckHook.from_options(options))
    with reported_errors(runner.cfg):
        evaluation = RunnerEvaluation(runner)
    bases = select_layers(evaluation.model, options.target, options.layers)
    selections = list(bases)
    if options.groups is not None:
        selections = [g for sel in bases for g in [sel] +
                      group_selections(sel, options.groups or None)]
    if options.subspace_angles and not any(subspace_sites(s) for s in bases):
        raise ToolError(
            '--subspace-angles needs subspace attention layers (CBSA, MSSA, '
            'TSSA) among the perturbed ones; perturbed layers: ' +
            (', '.join(st.name for s in bases for st in s.sites) or 'none'))

    from mmengine.dist import is_main_process
    from mmengine.utils import ProgressBar
    main_process = is_main_process()
    say = log if main_process else (lambda msg: None)
    for sel in selections:
        say(sel.describe())
    label = options.legend_label(config)
    setup = dict(config=config, checkpoint=checkpoint,
                 target=options.target, mode=options.mode,
                 num_seeds=options.draws, seed=options.seed, name=label,
                 selections=[s.label for s in selections],
                 num_parameters={s.label: s.numel for s in selections},
                 cfg_options=options.cfg_options or {})
    store = ResultStore.on_every_rank(out, setup, resume=options.resume)
    if options.subspace_angles:
        _measure_subspaces(evaluation, bases, store, options, say)
    shared = (evaluation.shared_encoder(options.max_heads)
              if options.shared_encoder else None)
    sweep = NoiseSweep(evaluation.model, evaluation, selections, options,
                       store, shared=shared, log=lambda msg: say('\n' + msg))
    if not options.shared_encoder:
        say('shared-encoder sweep off (--no-shared-encoder): evaluating '
            'one noise setting at a time')
    if main_process and options.progress:
        bar = ProgressBar(sweep.num_evaluations)
        sweep.on_progress = lambda status: bar.update()

    def plot() -> Optional[str]:
        if not main_process or not store.data.get('clean'):
            return None
        return plot_robustness([(label, store.data)] +
                               load_runs(options.compare),
                               osp.join(out, 'robustness.png'))

    try:
        data = sweep.run()
    except KeyboardInterrupt:
        plot()
        raise
    finally:
        evaluation.close()
    plot()
    return data


def _measure_subspaces(evaluation: RunnerEvaluation, selections: list,
                       store: ResultStore, options: NoiseSweepOptions,
                       say: Log) -> None:
    """``subspace_angles``: the rows not measured yet, saved per
    selection, on the test set's first images (on every rank alike)."""
    from torch.utils.data import DataLoader
    loader = evaluation.runner.test_dataloader
    batches = take_batches(DataLoader(
        loader.dataset, batch_size=loader.batch_size, shuffle=False,
        num_workers=0, collate_fn=loader.collate_fn), options.angle_images)
    done = store.data.get('subspace_angles', [])
    for sel in selections:
        sigmas = missing_sigmas(done, sel.label, options.sigmas)
        if not subspace_sites(sel) or not sigmas:
            continue
        say(f'subspace angles: {sel.label}, {len(sigmas)} sigmas x '
            f'{options.draws} draws on {options.angle_images} images')
        store.add_subspace_rows(subspace_change(
            evaluation.model, sel, sigmas, batches, options.draws,
            options.mode, options.seed))


def format_summary(data: Dict[str, Any], label: str) -> str:
    """The sweep's summary as the tool prints it."""
    lines = []
    clean = data['clean']
    lines.append(f'\n== {label}: mIoU under {data["setup"]["mode"]} '
                 'parameter noise')
    lines.append(f'clean: mIoU {clean["mIoU"]:.2f}')
    shown = set()
    for sel, abl in data['ablation'].items():
        if tuple(abl.get('sites', [sel])) in shown:
            continue
        shown.add(tuple(abl.get('sites', [sel])))
        value = abl['metrics']['mIoU']
        verdict = ('attention unused: robustness is not informative'
                   if attention_unused(clean['mIoU'], value) else
                   'attention is used')
        sites = len(abl.get('sites', ()))
        lines.append(f'{sel}: its {sites} attention site'
                     f'{"s" if sites != 1 else ""} removed: mIoU {value:.2f} '
                     f'({value - clean["mIoU"]:+.2f}; {verdict})')
    if data.get('not_measured'):
        lines.append(data['not_measured'])
    summaries = summarize_results(data)
    width = max([26] + [len(s) + 2 for s in summaries])
    lines.append(f'{"selection":<{width}}{"sigma":>9}{"mean":>8}'
                 f'{"95% CI":>8}{"min":>8}{"max":>8}{"retain":>8}'
                 f'{"att.ret":>8}{"non-finite":>12}')
    stored = {(p['selection'], p['sigma']): p for p in data['points']}
    for sel, summary in summaries.items():
        for q in summary['points']:
            p = stored[sel, q['sigma']]
            ci = '-' if q['ci95'] is None else f'+-{q["ci95"]:.2f}'
            lines.append(
                f'{sel:<{width}}{q["sigma"]:>9g}{q["mean"]:>8.2f}'
                f'{ci:>8}{p["mIoU_min"]:>8.2f}{p["mIoU_max"]:>8.2f}'
                f'{fmt(q["retention"]):>8}'
                f'{fmt(q["attention_retention"]):>8}'
                f'{p["nonfinite_fraction"]:>12.2%}')
    lines.append('\nsummary (AUC: area under mIoU over log10 sigma / (range '
                 'x clean); sigma_50: mIoU at half of clean):')
    lines.append(markdown_table(summary_rows(
        summaries, label=label,
        num_parameters=data['setup'].get('num_parameters'))))
    if data['attention_usage']:
        lines.append('attention usage, ||update|| / ||residual stream|| '
                     '(clean evaluation):')
        for row in data['attention_usage']:
            lines.append(
                f'  [{row["layer"]}] {row["site"]:<40} mean '
                f'{row["ratio_mean"]:.4f} (min {row["ratio_min"]:.4f}, '
                f'max {row["ratio_max"]:.4f})')
    if data.get('subspace_angles'):
        lines.append('subspace change under noise (principal angles between '
                     'span(U_k) and span(U_k + noise), degrees; relative '
                     'change of the attention update, isolated / '
                     'propagated):')
        for r in data['subspace_angles']:
            lines.append(
                f'  {r["selection"]} [{r["layer"]}] {r["site"]:<34} sigma '
                f'{r["sigma"]:<7g} angle mean {r["angle_mean_deg"]:7.3f} '
                f'max {r["angle_max_deg"]:7.3f}  update change '
                f'{r["update_change_isolated"]:.4f} / '
                f'{r["update_change_propagated"]:.4f}')
    return '\n'.join(lines)
