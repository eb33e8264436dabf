"""The noise sweep: clean, ablated and noisy evaluations, saved as they
finish.

For every selection and sigma, ``draws`` noise draws each perturb the
selected parameters, evaluate and restore them; per sigma the mean, std,
min and max of each metric are kept, with the fraction of non-finite
logits. A flat robustness curve means something only next to two
references, which come with every sweep: the clean model (with the
attention usage ratios measured on it) and the selected attention layers
ablated -- within a point of clean, the attention is unused. Selections
with the same sites share one ablation. With a
:class:`~.shared_encoder.SharedEncoderEvaluation` and every perturbed
parameter in the decode head, the draws are evaluated ``max_heads`` at a
time with one encoder pass each (the same results).
"""
from __future__ import annotations

import os.path as osp
import statistics
import time
from typing import Any, Callable, Dict, List, Optional, Sequence

import torch.nn as nn

from mmseg_whitebox.engine.hooks import NonFiniteCounter
from mmseg_whitebox.models.attention_sites import (AttentionAblation,
                                                   AttentionUsage)
from mmseg_whitebox.utils.atomic import write_csv, write_json
from mmseg_whitebox.utils.tool_error import InputError
from .perturbation import ParameterNoise
from .resume import ResultsFolder
from .selection import Selection
from .shared_encoder import Metrics, NoiseSetting, SharedEncoderEvaluation
from .summary import attention_unused, summarize_results, summary_rows
from .sweep_options import NoiseSweepOptions

METRICS = ('mIoU', 'aAcc', 'mAcc')
Evaluate = Callable[[], Metrics]
NOT_MEASURED = ('attention removal and usage not measured: the selection '
                'covers no registered attention site (docs/robustness.md, '
                '"Supported attention")')


def summarize(draws: List[Dict[str, float]]) -> Dict[str, float]:
    """Mean/std/min/max of each metric over draws."""
    out: Dict[str, float] = {}
    for key in METRICS:
        values = [d[key] for d in draws if key in d]
        if not values:
            continue
        out[f'{key}_mean'] = statistics.fmean(values)
        out[f'{key}_std'] = statistics.stdev(values) if len(values) > 1 \
            else 0.0
        out[f'{key}_min'] = min(values)
        out[f'{key}_max'] = max(values)
    out['nonfinite_fraction'] = statistics.fmean(
        d.get('nonfinite_fraction', 0.0) for d in draws)
    return out


class ResultStore(ResultsFolder):
    """A noise sweep's results (:class:`~.resume.ResultsFolder`):
    ``results.json`` (everything, with the :mod:`.summary` under
    ``'summary'``), ``results.csv`` (a row per point), ``summary.csv`` (a
    row per selection), ``attention_usage.{json,csv}`` and, when measured,
    ``subspace_angles.{json,csv}``, rewritten after every draw."""

    WHAT = 'noise sweep'

    @staticmethod
    def empty() -> Dict[str, Any]:
        return dict(setup={}, clean=None, ablation={}, attention_usage=[],
                    points=[], partial={})

    def point(self, selection: str, sigma: float) -> Optional[Dict]:
        for p in self.data['points']:
            if p['selection'] == selection and p['sigma'] == sigma:
                return p
        return None

    def partial_draws(self, selection: str, sigma: float) -> List[Dict]:
        return list(self.data['partial'].get(f'{selection}@{sigma!r}', []))

    def set_clean(self, metrics: Dict[str, float]) -> None:
        self.data['clean'] = metrics
        self.save()

    def set_ablation(self, selection: str, result: Dict[str, Any]) -> None:
        self.data['ablation'][selection] = result
        self.save()

    def set_usage(self, rows: List[Dict[str, Any]]) -> None:
        self.data['attention_usage'] = rows
        self.save()

    def add_subspace_rows(self, rows: List[Dict[str, Any]]) -> None:
        self.data.setdefault('subspace_angles', []).extend(rows)
        self.save()

    def add_draw(self, selection: str, sigma: float, draw: Dict) -> None:
        self.data['partial'].setdefault(f'{selection}@{sigma!r}',
                                        []).append(draw)
        self.save()

    def finish_point(self, selection: str, sigma: float, mode: str) -> Dict:
        draws = self.data['partial'].pop(f'{selection}@{sigma!r}')
        point = dict(selection=selection, sigma=sigma, mode=mode,
                     draws=draws, **summarize(draws))
        self.data['points'].append(point)
        self.save()
        return point

    def save(self) -> None:
        if self.out_dir is None:
            return
        self.data['summary'] = summarize_results(self.data)
        super().save()
        self._write_csv()
        setup = self.data['setup']
        summary = summary_rows(self.data['summary'],
                               label=setup.get('name', ''),
                               num_parameters=setup.get('num_parameters'))
        if summary:
            write_csv(osp.join(self.out_dir, 'summary.csv'),
                      list(summary[0]), summary)
        for name in ('attention_usage', 'subspace_angles'):
            rows = self.data.get(name)
            if rows:
                write_json(osp.join(self.out_dir, f'{name}.json'), rows)
                write_csv(osp.join(self.out_dir, f'{name}.csv'),
                          list(rows[0]), rows)

    def rows(self) -> List[Dict[str, Any]]:
        """The CSV rows: clean, ablated (per selection), then the points."""
        mode = self.data['setup'].get('mode', '')
        rows = []
        clean = self.data.get('clean')
        if clean:
            rows.append(dict(kind='clean', selection='', sigma=0.0,
                             mode=mode, draws=1,
                             **summarize([clean])))
        for label, abl in self.data['ablation'].items():
            rows.append(dict(kind='ablated', selection=label, sigma='',
                             mode='', draws=1,
                             **summarize([abl['metrics']])))
        summaries = self.data.get('summary') or summarize_results(self.data)
        for p in sorted(self.data['points'],
                        key=lambda p: (p['selection'], p['sigma'])):
            extra = next((dict(mIoU_ci95=q['ci95'], retention=q['retention'],
                               attention_retention=q['attention_retention'])
                          for q in summaries.get(p['selection'], {}).get(
                              'points', []) if q['sigma'] == p['sigma']), {})
            rows.append(dict(kind='noise', draws=len(p['draws']),
                             **{k: v for k, v in p.items() if k != 'draws'},
                             **extra))
        return rows

    def _write_csv(self) -> None:
        rows = self.rows()
        if not rows:
            return
        fields = ['kind', 'selection', 'sigma', 'mode', 'draws']
        fields += [f'{m}_{s}' for m in METRICS
                   for s in ('mean', 'std', 'min', 'max')]
        fields += ['nonfinite_fraction', 'mIoU_ci95', 'retention',
                   'attention_retention']
        write_csv(osp.join(self.out_dir, 'results.csv'), fields, rows)


class NoiseSweep:
    """Run a sweep (see module docstring).

    Args:
        model: the model ``evaluate`` evaluates.
        evaluate: returns the current test metrics, e.g. a
            :class:`~.evaluation.RunnerEvaluation`.
        selections: what to perturb; several for one layer at a time.
        options: uses ``sigmas`` (0: the clean model), ``draws`` (draw
            ``i`` has seed ``seed + i``), ``mode`` and ``ablation``.
        store: where results go (in memory if None).
        on_progress: called with a status line after each evaluation.
        shared: evaluate the draws with a shared encoder (None: one at a
            time).
        log: where messages on the evaluation path go.
    """

    def __init__(self,
                 model: nn.Module,
                 evaluate: Evaluate,
                 selections: Sequence[Selection],
                 options: Optional[NoiseSweepOptions] = None,
                 store: Optional[ResultStore] = None,
                 on_progress: Optional[Callable[[str], None]] = None,
                 shared: Optional[SharedEncoderEvaluation] = None,
                 log: Callable[[str], None] = print) -> None:
        options = options or NoiseSweepOptions()
        self.model = model
        self.evaluate = evaluate
        self.selections = list(selections)
        self.sigmas = sorted({float(s) for s in options.sigmas})
        self.num_seeds = options.draws
        self.mode = options.mode
        self.seed = options.seed
        self.store = store if store is not None else ResultStore()
        self.ablation = options.ablation
        self.on_progress = on_progress or (lambda status: None)
        self.shared = shared
        self.log = log
        #: the data set's size, to leave a distributed run's padding out
        #: of the per-image statistics
        self.num_images: Optional[int] = getattr(evaluate, 'num_images',
                                                 None)

    @property
    def num_evaluations(self) -> int:
        """Evaluations still to run (for progress bars)."""
        n = 0 if self.store.data.get('clean') else 1
        if self.ablation:
            n += len({self._sites_key(s) for s in self.selections
                      if s.sites and s.label not in self.store.data['ablation']
                      and self._shared_ablation(s) is None})
        return n + sum(len(seeds) for _, _, seeds in self._pending())

    @staticmethod
    def _sites_key(selection: Selection) -> tuple:
        return tuple(s.name for s in selection.sites)

    def _shared_ablation(self, selection: Selection) -> Optional[Dict]:
        """A stored ablation of the same sites (another selection's)."""
        key = list(self._sites_key(selection))
        return next((abl for abl in self.store.data['ablation'].values()
                     if abl.get('sites') == key), None)

    def _evaluate(self) -> Dict[str, float]:
        with NonFiniteCounter().watching(self.model) as counter:
            metrics = self.evaluate()
        if 'mIoU' not in metrics:
            raise InputError(
                f'the test evaluator reports {sorted(metrics)}, not mIoU; '
                "the sweep needs IoUMetric with iou_metrics=['mIoU']")
        metrics = {k: metrics[k] for k in METRICS if k in metrics}
        metrics['nonfinite_fraction'] = counter.fraction_over_ranks(
            self.num_images)
        return metrics

    def run(self) -> Dict[str, Any]:
        """Evaluate what the store does not hold yet; returns its data."""
        store = self.store
        if not any(sel.sites for sel in self.selections):
            store.data['not_measured'] = NOT_MEASURED
            self.log(NOT_MEASURED)
        if not store.data.get('clean'):
            sites = [s for sel in self.selections for s in sel.sites]
            sites = list({s.name: s for s in sites}.values())
            start = time.time()
            with AttentionUsage(sites, self.model) as usage:
                clean = self._evaluate()
            clean['seconds'] = time.time() - start
            store.set_usage(usage.summary(self.num_images))
            store.set_clean(clean)
            self.on_progress(f'clean mIoU {clean["mIoU"]:.2f}')
        clean_miou = store.data['clean']['mIoU']
        if self.ablation:
            for sel in self.selections:
                if not sel.sites or sel.label in store.data['ablation']:
                    continue
                shared = self._shared_ablation(sel)
                if shared is not None:
                    store.set_ablation(sel.label, dict(shared))
                    continue
                with AttentionAblation(sel.sites):
                    metrics = self._evaluate()
                store.set_ablation(sel.label, dict(
                    metrics=metrics,
                    sites=[s.name for s in sel.sites],
                    attention_unused=attention_unused(clean_miou,
                                                      metrics['mIoU'])))
                self.on_progress(f'{sel.label} ablated mIoU '
                                 f'{metrics["mIoU"]:.2f}')
        if self._use_shared():
            self._run_shared()
        else:
            self._run_sequential()
        return store.data

    def _pending(self) -> List[tuple]:
        """``(selection, sigma, seeds to evaluate)`` of every unfinished
        point, in sweep order."""
        pending = []
        for sel in self.selections:
            for sigma in self.sigmas:
                if self.store.point(sel.label, sigma):
                    continue
                draws = 1 if sigma == 0 else self.num_seeds
                done = {d['seed'] for d in self.store.partial_draws(
                    sel.label, sigma)}
                pending.append((sel, sigma, [self.seed + i
                                             for i in range(draws)
                                             if self.seed + i not in done]))
        return pending

    def _use_shared(self) -> bool:
        if self.shared is None or not self._pending():
            return False
        reason = self.shared.unsupported(
            [np for sel in self.selections for np in sel.parameters])
        if reason:
            self.log(f'shared-encoder sweep off: {reason}; evaluating one '
                     'noise setting at a time')
            return False
        return True

    def _add_draw(self, sel: Selection, sigma: float, seed: int,
                  metrics: Dict[str, float]) -> None:
        self.store.add_draw(sel.label, sigma, dict(seed=seed, **metrics))
        self.on_progress(f'{sel.label} sigma {sigma:g} seed {seed}: mIoU '
                         f'{metrics["mIoU"]:.2f}')

    def _run_sequential(self) -> None:
        for sel, sigma, seeds in self._pending():
            for seed in seeds:
                with ParameterNoise(sel.parameters, sigma, self.mode, seed):
                    metrics = self._evaluate()
                self._add_draw(sel, sigma, seed, metrics)
            self.store.finish_point(sel.label, sigma, self.mode)

    def _run_shared(self) -> None:
        """All pending draws, ``max_heads`` per pass over the data; each
        point is finished once its last draw is in."""
        pending = self._pending()
        settings = [(sel, sigma, seed) for sel, sigma, seeds in pending
                    for seed in seeds]
        size = self.shared.max_heads
        self.log(f'shared-encoder sweep: {len(settings)} noise settings in '
                 f'{-(-len(settings) // size)} pass(es) over the data, up '
                 f'to {size} head copies each')
        ends, end = [], 0  # settings evaluated when a point is complete
        for sel, sigma, seeds in pending:
            end += len(seeds)
            ends.append((end, sel, sigma))
        done = 0
        while True:
            while ends and ends[0][0] <= done:
                _, sel, sigma = ends.pop(0)
                self.store.finish_point(sel.label, sigma, self.mode)
            if done == len(settings):
                break
            chunk = settings[done:done + size]
            results = self.shared([NoiseSetting(sel.parameters, sigma,
                                                self.mode, seed)
                                   for sel, sigma, seed in chunk])
            for (sel, sigma, seed), metrics in zip(chunk, results):
                metrics = {k: metrics[k] for k in
                           METRICS + ('nonfinite_fraction', ) if k in metrics}
                self._add_draw(sel, sigma, seed, metrics)
            done += len(chunk)
