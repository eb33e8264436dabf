"""``robustness.png``: mIoU against sigma (log axis), the mean over noise
draws with its 95% confidence interval (error bars) and the min-max band,
the AUC and sigma_50 in the legend (:mod:`.summary`), and per model its two
references: the clean mIoU (dashed) and the mIoU with the perturbed
attention removed (dotted). One colour per model; its parameter groups
(``--groups``) are drawn in that colour with their own markers and dashed
lines, so a comparison of several models with groups stays readable."""
from __future__ import annotations

import os.path as osp
from typing import Any, Dict, List, Optional, Sequence, Tuple

from mmseg_whitebox.utils.atomic import read_json, save_figure
from .groups import group_of
from .summary import (attention_unused, fmt, fmt_sigma50,
                      summarize_results)

Results = Dict[str, Any]

#: markers of a model's parameter-group curves (its whole selection: 'o')
GROUP_MARKERS = ('s', '^', 'v', 'D', 'P', 'X')


def load_results(folder: str) -> Results:
    path = osp.join(folder, 'results.json')
    if not osp.isfile(path):
        raise FileNotFoundError(f'{path} not found: {folder} is not the '
                                'output folder of a noise sweep')
    return read_json(path, 'results of a noise sweep')


def result_label(results: Results, folder: str) -> str:
    return results.get('setup', {}).get('name') or osp.basename(
        osp.normpath(folder))


def plot_robustness(runs: Sequence[Tuple[str, Results]],
                    out_file: str,
                    title: Optional[str] = None,
                    sigmas: Optional[Sequence[float]] = None) -> str:
    """Draw one or several sweeps (``(label, results)`` pairs) into
    ``out_file``; returns the path. ``sigmas`` restricts the AUC and
    sigma_50 in the legend to those noise levels (a comparison's common
    ones)."""
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 5))
    colors = plt.rcParams['axes.prop_cycle'].by_key()['color']
    notes: List[str] = []
    entries = 0
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
                xs = [q['sigma'] for q in points]
                summary = summaries[selection]
                is_group = group_of(selection) is not None
                if is_group:
                    marker = GROUP_MARKERS[groups % len(GROUP_MARKERS)]
                    groups += 1
                    style = dict(fmt=f'{marker}--', linewidth=1,
                                 markersize=4, alpha=0.85)
                else:
                    style = dict(fmt='o-')
                ax.errorbar(xs, [q['mean'] for q in points],
                            yerr=[q['ci95'] or 0.0 for q in points],
                            color=color, capsize=2, **style,
                            label=f'{name}: noise ({mode} sigma), AUC '
                            f'{fmt(summary["auc"], 3)}, sigma_50 '
                            + fmt_sigma50(summary['sigma_50'],
                                          summary['sigma_min'],
                                          summary['sigma_max']))
                entries += 1
                if not is_group:  # one min-max band per model
                    ax.fill_between(xs, [q['min'] for q in points],
                                    [q['max'] for q in points],
                                    color=color, alpha=0.2, linewidth=0)
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
                suffix = ' - attention unused' if unused else ''
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
    ax.set_ylabel('mIoU')
    ax.set_ylim(bottom=0)
    ax.grid(True, which='both', alpha=0.3)
    ax.set_title(title or 'Robustness to parameter noise')
    if entries > 4:  # beside the axes, so it hides no curve
        ax.legend(fontsize=7, loc='upper left', bbox_to_anchor=(1.01, 1.0))
    else:
        ax.legend(fontsize=7, loc='lower left')
    if notes:
        fig.text(0.01, 0.01, '\n'.join(notes), fontsize=7, color='darkred',
                 va='bottom')
        fig.subplots_adjust(bottom=0.12 + 0.03 * len(notes))
    save_figure(fig, out_file, dpi=120, bbox_inches='tight')
    plt.close(fig)
    return out_file


def plot_folders(folders: Sequence[str], out_file: str,
                 labels: Optional[Sequence[str]] = None,
                 title: Optional[str] = None) -> str:
    """Overlay the sweeps saved in ``folders``."""
    runs = []
    for i, folder in enumerate(folders):
        results = load_results(folder)
        label = labels[i] if labels else result_label(results, folder)
        runs.append((label, results))
    return plot_robustness(runs, out_file, title)
