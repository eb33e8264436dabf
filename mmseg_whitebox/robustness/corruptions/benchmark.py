"""The corruption benchmark: the transform put into a config's test
pipeline, the results store (resumable) and the evaluation loop."""
from __future__ import annotations

import os.path as osp
import time
from typing import Any, Dict, Iterator, List, Optional, Sequence

from mmseg_whitebox.engine.runner_config import build_test_runner
from mmseg_whitebox.datasets.corruption_library import SEVERITIES
from mmseg_whitebox.datasets.corruption_transform import ImageCorruption
from mmseg_whitebox.utils.atomic import write_csv, write_text
from mmseg_whitebox.engine.config_checks import dataset_configs
from mmseg_whitebox.utils.tool_error import InputError
from ..resume import ResultsFolder
from .report import (corruption_summary, markdown_table, plot_corruptions,
                     table_rows)


def _type_name(step: Any) -> str:
    t = step.get('type', '') if isinstance(step, dict) else ''
    name = t if isinstance(t, str) else getattr(t, '__name__', '')
    return name.rsplit('.', 1)[-1]


def _pipelines(dataset: Any) -> Iterator[list]:
    """The ``pipeline`` lists of a dataset config (wrappers unpacked)."""
    for _, ds in dataset_configs(dataset):
        if 'pipeline' in ds:
            yield ds['pipeline']


def insert_corruption_transform(cfg: Any, seed: int = 0,
                                loader: str = 'test_dataloader') -> int:
    """Put ``ImageCorruption(corruption=None, seed=seed)`` right after
    ``LoadImageFromFile`` in every pipeline of ``cfg[loader]``'s dataset;
    returns how many were inserted. Persistent workers are switched off,
    so that workers see the corruption switched between evaluations.

    Raises:
        InputError: a pipeline without ``LoadImageFromFile``, or with an
            ``ImageCorruption`` already.
    """
    loader_cfg = cfg.get(loader, None)
    if not loader_cfg or 'dataset' not in loader_cfg:
        raise InputError(f'the config has no {loader} with a dataset')
    n = 0
    for pipeline in _pipelines(loader_cfg['dataset']):
        names = [_type_name(step) for step in pipeline]
        if 'ImageCorruption' in names:
            raise InputError(
                f'the {loader} pipeline already has an ImageCorruption; '
                'remove it: the benchmark inserts its own')
        if 'LoadImageFromFile' not in names:
            raise InputError(
                f'the {loader} pipeline has no LoadImageFromFile to put the '
                f'corruption after (its steps: {", ".join(names)})')
        pipeline.insert(names.index('LoadImageFromFile') + 1,
                        dict(type='ImageCorruption', corruption=None,
                             seed=seed))
        n += 1
    if not n:
        raise InputError(f'the {loader} dataset has no pipeline')
    loader_cfg['persistent_workers'] = False
    return n


def find_corruption_transforms(obj: Any) -> List[ImageCorruption]:
    """The :class:`ImageCorruption` instances in a built dataset (or
    dataloader, wrapper, pipeline)."""
    found: List[ImageCorruption] = []
    seen = set()
    stack = [obj]
    while stack:
        o = stack.pop()
        if o is None or id(o) in seen:
            continue
        seen.add(id(o))
        if isinstance(o, ImageCorruption):
            found.append(o)
            continue
        if isinstance(o, (list, tuple)):
            stack.extend(o)
            continue
        for attr in ('dataset', 'datasets', 'pipeline', 'transforms'):
            stack.append(getattr(o, attr, None))
    return found


class CorruptionStore(ResultsFolder):
    """A corruption benchmark's results (:class:`~..resume.ResultsFolder`):
    ``results.json`` (setup, clean and ``results[corruption][severity]``
    metrics, summary), ``results.csv`` (a row per evaluation),
    ``table.md`` and ``table.csv``, rewritten after every evaluation. A
    resumed folder may change the grid; the summary is over the last."""

    WHAT = 'corruption benchmark'
    MUST_MATCH = ('config', 'checkpoint', 'seed', 'cfg_options', 'metric')

    @staticmethod
    def empty() -> Dict[str, Any]:
        return dict(setup={}, clean=None, results={})

    @property
    def metric(self) -> str:
        return self.data['setup'].get('metric', 'mIoU')

    @property
    def corruptions(self) -> List[str]:
        return list(self.data['setup'].get('corruptions') or
                    self.data['results'])

    @property
    def severities(self) -> List[int]:
        return list(self.data['setup'].get('severities') or SEVERITIES)

    def get(self, corruption: str, severity: int) -> Optional[Dict]:
        return self.data['results'].get(corruption, {}).get(str(severity))

    def set_clean(self, metrics: Dict[str, float]) -> None:
        self.data['clean'] = dict(metrics)
        self.save()

    def add(self, corruption: str, severity: int,
            metrics: Dict[str, float]) -> None:
        self.data['results'].setdefault(corruption, {})[str(severity)] = \
            dict(metrics)
        self.save()

    def values(self) -> Dict[str, Dict[int, float]]:
        """``{corruption: {severity: metric}}`` of the requested grid."""
        metric = self.metric
        out = {}
        for c in self.corruptions:
            per = self.data['results'].get(c, {})
            out[c] = {int(s): m[metric] for s, m in per.items()
                      if int(s) in self.severities and metric in m}
        return out

    def summary(self) -> Dict[str, Any]:
        clean = (self.data.get('clean') or {}).get(self.metric)
        return corruption_summary(clean, self.values(), self.corruptions,
                                  self.severities)

    def save(self) -> None:
        summary = self.summary()
        self.data['summary'] = dict(
            summary, per_severity={str(s): v for s, v in
                                   summary['per_severity'].items()})
        super().save()
        if self.out_dir is None:
            return
        rows = []
        clean = self.data.get('clean')
        if clean:
            rows.append(dict(corruption='clean', severity=0, **clean))
        for c in self.corruptions:
            for s in self.severities:
                m = self.get(c, s)
                if m is not None:
                    rows.append(dict(corruption=c, severity=s, **m))
        fields = ['corruption', 'severity', 'mIoU', 'aAcc', 'mAcc',
                  'seconds']
        extra = sorted({k for r in rows for k in r} - set(fields))
        write_csv(osp.join(self.out_dir, 'results.csv'), fields + extra,
                  rows)
        values = self.values()
        table = table_rows(summary, values, self.severities)
        write_csv(osp.join(self.out_dir, 'table.csv'), list(table[0]), table)
        text = markdown_table(summary, values, self.severities, self.metric)
        write_text(osp.join(self.out_dir, 'table.md'), text)

    def plot(self, title: Optional[str] = None) -> str:
        """``corruption_robustness.png`` in the folder."""
        return plot_corruptions(self.summary(), self.values(),
                                self.severities,
                                osp.join(self.out_dir,
                                         'corruption_robustness.png'),
                                title, self.metric)


class CorruptionBenchmark:
    """Clean, then every (corruption, severity) of the grid not in
    ``store`` yet: switch the pipeline's ``transforms``, ``evaluate()``
    (e.g. a :class:`~..evaluation.RunnerEvaluation`), save; after each,
    ``on_progress`` gets a status line."""

    KEEP = ('mIoU', 'aAcc', 'mAcc')

    def __init__(self, evaluate: Any, transforms: Sequence[ImageCorruption],
                 store: CorruptionStore,
                 on_progress: Optional[Any] = None) -> None:
        if not transforms:
            raise InputError(
                'no ImageCorruption in the test pipeline (see '
                'insert_corruption_transform)')
        self.evaluate = evaluate
        self.transforms = list(transforms)
        self.store = store
        self.on_progress = on_progress or (lambda status: None)

    def pending(self) -> List[tuple]:
        """``(corruption, severity)`` still to evaluate, ``(None, 0)`` for
        clean, in order."""
        todo = [] if self.store.data.get('clean') else [(None, 0)]
        todo += [(c, s) for c in self.store.corruptions
                 for s in self.store.severities
                 if self.store.get(c, s) is None]
        return todo

    def _set(self, corruption: Optional[str], severity: int) -> None:
        for t in self.transforms:
            t.set(corruption, max(severity, 1))

    def _evaluate(self) -> Dict[str, float]:
        start = time.time()
        metrics = self.evaluate()
        metric = self.store.metric
        if metric not in metrics:
            raise InputError(
                f'the test evaluator reports {sorted(metrics)}, not '
                f'{metric!r}; use IoUMetric with iou_metrics=[\'mIoU\']')
        out = {k: float(metrics[k]) for k in self.KEEP if k in metrics}
        out[metric] = float(metrics[metric])
        out['seconds'] = time.time() - start
        return out

    def run(self) -> Dict[str, Any]:
        todo = self.pending()
        try:
            for i, (c, s) in enumerate(todo, 1):
                self._set(c, s)
                metrics = self._evaluate()
                if c is None:
                    self.store.set_clean(metrics)
                    label = 'clean'
                else:
                    self.store.add(c, s, metrics)
                    label = f'{c} severity {s}'
                self.on_progress(
                    f'[{i}/{len(todo)}] {label}: {self.store.metric} '
                    f'{metrics[self.store.metric]:.2f} '
                    f'({metrics["seconds"]:.1f} s)')
        finally:
            self._set(None, 1)
        return self.store.data


def build_corruption_runner(cfg: Any, checkpoint: str, seed: int = 0) -> Any:
    """The test Runner of ``cfg`` as ``tools/test.py`` sets it up, with
    :class:`ImageCorruption` (``seed``) in its test pipeline."""
    return build_test_runner(
        cfg, checkpoint,
        prepare=lambda prepared: insert_corruption_transform(prepared, seed))
