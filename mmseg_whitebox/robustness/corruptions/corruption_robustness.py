"""The corruption benchmark of ``tools/analysis_tools/
test_corruption_robustness.py`` as one call:
:func:`run_corruption_benchmark`."""
from __future__ import annotations

import os.path as osp
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Optional, Sequence

from mmseg_whitebox.datasets.corruption_library import (SEVERITIES,
                                                        check_severities,
                                                        resolve_corruptions)
from mmseg_whitebox.engine.hooks import CheckpointCheckHook
from mmseg_whitebox.engine.pretrained import reported_errors
from mmseg_whitebox.engine.runner_config import run_device, runner_config
from mmseg_whitebox.utils.checkpoint_checks import check_checkpoint
from mmseg_whitebox.utils.tool_error import ToolError
from ..evaluation import RunnerEvaluation
from .benchmark import (CorruptionBenchmark, CorruptionStore,
                        build_corruption_runner, find_corruption_transforms)


@dataclass
class CorruptionOptions:
    """What to evaluate and how: the options of ``tools/analysis_tools/
    test_corruption_robustness.py``, as :class:`~..sweep_options.
    NoiseSweepOptions` are the noise sweep's."""
    corruptions: Sequence[str] = field(default=('benchmark', ), metadata=dict(
        help='corruption names or groups (default: benchmark, the 15 '
        'ImageNet-C corruptions)'))
    severities: Sequence[Any] = field(default=tuple(SEVERITIES), metadata=dict(
        help='severities, integers 1..5 (default: all five)'))
    seed: int = field(default=0, metadata=dict(
        help='base seed of the per-image corruption seeds'))
    out: Optional[str] = field(default=None, metadata=dict(
        help='results folder (default: work_dirs/corruption_robustness/'
        '<config name>)', metavar='DIR'))
    resume: bool = field(default=False, metadata=dict(
        help='continue the results in --out, skipping finished '
        'evaluations'))
    title: Optional[str] = field(default=None, metadata=dict(
        help='plot title (default: config name)'))
    work_dir: Optional[str] = field(default=None, metadata=dict(
        help='folder for the Runner\'s logs (default: --out)'))
    cfg_options: Optional[Dict[str, Any]] = None
    launcher: str = 'none'
    #: 'cuda' or 'cpu'; None: the GPU when one is visible (a launched
    #: benchmark without one needs 'cpu')
    device: Optional[str] = None
    allow_partial_checkpoint: bool = False
    allow_nonfinite_weights: bool = False

    def __post_init__(self) -> None:
        self.check()

    def check(self) -> None:
        """Resolve ``corruptions`` to names (needs the imagecorruptions
        package) and ``severities`` to sorted ints; call it again after
        changing a field.

        Raises:
            InputError: naming the flag.
        """
        self.corruptions = resolve_corruptions(self.corruptions,
                                               '--corruptions')
        self.severities = check_severities(self.severities, '--severities')

    def plot_title(self, config: str) -> str:
        """The plot's title: ``title``, or the config's file name."""
        return self.title or osp.splitext(osp.basename(config))[0]

    def out_dir(self, config: str) -> str:
        """``out``, or ``work_dirs/corruption_robustness/<config>``."""
        return self.out or osp.join(
            'work_dirs', 'corruption_robustness',
            osp.splitext(osp.basename(config))[0])


def run_corruption_benchmark(config: str,
                             checkpoint: str,
                             options: Optional[CorruptionOptions] = None,
                             log: Callable[[str], None] = print
                             ) -> CorruptionStore:
    """Run (or, with ``options.resume``, continue) the benchmark: evaluate
    clean and every (corruption, severity) not in the results folder yet,
    saving after each, and plot ``corruption_robustness.png`` (also on
    Ctrl-C); returns the store. Device, launcher and bad-input handling
    are those of :func:`~..noise_robustness.run_noise_sweep`."""
    options = options or CorruptionOptions()
    if not osp.isfile(config):
        raise ToolError(f'config file {config!r} does not exist')
    check_checkpoint(checkpoint)
    out = options.out_dir(config)
    CorruptionStore.check_out_dir(out, options.resume)
    cfg = runner_config(config, options.cfg_options, options.work_dir or out,
                        options.launcher)
    with run_device(cfg, options.device):
        return _benchmark(config, checkpoint, cfg, options, log)


def _benchmark(config: str, checkpoint: str, cfg: Any,
               options: CorruptionOptions,
               log: Callable[[str], None]) -> CorruptionStore:
    from mmengine.dist import is_main_process
    corruptions, severities = options.corruptions, options.severities
    runner = build_corruption_runner(cfg, checkpoint, options.seed)
    setup = dict(config=config, checkpoint=checkpoint, seed=options.seed,
                 cfg_options=options.cfg_options or {}, metric='mIoU',
                 name=options.plot_title(config), corruptions=corruptions,
                 severities=severities)
    store = CorruptionStore.on_every_rank(options.out_dir(config), setup,
                                          resume=options.resume)
    runner.register_hook(CheckpointCheckHook.from_options(options))
    with reported_errors(runner.cfg):
        evaluation = RunnerEvaluation(runner)
    transforms = find_corruption_transforms(
        runner.test_loop.dataloader.dataset)
    main_process = is_main_process()
    say = log if main_process else (lambda msg: None)
    bench = CorruptionBenchmark(evaluation, transforms, store,
                                on_progress=say)
    todo = bench.pending()
    say(f'{len(corruptions)} corruption(s) x {len(severities)} '
        f'severit{"y" if len(severities) == 1 else "ies"}: '
        f'{len(todo)} evaluation(s) to run'
        + (f' ({len(corruptions) * len(severities) + 1 - len(todo)} '
           'done before)' if options.resume else ''))

    def plot() -> None:
        if main_process and (store.data.get('clean')
                             or store.data['results']):
            store.plot(options.plot_title(config))

    try:
        with reported_errors(runner.cfg):
            bench.run()
    except KeyboardInterrupt:
        plot()
        raise
    finally:
        evaluation.close()
    plot()
    return store
