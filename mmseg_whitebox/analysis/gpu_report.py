"""The project's four benchmarks on one GPU, in float32 and bfloat16, as one
report.

The logic behind ``tools/analysis_tools/gpu_report.py``: the decoder,
encoder, training-step and shared-encoder-sweep benchmarks
(:mod:`.decoder_benchmark`, :mod:`.encoder_benchmark`,
:mod:`.train_step_benchmark`, :mod:`.shared_encoder_benchmark`) run with
GPU sizes (:data:`GPU_PLAN`: images up to 4096x4096 pixels, 65,536
tokens, for the decode heads; crops up to 2048x2048 for the encoders and
the training step), each once without autocast and once under bfloat16
autocast, each timing option budgeted so that the whole run is meant to
take under 8 minutes on one current GPU. Every model is built once and
measured in both precisions. Writes ``gpu_report.md`` (one table per
benchmark, with the device name, torch version and date) and one JSON per
benchmark. ``dry_run`` runs the same plan on the CPU at tiny sizes
(:data:`DRY_RUN_PLAN`: the same models, heads and banded-loss rows, only
sizes, CBSA's grid of representatives and timing replaced), to check the
code path without a GPU. FLOPs are
not counted: they do not depend on the device, and the CPU tables of
``docs/benchmarks.md`` have them.
"""
from __future__ import annotations

import os.path as osp
import time
from dataclasses import dataclass, field, replace
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import torch

from mmseg_whitebox.utils.atomic import write_json, write_text
from mmseg_whitebox.utils.run_lock import lock_folder
from mmseg_whitebox.utils.tool_error import InputError
from . import decoder_benchmark, encoder_benchmark, train_step_benchmark
from .benchmark import (Benchmark, BenchmarkOptions, machine,
                        missing_gpu_line, prepare_run, recompile_limit,
                        rep_grid_options)
from .report import slopes
from .shared_encoder_benchmark import BENCHMARK as SHARED_SWEEP
from .shared_encoder_benchmark import (SharedSweepOptions,
                                       run_shared_encoder_benchmark)
from .timing import autocast

#: the precisions of every benchmark: None (float32) and autocast bfloat16
PRECISIONS: Tuple[Optional[str], ...] = (None, 'bfloat16')
REPORT = 'gpu_report.md'


@dataclass
class ReportPlan:
    """Sizes, models and timing budgets of every benchmark of a report."""
    decoder_encoder: str
    decoder_heads: Sequence[str]
    decoder_sizes: Sequence[Tuple[int, int]]
    decoder_timing: BenchmarkOptions
    encoder_size: str
    encoders: Sequence[str]
    encoder_sizes: Sequence[Tuple[int, int]]
    encoder_timing: BenchmarkOptions
    train_size: str
    train_models: Sequence[str]
    train_sizes: Sequence[Tuple[int, int]]
    train_batch: int
    train_band_rows: Optional[int]
    train_timing: BenchmarkOptions
    sweep_config: str  # relative to the config root
    sweep_images: int
    sweep_image_size: Tuple[int, int]
    sweep_settings: int
    #: config overrides of the sweep's model (None: the config as it is)
    sweep_cfg_options: Optional[Dict] = None
    #: CBSA's grid of representatives in every model (None: each config's)
    rep_grid: Optional[Tuple[int, int]] = None
    #: decode heads also timed compiled (``torch.compile``, inductor, a
    #: graph per size and precision), beside themselves eager
    decoder_compiled: Sequence[str] = ()
    sizes_note: str = field(default='')


#: the plan's fields a dry run may shrink: sizes (of the inputs, and the
#: model size of the encoders and training-step models), CBSA's grid of
#: representatives, timing budgets and the compiled heads (inductor's
#: compilations, per size and precision, would take the CPU minutes; the
#: compiled rows' path is tests/test_gpu_report.py's with dynamo's eager
#: backend); the models, heads, banded-loss rows and configs are the GPU's
SIZE_FIELDS = ('decoder_sizes', 'decoder_timing', 'encoder_size',
               'encoder_sizes', 'encoder_timing', 'train_size',
               'train_sizes', 'train_batch', 'train_timing', 'sweep_images',
               'sweep_image_size', 'sweep_settings', 'sweep_cfg_options',
               'rep_grid', 'decoder_compiled', 'sizes_note')


def _squares(*sides: int) -> List[Tuple[int, int]]:
    return [(s, s) for s in sides]


#: what a GPU report runs. Timing budgets: each timed call is stopped
#: after ``max_seconds`` of timed calls (at least 3, or one call longer
#: than that), so that the largest sizes cost seconds, not minutes; the
#: sizes a model is predicted (from its smaller sizes) not to fit in 80%
#: of the GPU's free memory are skipped, as in the benchmark tools.
GPU_PLAN = ReportPlan(
    decoder_encoder='s', decoder_heads=tuple(decoder_benchmark.HEAD_CONFIGS),
    decoder_sizes=_squares(512, 1024, 2048, 4096),
    decoder_timing=BenchmarkOptions(repeats=10, warmup=2, max_seconds=1.0,
                                    flops=False),
    encoder_size='s', encoders=tuple(encoder_benchmark.ENCODER_CONFIGS),
    encoder_sizes=_squares(512, 1024, 2048),
    encoder_timing=BenchmarkOptions(repeats=5, warmup=1, max_seconds=1.0,
                                    flops=False),
    train_size='s', train_models=('vit+segmenter', 'vit+cbsa', 'cbt+cbsa'),
    train_sizes=_squares(512, 1024, 2048), train_batch=1,
    train_band_rows=64,
    train_timing=BenchmarkOptions(repeats=3, warmup=1, max_seconds=2.0,
                                  flops=False),
    sweep_config='cbsa/cbsa_vit-s_8xb1-160k_ade20k-512x512.py',
    sweep_images=4, sweep_image_size=(512, 683), sweep_settings=20,
    decoder_compiled=('segmenter', 'cbsa'),
    sizes_note=('decode heads: images of 512 to 4096 pixels square (1,024 '
                'to 65,536 tokens of the ViT-S grid); encoders and training '
                'step: crops of 512 to 2048 pixels square; sweep: 4 images '
                'of 512x683, 20 settings'))

#: the same plan -- the same models, heads, banded-loss rows and configs --
#: at tiny sizes, timed once (a check of the code path on a CPU; its
#: figures mean nothing): the encoders and training step as ViT-T models
#: (the decode heads stay on ViT-S features: the linear head has only
#: that config); 64-pixel squares are a 4x4 token grid, so CBSA's
#: representatives shrink with them to 2x2 (the configs' 10x10 and 16x16
#: need 160 and 256 pixels, where bfloat16 autocast on a CPU without
#: bfloat16 instructions takes minutes); the sweep's image is kept at 64
#: pixels (neither the pipeline nor the released short-side resize takes it
#: to 512) and inferred in one window of that size
_ONCE = BenchmarkOptions(repeats=1, warmup=0, max_seconds=None, flops=False)
DRY_RUN_PLAN = replace(
    GPU_PLAN, decoder_sizes=_squares(64), decoder_timing=_ONCE,
    encoder_size='t', encoder_sizes=_squares(64), encoder_timing=_ONCE,
    train_size='t', train_sizes=_squares(64), train_timing=_ONCE,
    rep_grid=(2, 2), decoder_compiled=(),
    sweep_images=1, sweep_image_size=(64, 64), sweep_settings=2,
    sweep_cfg_options={
        'test_dataloader.dataset.pipeline.1.scale': (256, 64),
        'model.test_cfg.crop_size': (64, 64),
        'model.test_cfg.stride': (64, 64),
        'model.data_preprocessor.test_short_side': 64},
    sizes_note=('dry run on the CPU: the GPU plan at 64x64, encoders and '
                'training step at ViT-T size, CBSA representatives 2x2, '
                'timed once, nothing compiled; sweep: one 64x64 image, 2 '
                'settings'))


def missing_gpu(device: str) -> Optional[str]:
    """The one line to print instead of a report when ``device`` is a CUDA
    device torch cannot see (None when it can)."""
    return missing_gpu_line(device, 'there is no GPU report to make')


def precision_name(amp: Optional[str]) -> str:
    return amp or 'float32'


def _with_precision(rows: List[Dict], amp: Optional[str]) -> List[Dict]:
    for row in rows:
        row['precision'] = precision_name(amp)
    return rows


def _in_both_precisions(sizes: Sequence, timing: BenchmarkOptions,
                        measure: Callable, bench: Benchmark,
                        device: torch.device) -> List[Dict]:
    """``measure(size, options, history)`` at every size (all sizes timed
    side by side), in float32 and then bfloat16 (each with its own
    ratios), the rows marked with their precision."""
    rows: List[Dict] = []
    for amp in PRECISIONS:
        options = BenchmarkOptions(**dict(vars(timing), amp=amp))
        history: Dict = {}
        done = bench.measure_sizes(
            sizes, lambda size: measure(size, options, history), options,
            device)
        bench.add_ratios(done)
        rows += _with_precision(done, amp)
    return rows


def _decoders(plan: ReportPlan, device: torch.device, limit: Optional[int],
              config_root: str) -> List[Dict]:
    heads, info = decoder_benchmark.build_heads(
        list(plan.decoder_heads), plan.decoder_encoder, device, 0,
        config_root, plan.rep_grid)
    bench = decoder_benchmark.BENCHMARK.with_compiled(
        decoder_benchmark.add_compiled(heads, info, plan.decoder_compiled),
        decoder_benchmark.COMPILED_KEYS)
    with recompile_limit():
        return _in_both_precisions(
            plan.decoder_sizes, plan.decoder_timing,
            lambda size, options, history: decoder_benchmark.measure_size(
                heads, info, size, options, device, history, limit),
            bench, device)


def _encoders(plan: ReportPlan, device: torch.device, limit: Optional[int],
              config_root: str) -> List[Dict]:
    models = encoder_benchmark.build_segmentors(
        list(plan.encoders), plan.encoder_size, device, 0, config_root,
        plan.rep_grid)
    return _in_both_precisions(
        plan.encoder_sizes, plan.encoder_timing,
        lambda size, options, history: encoder_benchmark.measure_size(
            models, size, options, device, history, limit, False),
        encoder_benchmark.BENCHMARK, device)


def _train_step(plan: ReportPlan, device: torch.device,
                limit: Optional[int], config_root: str) -> List[Dict]:
    models = train_step_benchmark.build_trainable(
        list(plan.train_models), plan.train_size, device, 0, config_root,
        loss_band_rows=plan.train_band_rows, rep_grid=plan.rep_grid)
    return _in_both_precisions(
        plan.train_sizes, plan.train_timing,
        lambda size, options, history: train_step_benchmark.measure_size(
            models, size, plan.train_batch, options, device, history,
            limit),
        train_step_benchmark.BENCHMARK, device)


def _shared_sweep(plan: ReportPlan, device: torch.device,
                  limit: Optional[int], config_root: str) -> List[Dict]:
    config = osp.join(config_root, plan.sweep_config)
    cfg_options = dict(plan.sweep_cfg_options or {})
    if plan.rep_grid is not None:
        from mmengine.config import Config
        cfg_options.update(rep_grid_options(Config.fromfile(config).model,
                                            plan.rep_grid))
    options = SharedSweepOptions(
        config=config, images=plan.sweep_images,
        image_size=tuple(plan.sweep_image_size),
        settings=plan.sweep_settings, device=str(device),
        cfg_options=cfg_options or None)
    rows = []
    for amp in PRECISIONS:
        with autocast(device, amp):  # the whole evaluation, as --amp does
            report = run_shared_encoder_benchmark(options)
        rows.append(dict(
            precision=precision_name(amp), config=plan.sweep_config,
            images=plan.sweep_images,
            size='x'.join(map(str, plan.sweep_image_size)),
            settings=plan.sweep_settings, sequential_s=report['sequential_s'],
            shared_s=report['shared_s'], ratio=report['ratio'],
            encoder_share=report['encoder_s'] / report['evaluation_s'],
            identical=report['identical'], status='ok'))
    return rows


def _table(bench: Benchmark) -> Benchmark:
    """A benchmark's table here: precision first, FLOPs left out (not
    counted here)."""
    return replace(bench, columns=[('precision', 'precision', '{}')] + [
        c for c in bench.columns if 'flops' not in c[0]])


#: benchmark -> (title, runner, its table), in the order they run
BENCHMARKS: Dict[str, Tuple[str, Callable, Benchmark]] = {
    'decoders': ('Decode heads on ViT features', _decoders,
                 _table(decoder_benchmark.BENCHMARK)),
    'encoders': ('Encoders under the CBSA head', _encoders,
                 _table(encoder_benchmark.BENCHMARK)),
    'train_step': ('One training step', _train_step,
                   _table(train_step_benchmark.BENCHMARK)),
    'shared_sweep': ('Shared-encoder noise sweep', _shared_sweep,
                     _table(SHARED_SWEEP)),
}


#: the linearity check: per benchmark, the figure whose log-log slope
#: against tokens the report fits for every model and precision (1: cost
#: linear in the number of tokens; attention over all pairs tends to 2)
SLOPE_OF = {'decoders': 'fwd_ms'}


def slope_lines(rows: List[Dict], key: str) -> List[str]:
    """Per precision, every model's fitted slope of ``key`` against
    tokens (models measured at fewer than two sizes left out)."""
    lines = []
    for precision in dict.fromkeys(r['precision'] for r in rows):
        fits = slopes([r for r in rows if r['precision'] == precision],
                      (key, ))
        if fits:
            lines.append(
                f'Slope of {key} against tokens (log-log; 1 = linear), '
                f'{precision}: ' + ', '.join(
                    f'{head} {fit[key]:.2f}' for head, fit in fits.items())
                + '.')
    return lines


def report_markdown(facts: Dict, plan: ReportPlan,
                    results: Dict[str, Dict]) -> str:
    """The report: a header naming the device, torch and date, then per
    benchmark its seconds and one table (rows of both precisions)."""
    device = facts.get('gpu') or facts['cpu']
    lines = [f'# GPU report: {device}', '',
             f'{device}, torch {facts["torch"]}, {facts["date"]}; '
             f'{plan.sizes_note}; float32 and bfloat16 autocast.', '']
    for name, (title, _, table) in BENCHMARKS.items():
        done = results.get(name)
        if done is None:
            continue
        lines += [f'## {title}', '', f'{done["seconds"]:.0f} s.', '']
        if 'error' in done:
            lines += [f'Not measured: {done["error"]}', '']
            continue
        lines += [table.markdown_table(done['results']), '']
        if name in SLOPE_OF:
            fits = slope_lines(done['results'], SLOPE_OF[name])
            lines += fits + [''] if fits else []
    return '\n'.join(lines)


def run_gpu_report(out_dir: str, device: str = 'cuda',
                   dry_run: bool = False,
                   config_root: Optional[str] = None) -> Dict:
    """Run every benchmark of :data:`GPU_PLAN` on ``device`` (or of
    :data:`DRY_RUN_PLAN` on the CPU with ``dry_run``), in float32 and
    bfloat16, and write ``gpu_report.md`` and ``<benchmark>.json`` to
    ``out_dir``; returns ``{machine, results}``. A benchmark that runs out
    of GPU memory is reported as such and the others still run.
    ``ValueError`` for a device torch cannot see, or the GPU sizes asked
    of a CPU (hours: use ``dry_run`` or the benchmark tools)."""
    from mmseg_whitebox.engine.model_index import resources_root
    if dry_run:
        device, plan = 'cpu', DRY_RUN_PLAN
    else:
        plan = GPU_PLAN
        if torch.device(device).type != 'cuda':
            raise InputError(f'the GPU sizes on {device!r} would take '
                             'hours: give a CUDA device, or --dry-run for '
                             'the tiny CPU run')
    with lock_folder(out_dir, '--out'):  # one run writes there at a time
        dev, limit = prepare_run(device, None, None)
        if config_root is None:
            root = resources_root()
            if root is None:
                raise InputError('no configs/ found (neither a checkout '
                                 'nor an installed wheel\'s)')
            config_root = osp.join(root, 'configs')
        facts = machine(dev)
        print(f'GPU report on {facts.get("gpu") or facts["cpu"]}, torch '
              f'{facts["torch"]}: {plan.sizes_note}', flush=True)
        results: Dict[str, Dict] = {}
        for name, (title, runner, _) in BENCHMARKS.items():
            print(f'\n=== {title}', flush=True)
            start = time.perf_counter()
            try:
                done: Dict = dict(
                    results=runner(plan, dev, limit, config_root))
            except torch.cuda.OutOfMemoryError as exc:
                done = dict(
                    error=f'out of GPU memory ({exc})'.splitlines()[0])
                torch.cuda.empty_cache()
            done['seconds'] = time.perf_counter() - start
            results[name] = done
            write_json(osp.join(out_dir, f'{name}.json'),
                       dict(machine=facts, benchmark=name, **done))
        write_text(osp.join(out_dir, REPORT),
                   report_markdown(facts, plan, results) + '\n')
        return dict(machine=facts, results=results)
