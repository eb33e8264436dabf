"""The corruption benchmark of ``tools/analysis_tools/
test_corruption_robustness.py`` as one call: :func:`run_corruption_benchmark`
checks the settings, builds the test Runner with :class:`ImageCorruption`
in its pipeline, evaluates clean and every (corruption, severity) not in
the results folder yet, saves after each, and plots
``corruption_robustness.png``."""
from __future__ import annotations

import os.path as osp
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Sequence

from mmseg_whitebox.datasets.corruption_library import (CorruptionError,
                                                        SEVERITIES,
                                                        check_severities,
                                                        load_imagecorruptions,
                                                        resolve_corruptions)
from mmseg_whitebox.engine.hooks import CheckpointCheckHook
from mmseg_whitebox.utils.input_checks import check_checkpoint, reported_errors
from mmseg_whitebox.utils.tool_error import ToolError
from ..evaluation import RunnerEvaluation
from .benchmark import (CorruptionBenchmark, CorruptionStore,
                        build_corruption_runner, find_corruption_transforms)


@dataclass
class CorruptionOptions:
    """The tool's options, under the same names."""
    corruptions: Sequence[str] = ('benchmark', )
    severities: Sequence[Any] = tuple(SEVERITIES)
    seed: int = 0
    out: Optional[str] = None
    resume: bool = False
    name: Optional[str] = None
    work_dir: Optional[str] = None
    cfg_options: Optional[Dict[str, Any]] = None
    allow_partial_checkpoint: bool = False
    allow_nonfinite_weights: bool = False

    def label(self, config: str) -> str:
        return self.name or osp.splitext(osp.basename(config))[0]

    def out_dir(self, config: str) -> str:
        """``out``, or ``work_dirs/corruption_robustness/<config>``."""
        return self.out or osp.join(
            'work_dirs', 'corruption_robustness',
            osp.splitext(osp.basename(config))[0])


def parse_severities(values: Sequence[Any]) -> List[int]:
    """Severities given as integers (or their text) in 1..5."""
    try:
        ints = [int(v) for v in values]
        if any(str(i) != str(v).strip() for i, v in zip(ints, values)):
            raise ValueError
    except ValueError:
        raise ToolError(f'--severities must be integers in 1..5, got '
                        f'{" ".join(map(str, values))}') from None
    try:
        return check_severities(ints)
    except CorruptionError as exc:
        raise ToolError(f'--severities: {exc}') from None


def run_corruption_benchmark(config: str,
                             checkpoint: str,
                             options: Optional[CorruptionOptions] = None,
                             log: Callable[[str], None] = print
                             ) -> CorruptionStore:
    """Run (or, with ``options.resume``, continue) the benchmark; returns
    the store (``store.data``, ``store.summary()``, ``store.values()``).
    Bad settings raise :class:`~mmseg_whitebox.cli.ToolError`
    before a model is built. On Ctrl-C, what is finished is plotted before
    the ``KeyboardInterrupt`` goes on."""
    options = options or CorruptionOptions()
    try:
        load_imagecorruptions()
        corruptions = resolve_corruptions(options.corruptions)
    except ImportError as exc:
        raise ToolError(str(exc)) from None
    except CorruptionError as exc:
        raise ToolError(f'--corruptions: {exc}') from None
    severities = parse_severities(options.severities)
    if not osp.isfile(config):
        raise ToolError(f'config file {config!r} does not exist')
    check_checkpoint(checkpoint)
    out = options.out_dir(config)
    try:
        CorruptionStore.check_out_dir(out, options.resume)
    except FileExistsError as exc:
        raise ToolError(str(exc)) from None
    setup = dict(config=config, checkpoint=checkpoint, seed=options.seed,
                 cfg_options=options.cfg_options or {}, metric='mIoU',
                 name=options.label(config), corruptions=corruptions,
                 severities=severities)
    try:
        store = CorruptionStore(out, setup, resume=options.resume)
        runner = build_corruption_runner(config, checkpoint,
                                         options.cfg_options,
                                         options.work_dir or out,
                                         options.seed)
    except CorruptionError as exc:
        raise ToolError(str(exc)) from None
    runner.register_hook(CheckpointCheckHook.from_options(options))
    with reported_errors(runner.cfg):
        evaluation = RunnerEvaluation(runner)
    transforms = find_corruption_transforms(
        runner.test_loop.dataloader.dataset)
    bench = CorruptionBenchmark(evaluation, transforms, store,
                                on_progress=log)
    todo = bench.pending()
    log(f'{len(corruptions)} corruption(s) x {len(severities)} '
        f'severit{"y" if len(severities) == 1 else "ies"}: '
        f'{len(todo)} evaluation(s) to run'
        + (f' ({len(corruptions) * len(severities) + 1 - len(todo)} '
           'done before)' if options.resume else ''))

    def plot() -> None:
        if store.data.get('clean') or store.data['results']:
            store.plot(options.label(config))

    try:
        with reported_errors(runner.cfg):
            bench.run()
    except KeyboardInterrupt:
        plot()
        raise
    except CorruptionError as exc:
        raise ToolError(str(exc)) from None
    finally:
        evaluation.close()
    plot()
    return store
