"""Summary metrics of a noise sweep, per selection, computed from the
draws stored in ``results.json`` (formulas: docs/robustness.md, "Summary
metrics"): per sigma the mean over draws with its 95% t-interval,
``retention`` and ``attention_retention``; over the sigmas the normalised
``auc`` (with a CI over seeds) and ``sigma_50``. The AUC depends on the
swept range: compare models over the same sigmas (``sigmas`` of
:func:`summarize_results`).
"""
from __future__ import annotations

import math
import statistics
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

UNUSED_MARGIN = 1.0  # mIoU points
CONFIDENCE = 0.95
NOT_REACHED = 'not reached'
BELOW_RANGE = 'below range'

Sigma50 = Union[float, str, None]


def attention_unused(clean: float, ablated: float,
                     margin: float = UNUSED_MARGIN) -> bool:
    """Whether removing the attention (``ablated`` mIoU) leaves the
    ``clean`` mIoU within ``margin`` points: then the attention is unused
    and its robustness to noise is not informative."""
    return abs(clean - ablated) < margin


def mean_ci(values: Sequence[float],
            confidence: float = CONFIDENCE) -> Tuple[float, Optional[float]]:
    """``(mean, half_width)`` of the Student's t-interval over draws
    (half-width None for a single draw)."""
    values = [float(v) for v in values]
    if not values:
        raise ValueError('no values to summarise')
    mean = statistics.fmean(values)
    if len(values) < 2:
        return mean, None
    from scipy.stats import t
    quantile = float(t.ppf(0.5 + confidence / 2, len(values) - 1))
    return mean, quantile * statistics.stdev(values) / math.sqrt(len(values))


def normalized_auc(sigmas: Sequence[float], values: Sequence[float],
                   clean: float) -> Optional[float]:
    """Trapezoid area under ``values`` over ``log10(sigmas)`` divided by
    ``(log10 range) * clean``; None with fewer than two sigmas > 0 or a
    clean value of 0."""
    pairs = sorted((s, v) for s, v in zip(sigmas, values) if s > 0)
    if len(pairs) < 2 or not clean:
        return None
    xs = [math.log10(s) for s, _ in pairs]
    ys = [v for _, v in pairs]
    area = sum((xs[i + 1] - xs[i]) * (ys[i + 1] + ys[i]) / 2
               for i in range(len(xs) - 1))
    return area / ((xs[-1] - xs[0]) * clean)


def sigma_at_fraction(sigmas: Sequence[float], values: Sequence[float],
                      clean: float, fraction: float = 0.5) -> Sigma50:
    """The sigma where ``values`` first fall to ``fraction * clean``,
    log-interpolated; ``NOT_REACHED`` / ``BELOW_RANGE`` otherwise (None
    without sigmas > 0)."""
    pairs = sorted((s, v) for s, v in zip(sigmas, values) if s > 0)
    if not pairs:
        return None
    level = fraction * clean
    if pairs[0][1] <= level:
        return BELOW_RANGE
    for (s0, v0), (s1, v1) in zip(pairs, pairs[1:]):
        if v1 <= level:
            t = (v0 - level) / (v0 - v1)
            x0, x1 = math.log10(s0), math.log10(s1)
            return 10**(x0 + t * (x1 - x0))
    return NOT_REACHED


def _draw_values(point: Dict[str, Any], metric: str) -> List[float]:
    draws = point.get('draws')
    if draws:
        return [d[metric] for d in draws if metric in d]
    return [point[f'{metric}_mean']]  # no draws stored: the mean alone


def summarize_selection(points: Sequence[Dict[str, Any]],
                        clean: float,
                        removed: Optional[float] = None,
                        metric: str = 'mIoU',
                        sigmas: Optional[Sequence[float]] = None
                        ) -> Dict[str, Any]:
    """The summary of one selection's ``points`` (``results.json``
    entries) against the clean and attention-removed values; ``sigmas``
    restricts the curve to those noise levels. ``attention_retention``
    is None where the attention is unused, removing it raises the
    metric, or it was not ablated."""
    if sigmas is not None:
        keep = {float(s) for s in sigmas}
        points = [p for p in points if float(p['sigma']) in keep]
    points = sorted(points, key=lambda p: p['sigma'])
    unused = removed is not None and attention_unused(clean, removed)
    relative = removed is not None and not unused and clean > removed
    rows = []
    for p in points:
        values = _draw_values(p, metric)
        mean, half = mean_ci(values)
        rows.append(dict(
            sigma=p['sigma'], draws=len(values), mean=mean,
            min=min(values), max=max(values), ci95=half,
            ci95_low=None if half is None else mean - half,
            ci95_high=None if half is None else mean + half,
            retention=mean / clean if clean else None,
            attention_retention=((mean - removed) / (clean - removed)
                                 if relative else None)))
    noisy = [r for r in rows if r['sigma'] > 0]
    xs = [r['sigma'] for r in noisy]
    means = [r['mean'] for r in noisy]
    out = dict(metric=metric, clean=clean, removed=removed,
               attention_unused=unused if removed is not None else None,
               sigma_min=min(xs) if xs else None,
               sigma_max=max(xs) if xs else None,
               auc=normalized_auc(xs, means, clean),
               sigma_50=sigma_at_fraction(xs, means, clean),
               points=rows)
    out.update(_auc_over_seeds(
        [p for p in points if p['sigma'] > 0], clean, metric))
    return out


def _auc_over_seeds(points: Sequence[Dict[str, Any]], clean: float,
                    metric: str) -> Dict[str, Optional[float]]:
    """The CI of the AUCs of each seed's own curve, when every sigma was
    drawn with the same seeds."""
    empty = dict(auc_seeds=None, auc_ci95=None)
    seed_sets = [{d.get('seed') for d in p.get('draws') or []}
                 for p in points]
    if len(points) < 2 or not seed_sets[0] or None in seed_sets[0] or any(
            s != seed_sets[0] for s in seed_sets):
        return empty
    aucs = []
    for seed in sorted(seed_sets[0]):
        curve = [next(d[metric] for d in p['draws'] if d['seed'] == seed)
                 for p in points]
        aucs.append(normalized_auc([p['sigma'] for p in points], curve,
                                   clean))
    if len(aucs) < 2 or None in aucs:
        return empty
    return dict(auc_seeds=len(aucs), auc_ci95=mean_ci(aucs)[1])


def summarize_results(data: Dict[str, Any], metric: str = 'mIoU',
                      sigmas: Optional[Sequence[float]] = None
                      ) -> Dict[str, Dict[str, Any]]:
    """Per selection (in sweep order), :func:`summarize_selection` of a
    ``results.json``; empty without a clean evaluation."""
    clean = (data.get('clean') or {}).get(metric)
    if clean is None:
        return {}
    out = {}
    for label in selections_of(data):
        abl = (data.get('ablation') or {}).get(label)
        removed = abl['metrics'].get(metric) if abl else None
        points = [p for p in data.get('points', [])
                  if p['selection'] == label]
        out[label] = summarize_selection(points, clean, removed, metric,
                                         sigmas)
    return out


def selections_of(data: Dict[str, Any]) -> List[str]:
    """The selection labels of a sweep, in the order they were set up."""
    labels = list(data.get('setup', {}).get('selections') or [])
    for p in data.get('points', []):
        if p['selection'] not in labels:
            labels.append(p['selection'])
    return labels


def common_sigmas(datas: Sequence[Dict[str, Any]]) -> List[float]:
    """Sigmas > 0 present in every sweep."""
    sets = [{float(p['sigma']) for p in d.get('points', [])
             if p['sigma'] > 0} for d in datas]
    return sorted(set.intersection(*sets)) if sets else []


# -- formatting ----------------------------------------------------------
def fmt(value: Any, digits: int = 2) -> str:
    """A table cell: numbers rounded (tiny ones to 3 significant digits),
    None as '-'."""
    if value is None:
        return '-'
    if isinstance(value, bool):
        return 'yes' if value else 'no'
    if isinstance(value, str):
        return value
    if isinstance(value, float) and value and abs(value) < 10**-digits:
        return f'{value:.3g}'
    return f'{value:.{digits}f}'


def fmt_sigma50(value: Sigma50, sigma_min: Optional[float] = None,
                sigma_max: Optional[float] = None) -> str:
    if value == NOT_REACHED and sigma_max is not None:
        return f'> {sigma_max:g} (not reached)'
    if value == BELOW_RANGE and sigma_min is not None:
        return f'<= {sigma_min:g} (below range)'
    if isinstance(value, float):
        return f'{value:.3g}'
    return fmt(value)


def summary_rows(summaries: Dict[str, Dict[str, Any]],
                 sigmas: Sequence[float] = (),
                 label: str = '',
                 num_parameters: Optional[Dict[str, int]] = None
                 ) -> List[Dict[str, Any]]:
    """One flat row per selection (CSV and table): scalars, then mean,
    CI and retentions at each of ``sigmas``."""
    rows = []
    for selection, s in summaries.items():
        row = dict(model=label, selection=selection,
                   parameters=(num_parameters or {}).get(selection),
                   clean=s['clean'], removed=s['removed'],
                   attention_unused=s['attention_unused'],
                   sigma_min=s['sigma_min'], sigma_max=s['sigma_max'],
                   auc=s['auc'], auc_ci95=s['auc_ci95'],
                   sigma_50=s['sigma_50'])
        by_sigma = {float(p['sigma']): p for p in s['points']}
        for sigma in sigmas:
            p = by_sigma.get(float(sigma), {})
            row[f'mean@{sigma:g}'] = p.get('mean')
            row[f'ci95@{sigma:g}'] = p.get('ci95')
            row[f'retention@{sigma:g}'] = p.get('retention')
            row[f'attention_retention@{sigma:g}'] = p.get(
                'attention_retention')
        rows.append(row)
    return rows


def markdown_table(rows: Sequence[Dict[str, Any]],
                   sigmas: Sequence[float] = ()) -> str:
    """The rows of :func:`summary_rows` as a Markdown table."""
    head = ['model', 'selection', 'params', 'clean', 'removed',
            'AUC', 'sigma_50'] + [f'sigma {s:g}' for s in sigmas]
    lines = ['| ' + ' | '.join(head) + ' |',
             '|' + '---|' * len(head)]
    for r in rows:
        removed = fmt(r['removed'])
        if r['attention_unused']:
            removed += ' (unused)'
        auc = fmt(r['auc'], 3)
        if r['auc_ci95'] is not None:
            auc += f' +- {fmt(r["auc_ci95"], 3)}'
        cells = [r['model'], r['selection'],
                 '-' if r['parameters'] is None else f'{r["parameters"]:,}',
                 fmt(r['clean']), removed, auc,
                 fmt_sigma50(r['sigma_50'], r['sigma_min'],
                             r['sigma_max'])]
        for s in sigmas:
            mean = r[f'mean@{s:g}']
            if mean is None:
                cells.append('-')
                continue
            cell = fmt(mean)
            if r[f'ci95@{s:g}'] is not None:
                cell += f' +- {fmt(r[f"ci95@{s:g}"])}'
            cell += f' ({fmt(r[f"retention@{s:g}"])} / ' \
                    f'{fmt(r[f"attention_retention@{s:g}"])})'
            cells.append(cell)
        lines.append('| ' + ' | '.join(str(c) for c in cells) + ' |')
    return '\n'.join(lines)
