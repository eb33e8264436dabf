"""``robustness.png``: mIoU against sigma (log axis), the mean over draws
with the spread they support (:func:`spread_drawing`), AUC and sigma_50 in
the legend, and per model its clean (dashed) and attention-removed
(dotted) references. One colour per model; its parameter groups share it
with their own markers and dashed lines."""
from __future__ import annotations

import os.path as osp
from typing import Any, Dict, List, Optional, Sequence, Tuple

from mmseg_whitebox.utils.atomic import read_json, save_figure
from mmseg_whitebox.utils.tool_error import InputError
from .groups import group_of
from .summary import (attention_unused, fmt, fmt_sigma50,
                      summarize_results)

Results = Dict[str, Any]

#: markers of a model's parameter-group curves (its whole selection: 'o')
GROUP_MARKERS = ('s', '^', 'v', 'D', 'P', 'X')
#: fewest draws per sigma for which error bars show the 95% t-interval
MIN_DRAWS_FOR_T_INTERVAL = 5
#: mIoU is a percentage: the axis shows all of it and nothing beyond
MIOU_RANGE = (0.0, 100.0)


def load_results(folder: str) -> Results:
    """The ``results.json`` of the sweep folder ``folder``.

    Raises:
        InputError: if there is none, or it is not readable JSON.
    """
    path = osp.join(folder, 'results.json')
    if not osp.isfile(path):
        raise InputError(f'{path} not found: {folder} is not the '
                         'output folder of a noise sweep')
    return read_json(path, 'results of a noise sweep')


def result_label(results: Results, folder: str) -> str:
    return results.get('setup', {}).get('name') or osp.basename(
        osp.normpath(folder))


def load_runs(folders: Sequence[str],
              labels: Optional[Sequence[str]] = None
              ) -> List[Tuple[str, Results]]:
    """``(label, results)`` of each sweep folder (default labels: the
    sweeps' names)."""
    runs = []
    for i, folder in enumerate(folders):
        results = load_results(folder)
        runs.append((labels[i] if labels else result_label(results, folder),
                     results))
    return runs


def draws_text(points: Sequence[Dict[str, Any]]) -> str:
    """'2 draws', '1 draw' or '2-3 draws' (a resumed sweep may differ
    per sigma)."""
    counts = sorted({q['draws'] for q in points})
    span = (f'{counts[0]}' if len(counts) == 1 else
            f'{counts[0]}-{counts[-1]}')
    return f'{span} draw' + ('' if counts == [1] else 's')


def spread_drawing(points: Sequence[Dict[str, Any]],
                   is_group: bool) -> Tuple[Optional[str], bool]:
    """The kind of a curve's error bars (``'t-interval'``, ``'min-max'``
    or None) and whether a min-max band is shaded. Below
    :data:`MIN_DRAWS_FOR_T_INTERVAL` draws the t-interval is too wide to
    read (t_{0.975,1} = 12.7), so the min-max range alone: a band for a
    whole selection, bars for a group (stacked bands of one colour would
    not read)."""
    fewest = min(q['draws'] for q in points)
    if fewest >= MIN_DRAWS_FOR_T_INTERVAL:
        return 't-interval', not is_group
    if fewest > 1:
        return ('min-max', False) if is_group else (None, True)
    return None, False


def spread_label(points: Sequence[Dict[str, Any]], bars: Optional[str],
                 band: bool) -> str:
    """The legend's words for a curve's spread."""
    draws = draws_text(points)
    if bars is None and not band:
        return f'{draws}: no spread'
    parts = []
    if bars == 't-interval':
        parts.append(f'bars: 95% t-interval over {draws}')
    elif bars == 'min-max':
        parts.append(f'bars: min-max over {draws}')
    if band:
        parts.append('band: min-max' + ('' if bars else f' over {draws}'))
    if bars != 't-interval':
        parts.append(f'no t-interval below {MIN_DRAWS_FOR_T_INTERVAL} draws')
    return ', '.join(parts)


def error_bars(points: Sequence[Dict[str, Any]],
               bars: Optional[str]) -> Optional[List[List[float]]]:
    """Error-bar lengths (below, above the mean) of the t-interval
    clipped to :data:`MIOU_RANGE`, or of the min-max range."""
    if bars is None:
        return None
    low, high = MIOU_RANGE
    if bars == 't-interval':
        ends = [(max(low, q['ci95_low']), min(high, q['ci95_high']))
                for q in points]
    else:
        ends = [(q['min'], q['max']) for q in points]
    return [[q['mean'] - bottom for q, (bottom, _) in zip(points, ends)],
            [top - q['mean'] for q, (_, top) in zip(points, ends)]]


def robustness_figure(runs: Sequence[Tuple[str, Results]],
                      title: Optional[str] = None,
                      sigmas: Optional[Sequence[float]] = None):
    """The :class:`matplotlib.figure.Figure` of ``(label, results)``
    sweeps; ``sigmas`` restricts the legend's AUC and sigma_50 to those
    (a comparison's common ones)."""
    import matplotlib
    from matplotlib.figure import Figure

    fig = Figure(figsize=(8, 5))  # no pyplot: nothing global to close
    ax = fig.subplots()
    colors = matplotlib.rcParams['axes.prop_cycle'].by_key()['color']
    notes: List[str] = []
    for i, (label, results) in enumerate(runs):
        color = colors[i % len(colors)]
        clean = (results.get('clean') or {}).get('mIoU')
        mode = results.get('setup', {}).get('mode', 'absolute')
        curves = summarize_results(results)
        summaries = summarize_results(results, sigmas=sigmas)
        selections = list(curves)
        drawn = set()  # clean once per run, each ablation once (groups)
        groups = 0
        for selection in selections or ['']:
            name = label if len(selections) <= 1 else f'{label} {selection}'
            points = [q for q in curves[selection]['points']
                      if q['sigma'] > 0] if selection else []
            if points:
                is_group = group_of(selection) is not None
                _draw_curve(ax, points, summaries[selection], name, mode,
                            color, is_group, groups)
                groups += int(is_group)
            if clean is not None and 'clean' not in drawn:
                drawn.add('clean')
                ax.axhline(clean, color=color, linestyle='--', linewidth=1,
                           label=f'{label}: clean {clean:.1f}')
            abl = results.get('ablation', {}).get(selection)
            key = tuple((abl or {}).get('sites') or [selection])
            if abl is not None and key not in drawn:
                drawn.add(key)
                value = abl['metrics']['mIoU']
                unused = clean is not None and attention_unused(clean, value)
                suffix = ''
                if unused:
                    suffix = ' - attention unused'
                elif clean is not None:
                    suffix = (' - attention in use (removal costs '
                              f'{clean - value:.1f})')
                ax.axhline(value, color=color, linestyle=':', linewidth=1.5,
                           label=f'{name}: attention removed {value:.1f}'
                           f'{suffix}')
                if unused:
                    notes.append(
                        f'{name}: removing the attention costs '
                        f'{clean - value:+.2f} mIoU, so the attention is '
                        'unused and its robustness is not informative')
    ax.set_xscale('log')
    ax.set_xlabel('sigma (noise std on the selected parameters)')
    ax.set_ylabel('mIoU (%)')
    ax.set_ylim(*MIOU_RANGE)
    ax.grid(True, which='both', alpha=0.3)
    ax.set_title(title or 'Robustness to parameter noise')
    ax.legend(fontsize=7, loc='upper left', bbox_to_anchor=(1.01, 1.0))
    if notes:
        fig.text(0.01, 0.01, '\n'.join(notes), fontsize=7, color='darkred',
                 va='bottom')
        fig.subplots_adjust(bottom=0.12 + 0.03 * len(notes))
    return fig


def _draw_curve(ax, points: Sequence[Dict[str, Any]],
                summary: Dict[str, Any], name: str, mode: str, color: str,
                is_group: bool, group_index: int) -> None:
    xs = [q['sigma'] for q in points]
    means = [q['mean'] for q in points]
    bars, band = spread_drawing(points, is_group)
    if is_group:
        marker = GROUP_MARKERS[group_index % len(GROUP_MARKERS)]
        style = dict(fmt=f'{marker}--', linewidth=1, markersize=4,
                     alpha=0.85)
    else:
        style = dict(fmt='o-')
    label = (f'{name}: noise ({mode} sigma), AUC {fmt(summary["auc"], 3)},'
             ' sigma_50 ' + fmt_sigma50(summary['sigma_50'],
                                        summary['sigma_min'],
                                        summary['sigma_max']) +
             '\n  ' + spread_label(points, bars, band))
    ax.errorbar(xs, means, yerr=error_bars(points, bars), color=color,
                capsize=2, label=label, **style)
    if band:
        ax.fill_between(xs, [q['min'] for q in points],
                        [q['max'] for q in points], color=color, alpha=0.2,
                        linewidth=0)


def plot_robustness(runs: Sequence[Tuple[str, Results]],
                    out_file: str,
                    title: Optional[str] = None,
                    sigmas: Optional[Sequence[float]] = None) -> str:
    """Save :func:`robustness_figure` to ``out_file``; returns it."""
    save_figure(robustness_figure(runs, title, sigmas), out_file, dpi=120,
                bbox_inches='tight')
    return out_file


def plot_folders(folders: Sequence[str], out_file: str,
                 labels: Optional[Sequence[str]] = None,
                 title: Optional[str] = None) -> str:
    """Overlay the sweeps saved in ``folders``."""
    return plot_robustness(load_runs(folders, labels), out_file, title)
