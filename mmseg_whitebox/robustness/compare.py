"""Several noise sweeps side by side: one table (Markdown and CSV) and one
plot, summarised over the sigmas every sweep has."""
from __future__ import annotations

import os.path as osp
from typing import Dict, List, Optional, Sequence

from mmseg_whitebox.utils.atomic import write_csv, write_text
from mmseg_whitebox.utils.run_lock import lock_folder
from mmseg_whitebox.utils.tool_error import InputError
from .plotting import load_runs, plot_robustness
from .summary import (common_sigmas, markdown_table, summarize_results,
                      summary_rows)

FORMULAS = (
    'clean: unperturbed mIoU; removed: mIoU with the perturbed attention '
    'layers\' updates set to zero ("unused" when within 1 mIoU of clean); '
    'AUC: trapezoid area under the mean mIoU over log10(sigma), divided by '
    '(log10 sigma_max - log10 sigma_min) x clean, +- the 95% CI of the '
    'per-seed AUCs; sigma_50: sigma where the mean mIoU first falls to '
    'clean/2, interpolated in log10(sigma); per sigma: mean +- 95% CI over '
    'draws (t_{0.975,n-1} s/sqrt(n)), then (retention mIoU/clean / '
    'attention retention (mIoU - removed)/(clean - removed)).')


def compare_sweeps(folders: Sequence[str],
                   out_dir: str,
                   labels: Optional[Sequence[str]] = None,
                   sigmas: Optional[Sequence[float]] = None,
                   title: Optional[str] = None) -> Dict[str, str]:
    """Write ``comparison.{md,csv,png}`` for the sweeps in ``folders``
    into ``out_dir``; returns their paths and the Markdown text (key
    ``'markdown'``). ``sigmas``: the per-sigma columns (default: every
    sigma common to all sweeps).

    Raises:
        InputError: unreadable results, wrong labels, no common sigma, or
            a requested sigma not in every sweep.
    """
    if labels and len(labels) != len(folders):
        raise InputError(f'--labels: give one label per folder '
                         f'({len(folders)}), got {len(labels)}')
    runs = load_runs(folders, labels)
    common = common_sigmas([r for _, r in runs])
    if not common:
        raise InputError('the sweeps share no sigma > 0: nothing to '
                         'compare')
    columns = list(common if sigmas is None else sigmas)
    missing = [s for s in columns if float(s) not in common]
    if missing:
        raise InputError(f'--sigmas: sigma {missing} is not in every '
                         'sweep; common sigmas: '
                         f'{", ".join(f"{s:g}" for s in common)}')
    notes: List[str] = []
    modes = {r.get('setup', {}).get('mode', 'absolute') for _, r in runs}
    if len(modes) > 1:
        notes.append(f'the sweeps mix noise modes ({", ".join(sorted(modes))}'
                     '): their sigmas are not the same noise')
    if any({float(p['sigma']) for p in r['points'] if p['sigma'] > 0}
           != set(common) for _, r in runs):
        notes.append(f'AUC and sigma_50 use the {len(common)} sigmas common '
                     f'to all sweeps ({common[0]:g} to {common[-1]:g})')
    rows = []
    for label, results in runs:
        rows += summary_rows(
            summarize_results(results, sigmas=common), columns, label,
            results.get('setup', {}).get('num_parameters'))
    paths = {k: osp.join(out_dir, f'comparison.{k}')
             for k in ('md', 'csv', 'png')}
    text = '\n\n'.join([f'# {title or "Robustness to parameter noise"}',
                        markdown_table(rows, columns)] +
                       [f'Note: {n}.' for n in notes] + [FORMULAS]) + '\n'
    with lock_folder(out_dir, '--out'):
        write_text(paths['md'], text)
        write_csv(paths['csv'], list(rows[0]), rows)
        plot_robustness(runs, paths['png'], title, sigmas=common)
    return dict(paths, markdown=text)
