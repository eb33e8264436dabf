"""A shared-encoder noise sweep timed against one evaluation per setting
(``tools/analysis_tools/benchmark_shared_encoder.py``).

A config's model with random weights on synthetic ADE20K-layout images,
with the config's test pipeline and metric; the same noise settings (the
CBSA paper's sigmas) evaluated one at a time (as ``tools/noise_robustness.py
--no-shared-encoder`` does) and with the shared encoder: both times, their
ratio, the encoder's share of one evaluation and whether every setting's
metrics are identical.
"""
from __future__ import annotations

import contextlib
import os.path as osp
import tempfile
import time
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Tuple

import torch

from mmseg_whitebox.utils.atomic import write_json, write_text
from mmseg_whitebox.utils.run_lock import lock_folder
from mmseg_whitebox.utils.tool_error import InputError
from .benchmark import Benchmark, build_models, machine, prepare_run
from .timing import autocast, synchronize


@dataclass
class SharedSweepOptions:
    """What to time."""
    config: str
    images: int = 2
    image_size: Tuple[int, int] = (512, 683)
    settings: int = 20
    max_heads: Optional[int] = None
    target: str = 'decoder-attention'
    device: Optional[str] = None
    threads: Optional[int] = None
    data_dir: Optional[str] = None
    cfg_options: Optional[Dict[str, Any]] = None
    profile: bool = False
    #: the autocast dtype of both sweeps, or None
    amp: Optional[str] = None
    #: the folder for benchmark.json and benchmark.md, or None
    out: Optional[str] = None


BENCHMARK = Benchmark(columns=[
    ('config', 'config', '{}'), ('images', 'images', '{}'),
    ('size', 'image', '{}'), ('settings', 'settings', '{}'),
    ('sequential_s', 'one at a time s', '.2f'),
    ('shared_s', 'shared encoder s', '.2f'), ('ratio', 'ratio', 'r'),
    ('encoder_share', 'encoder share of one evaluation', '.2f'),
    ('identical', 'identical metrics', '{}')])


def build(options: SharedSweepOptions, data_root: str,
          device: torch.device):
    """Config, model (random weights, eval mode) and test dataloader."""
    from mmengine.runner import Runner
    model = build_models({'model': options.config}, device, 0,
                         options.cfg_options)['model']
    cfg = model.cfg
    cfg.test_dataloader.dataset.data_root = data_root
    cfg.test_dataloader.num_workers = 0
    cfg.test_dataloader.persistent_workers = False
    return cfg, model, Runner.build_dataloader(cfg.test_dataloader)


def timed_evaluation(model: torch.nn.Module, evaluate: Callable[[], Any],
                     device: torch.device) -> Tuple[float, float]:
    """Seconds of one evaluation, and of the encoder within it."""
    spent = [0.0]
    extract_feat = model.extract_feat

    def timed(inputs):
        synchronize(device)
        start = time.perf_counter()
        feats = extract_feat(inputs)
        synchronize(device)
        spent[0] += time.perf_counter() - start
        return feats

    model.extract_feat = timed
    try:
        start = time.perf_counter()
        evaluate()
        return time.perf_counter() - start, spent[0]
    finally:
        del model.extract_feat


def _same(a: Dict[str, float], b: Dict[str, float]) -> bool:
    """The same metrics (NaN equal to NaN)."""
    return a.keys() == b.keys() and all(
        a[k] == b[k] or (a[k] != a[k] and b[k] != b[k]) for k in a)


def _profiled(run: Callable[[], Any], rows: int = 15) -> Tuple[Any, str]:
    """``run()`` under torch's profiler: its result, and the table of the
    ``rows`` ops with the most time of their own."""
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        result = run()
    return result, prof.key_averages().table(
        sort_by='self_cpu_time_total', row_limit=rows)


def run_shared_encoder_benchmark(options: SharedSweepOptions,
                                 log: Callable[[str], None] = print
                                 ) -> Dict[str, Any]:
    """Both sweeps, timed: ``sequential_s``, ``shared_s``, ``ratio``,
    ``encoder_s`` and ``evaluation_s`` (one clean evaluation),
    ``passes``, ``identical``, the per-setting ``metrics`` of both paths
    and, with ``options.profile``, the op table of one more shared sweep
    (``profile``); with ``options.out``, ``benchmark.json`` and ``.md``
    there."""
    with (lock_folder(options.out, '--out') if options.out
          else contextlib.nullcontext()):
        report, device = _timed_sweeps(options, log)
        if options.out:
            write_table(options, report, device)
    return report


def _timed_sweeps(options: SharedSweepOptions, log: Callable[[str], None]
                  ) -> Tuple[Dict[str, Any], torch.device]:
    from mmseg_whitebox.datasets.synthetic_ade20k import \
        generate_synthetic_ade20k
    from mmseg_whitebox.robustness import (PAPER_SIGMAS, LoopEvaluation,
                                           ParameterNoise, select_parameters)
    from mmseg_whitebox.engine.hooks import NonFiniteCounter
    from mmseg_whitebox.utils.logs import quiet_logging
    from mmseg_whitebox.robustness.shared_encoder import (
        NoiseSetting, SharedEncoderEvaluation)
    device, _ = prepare_run(options.device, options.threads, None)
    max_heads = options.max_heads or options.settings
    with tempfile.TemporaryDirectory() as tmp:
        data_root = generate_synthetic_ade20k(
            options.data_dir or tmp, num_train=1, num_val=options.images,
            image_size=tuple(options.image_size), size_jitter=0.0, seed=0)
        cfg, model, loader = build(options, data_root, device)
        sel = select_parameters(model, options.target)
        evaluate = LoopEvaluation(model, loader, cfg.test_evaluator)
        shared = SharedEncoderEvaluation(model, loader, evaluate.evaluator,
                                         max_heads)
        reason = shared.unsupported(sel.parameters)
        if reason:
            raise InputError(f'no shared-encoder sweep for --target '
                             f'{options.target}: {reason}')
        sigmas = [PAPER_SIGMAS[i % len(PAPER_SIGMAS)]
                  for i in range(options.settings)]
        settings = [NoiseSetting(sel.parameters, s, 'absolute', 0)
                    for s in sigmas]
        log(f'{osp.relpath(options.config)}: random weights, '
            f'{options.images} synthetic {options.image_size[0]}x'
            f'{options.image_size[1]} images, inference '
            f'{dict(model.test_cfg)}, {options.settings} settings of '
            f'{sel.label} noise, {device}, {torch.get_num_threads()} CPU '
            'threads')
        report: Dict[str, Any] = dict(sigmas=sigmas)
        with quiet_logging(), autocast(device, options.amp):
            # warm-up, not timed as a setting: the encoder's share
            report['evaluation_s'], report['encoder_s'] = timed_evaluation(
                model, evaluate, device)
            start = time.perf_counter()
            sequential = []
            for s in settings:  # as NoiseSweep does
                with ParameterNoise(s.parameters, s.sigma, s.mode, s.seed), \
                        NonFiniteCounter().watching(model) as counter:
                    metrics = evaluate()
                sequential.append(dict(metrics,
                                       nonfinite_fraction=counter.fraction))
            report['sequential_s'] = time.perf_counter() - start

            def shared_sweep() -> List[Dict[str, float]]:
                together = []
                for i in range(0, len(settings), max_heads):
                    together += shared(settings[i:i + max_heads])
                return together

            start = time.perf_counter()
            together = shared_sweep()
            report['shared_s'] = time.perf_counter() - start
            if options.profile:  # once more, not timed
                _, report['profile'] = _profiled(shared_sweep)
    report.update(
        metrics=dict(sequential=sequential, shared=together),
        identical=all(_same(a, b) for a, b in zip(sequential, together)),
        ratio=report['shared_s'] / report['sequential_s'],
        passes=-(-options.settings // max_heads), max_heads=max_heads)
    return report, device


def write_table(options: SharedSweepOptions, report: Dict[str, Any],
                device: torch.device) -> None:
    """``benchmark.json`` (``report``, the machine, the run's row) and
    ``benchmark.md`` in ``options.out``."""
    row = dict(config=osp.relpath(options.config), images=options.images,
               size='x'.join(map(str, options.image_size)),
               settings=options.settings, sequential_s=report['sequential_s'],
               shared_s=report['shared_s'], ratio=report['ratio'],
               encoder_share=report['encoder_s'] / report['evaluation_s'],
               identical=report['identical'], amp=options.amp, status='ok')
    write_json(osp.join(options.out, 'benchmark.json'),
               dict(report, machine=machine(device), results=[row]))
    write_text(osp.join(options.out, 'benchmark.md'),
               BENCHMARK.markdown_table([row]) + '\n')
