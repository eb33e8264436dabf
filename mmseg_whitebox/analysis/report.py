"""The benchmarks' reports. Results are rows, one per model
(``row['head']``) and size (``row['size']``): :func:`add_ratios` adds
ratios to a baseline row, :func:`slopes` the exponent ``s`` of ``cost ~
tokens^s``, :func:`results_table` the markdown table and
:func:`write_report` ``benchmark.json``, ``.md`` and ``.png``.
"""
from __future__ import annotations

import math
import os.path as osp
from typing import (Callable, Dict, List, NamedTuple, Optional, Sequence,
                    Tuple)

from mmseg_whitebox.utils.atomic import save_figure, write_json, write_text

#: a table column: ``(row key, title, kind)`` (see :func:`cell`)
Column = Tuple[str, str, str]


class Baseline(NamedTuple):
    """``keys`` of each row (only head ``only``'s, if given) against the
    row of head ``head`` of the same size, as ``<key>_vs_<suffix>``."""
    head: str
    keys: Sequence[str]
    suffix: str
    only: Optional[str] = None


def add_ratios(rows: List[Dict], baseline: Baseline) -> None:
    """Add the ratios of ``baseline`` to ``rows`` (none where a figure is
    missing or zero, nor in the baseline's own row)."""
    by_size: Dict[str, Dict[str, Dict]] = {}
    for row in rows:
        by_size.setdefault(row['size'], {})[row['head']] = row
    for group in by_size.values():
        ref = group.get(baseline.head)
        for row in group.values():
            if row is ref or baseline.only not in (None, row['head']):
                continue
            for key in baseline.keys:
                if ref and row.get(key) and ref.get(key):
                    row[f'{key}_vs_{baseline.suffix}'] = row[key] / ref[key]


def ratio_lines(rows: List[Dict], reference: str, time_key: str,
                memory_key: str) -> List[str]:
    """One line per row other than the reference: its ``time_key`` and
    ``memory_key`` ratios."""
    lines = []
    for r in rows:
        if r['head'] != reference and time_key in r:
            mem = r.get(memory_key)
            lines.append(f'  {r["head"]:<15} {r["size"]:>9}: '
                         f'{r[time_key]:.3f}  '
                         + (f'{mem:.3f}' if mem else '-'))
    return lines


def compiled_notes(row: Dict, labels: Dict[str, str]) -> List[str]:
    """A compiled row's note: its compilation times and its ratios to the
    same model eager. ``labels``: a timed kind (``fwd``) or a memory
    figure (``mem_fwd``) -> its name."""
    times = [f'{row[f"{key}_compile_s"]:.1f} s ({label})'
             for key, label in labels.items() if f'{key}_compile_s' in row]
    if not times:
        return []
    ratios = [f'{label} {row[ratio]:.3f}x eager'
              for key, label in labels.items()
              for ratio in [f'{key}_vs_eager' if key.startswith('mem_')
                            else f'{key}_ms_vs_eager'] if ratio in row]
    return ['; '.join(['compiled in ' + ' + '.join(times)] + ratios)]


def compiled_lines(rows: List[Dict], labels: Dict[str, str]) -> List[str]:
    """One line per compiled row: its model, size and note."""
    return [f'  {r["head"]:<22} {r["size"]:>9}: {note}'
            for r in rows for note in compiled_notes(r, labels)]


def loglog_slope(xs: Sequence[float], ys: Sequence[float]) -> float:
    """Least-squares slope of ``log y`` against ``log x``."""
    pairs = [(math.log(x), math.log(y)) for x, y in zip(xs, ys)
             if x > 0 and y > 0]
    if len({p[0] for p in pairs}) < 2:
        raise ValueError('need at least two distinct positive points')
    mx = sum(p[0] for p in pairs) / len(pairs)
    my = sum(p[1] for p in pairs) / len(pairs)
    sxx = sum((p[0] - mx)**2 for p in pairs)
    sxy = sum((p[0] - mx) * (p[1] - my) for p in pairs)
    return sxy / sxx


#: the costs whose log-log slope against tokens a report gives by default
SLOPE_KEYS = ('fwd_ms', 'train_ms', 'mem_fwd', 'flops')


def slopes(rows: List[Dict], keys: Sequence[str] = SLOPE_KEYS
           ) -> Dict[str, Dict[str, float]]:
    """Per head, the log-log slope of each cost in ``keys`` against
    tokens (1 linear, 2 quadratic)."""
    out: Dict[str, Dict[str, float]] = {}
    for head in dict.fromkeys(r['head'] for r in rows):
        mine = [r for r in rows if r['head'] == head]
        for key in keys:
            pts = [(r['tokens'], r[key]) for r in mine if r.get(key)]
            if len({t for t, _ in pts}) >= 2:
                out.setdefault(head, {})[key] = loglog_slope(
                    [t for t, _ in pts], [v for _, v in pts])
    return out


def _fmt(value, spec: str, scale: float = 1.0) -> str:
    return '-' if value is None else format(value * scale, spec)


def describe_row(row: Dict, fwd: str = 'fwd_ms', train: str = 'train_ms',
                 mem: str = 'mem_fwd') -> str:
    """A row's progress line: ``fwd``, ``train`` latency, ``mem`` peak."""
    return (f'{row["head"]:<22} {row["size"]:>9} {row["tokens"]:>6} tokens  '
            f'fwd {_fmt(row.get(fwd), ".1f")} ms  '
            f'fwd+bwd {_fmt(row.get(train), ".1f")} ms  '
            f'mem {_fmt(row.get(mem), ".1f", 2**-20)} MiB  {row["status"]}')


def cell(row: Dict, key: str, kind: str) -> str:
    """``row[key]`` as ``kind`` says: ``M``/``G`` (millions, billions),
    ``Mi`` (MiB), ``r`` (a ratio), a format spec or ``{}`` (as is)."""
    value = row.get(key)
    if value is None:
        return '-'
    if kind == 'M':
        return f'{value / 1e6:.2f}'
    if kind == 'G':
        return f'{value / 1e9:.2f}'
    if kind == 'Mi':
        return f'{value / 2**20:.0f}'
    if kind == 'r':
        return f'{value:.3f}'
    return format(value, kind) if kind != '{}' else str(value)


def results_table(rows: List[Dict], columns: Sequence[Column],
                  notes: Callable[[Dict], List[str]] = lambda row: []
                  ) -> str:
    """A markdown table of ``rows``: one column per ``(key, title, kind)``
    and a note column (a status other than ``'ok'``, ``notes(row)``)."""
    lines = ['| ' + ' | '.join(c[1] for c in columns) + ' | note |',
             '|' + '---|' * (len(columns) + 1)]
    for row in rows:
        note = ([] if row['status'] == 'ok' else [row['status']]) + \
            notes(row)
        lines.append('| ' + ' | '.join(cell(row, k, f)
                                       for k, _, f in columns) +
                     f' | {" ".join(note)} |')
    return '\n'.join(lines)


def write_report(out_dir: str, report: Dict, table: str, title: str,
                 **plot_keys: Sequence[str]) -> None:
    """``benchmark.json`` (``report``), ``benchmark.md`` (``table``) and
    ``benchmark.png`` (:func:`plot`, curves ``plot_keys``) in
    ``out_dir``; prints the table."""
    write_json(osp.join(out_dir, 'benchmark.json'), report)
    write_text(osp.join(out_dir, 'benchmark.md'), table + '\n')
    title = (f'{title}, {report["machine"]["cpu"]}, '
             f'{report["machine"]["threads"]} threads, '
             f'{report["machine"]["date"][:10]}')
    plot(report['results'], report['slopes'],
         osp.join(out_dir, 'benchmark.png'), title, **plot_keys)
    print('\n' + table)
    print(f'\nwritten to {out_dir}: benchmark.json, benchmark.md, '
          'benchmark.png')


def plot(rows: List[Dict], fits: Dict, out_file: str, title: str,
         latency: Sequence[str] = ('fwd_ms', 'train_ms'),
         memory: Sequence[str] = ('mem_fwd', 'mem_train')) -> str:
    """Latency and peak memory of every head against tokens, log-log,
    with the fitted slopes."""
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.8))
    colors = plt.rcParams['axes.prop_cycle'].by_key()['color']
    panels = ((axes[0], latency, 'latency (ms)', 1.0),
              (axes[1], memory, 'peak memory (MiB)', 2**-20))
    for ax, keys, ylabel, scale in panels:
        for i, head in enumerate(dict.fromkeys(r['head'] for r in rows)):
            mine = sorted((r for r in rows if r['head'] == head),
                          key=lambda r: r['tokens'])
            for key, style in zip(keys, ('o-', 's--', 'd:')):
                pts = [(r['tokens'], r[key] * scale) for r in mine
                       if r.get(key)]
                if not pts:
                    continue
                slope = fits.get(head, {}).get(key)
                label = f'{head} {key}' + (f' (slope {slope:.2f})'
                                           if slope is not None else '')
                ax.plot(*zip(*pts), style, color=colors[i % len(colors)],
                        label=label, markersize=4)
        ax.set_xscale('log')
        ax.set_yscale('log')
        ax.set_xlabel('tokens (patch grid)')
        ax.set_ylabel(ylabel)
        ax.grid(True, which='both', alpha=0.3)
        ax.legend(fontsize=6)
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    save_figure(fig, out_file, dpi=120)
    plt.close(fig)
    return out_file
