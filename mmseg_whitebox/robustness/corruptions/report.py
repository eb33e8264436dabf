"""The corruption benchmark's numbers: mPC, rPC, the table and the plot."""
from __future__ import annotations

import math
from typing import Any, Dict, List, Optional, Sequence

from mmseg_whitebox.utils.atomic import save_figure


def corruption_summary(clean: Optional[float],
                       results: Dict[str, Dict[Any, float]],
                       corruptions: Optional[Sequence[str]] = None,
                       severities: Optional[Sequence[int]] = None
                       ) -> Dict[str, Any]:
    """mPC (the mean of ``results[corruption][severity]`` over the grid
    ``corruptions`` x ``severities``, default: what ``results`` holds) and
    rPC (mPC / clean), as mmdetection's benchmark; also the means per
    corruption and per severity. With points missing the means are over
    those present and ``complete`` is False."""
    if corruptions is None:
        corruptions = list(results)
    if severities is None:
        severities = sorted({int(s) for per in results.values()
                             for s in per})
    values: Dict[str, Dict[int, float]] = {}
    for c in corruptions:
        per = {int(s): float(v) for s, v in results.get(c, {}).items()}
        values[c] = {s: per[s] for s in severities if s in per}
    points = [v for per in values.values() for v in per.values()]
    mpc = sum(points) / len(points) if points else None
    rpc = mpc / clean if mpc is not None and clean else None
    per_corruption = {c: (sum(per.values()) / len(per) if per else None)
                      for c, per in values.items()}
    per_severity = {}
    for s in severities:
        vals = [per[s] for per in values.values() if s in per]
        per_severity[s] = sum(vals) / len(vals) if vals else None
    return dict(clean=clean, mPC=mpc, rPC=rpc,
                per_corruption=per_corruption, per_severity=per_severity,
                evaluated=len(points),
                expected=len(corruptions) * len(severities),
                complete=len(points) == len(corruptions) * len(severities))


def _fmt(value: Optional[float], digits: int = 2) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return '-'
    return f'{value:.{digits}f}'


def table_rows(summary: Dict[str, Any],
               results: Dict[str, Dict[Any, float]],
               severities: Sequence[int]) -> List[Dict[str, Any]]:
    """One row per corruption (each severity and their mean), then the
    mean over corruptions (mPC) and clean; None where missing."""
    rows = []
    for c, mean in summary['per_corruption'].items():
        per = {int(s): v for s, v in results.get(c, {}).items()}
        rows.append(dict(corruption=c,
                         **{f'severity {s}': per.get(s) for s in severities},
                         mean=mean))
    rows.append(dict(corruption='mean (mPC)',
                     **{f'severity {s}': summary['per_severity'].get(s)
                        for s in severities}, mean=summary['mPC']))
    rows.append(dict(corruption='clean',
                     **{f'severity {s}': None for s in severities},
                     mean=summary['clean']))
    return rows


def markdown_table(summary: Dict[str, Any],
                   results: Dict[str, Dict[Any, float]],
                   severities: Sequence[int],
                   metric: str = 'mIoU') -> str:
    """:func:`table_rows` in Markdown, with mPC and rPC below."""
    rows = table_rows(summary, results, severities)
    head = ['corruption'] + [f'severity {s}' for s in severities] + ['mean']
    lines = [f'{metric} under corruption',
             '',
             '| ' + ' | '.join(head) + ' |',
             '|' + '---|' + '---:|' * (len(head) - 1)]
    for r in rows:
        lines.append('| ' + ' | '.join([r['corruption']] + [
            _fmt(r[k]) for k in head[1:]]) + ' |')
    rpc = summary['rPC']
    lines += ['',
              f'clean {metric}: {_fmt(summary["clean"])}; mPC: '
              f'{_fmt(summary["mPC"])}; rPC: '
              + ('-' if rpc is None else f'{rpc:.4f} ({100 * rpc:.1f}%)')
              + ('' if summary['complete'] else
                 f' (partial: {summary["evaluated"]} of '
                 f'{summary["expected"]} corruption/severity points)')]
    return '\n'.join(lines) + '\n'


def corruption_figure(summary: Dict[str, Any],
                      results: Dict[str, Dict[Any, float]],
                      severities: Sequence[int],
                      title: Optional[str] = None, metric: str = 'mIoU'):
    """The :class:`matplotlib.figure.Figure` of ``metric`` against
    severity: a line per corruption, their mean, and the mPC and clean
    value as horizontal lines."""
    import matplotlib
    from matplotlib.figure import Figure

    fig = Figure(figsize=(8, 5))
    ax = fig.subplots()
    cmap = matplotlib.colormaps['tab20']
    for i, c in enumerate(summary['per_corruption']):
        per = {int(s): v for s, v in results.get(c, {}).items()}
        xs = [s for s in severities if s in per]
        if xs:
            ax.plot(xs, [per[s] for s in xs], 'o-', color=cmap(i % 20),
                    linewidth=1, markersize=3, label=c)
    xs = [s for s in severities if summary['per_severity'].get(s) is not None]
    if xs:
        ax.plot(xs, [summary['per_severity'][s] for s in xs], 's-',
                color='black', linewidth=2.5, label='mean over corruptions')
    if summary['mPC'] is not None:
        ax.axhline(summary['mPC'], color='black', linestyle='-.',
                   linewidth=1.5, label=f'mPC {summary["mPC"]:.2f}')
    if summary['clean'] is not None:
        rpc = summary['rPC']
        ax.axhline(summary['clean'], color='gray', linestyle='--',
                   linewidth=1.5, label=f'clean {summary["clean"]:.2f}'
                   + ('' if rpc is None else f' (rPC {100 * rpc:.1f}%)'))
    ax.set_xticks(list(severities))
    ax.set_xlabel('severity')
    ax.set_ylabel(f'{metric} (%)')
    ax.set_ylim(0, 100)
    ax.grid(True, alpha=0.3)
    ax.set_title(title or f'{metric} under input corruptions')
    ax.legend(fontsize=7, loc='center left', bbox_to_anchor=(1.01, 0.5))
    return fig


def plot_corruptions(summary: Dict[str, Any],
                     results: Dict[str, Dict[Any, float]],
                     severities: Sequence[int], out_file: str,
                     title: Optional[str] = None,
                     metric: str = 'mIoU') -> str:
    """Save :func:`corruption_figure` to ``out_file``; returns the path."""
    save_figure(corruption_figure(summary, results, severities, title,
                                  metric),
                out_file, dpi=120, bbox_inches='tight')
    return out_file
