"""The cost of one training step of whole segmentors, against ViT +
Segmenter's mask head (``tools/analysis_tools/benchmark_train_step.py``).

Per crop size and model: one optimizer step (forward with the config's
loss, backward, the config's ``optim_wrapper`` step) on a batch of random
crops with random labels, its median time and peak memory, and both as a
ratio to ViT + Segmenter of the same size. With ``loss_band_rows`` every
model is also measured with the decode loss in bands of label rows
(:class:`~mmseg_whitebox.models.segmentors.BandedLossEncoderDecoder`), as
``'<model> banded'``.
"""
from __future__ import annotations

import contextlib
import copy
import os.path as osp
import time
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import torch
import torch.nn as nn

from mmseg_whitebox.utils.atomic import write_json
from .benchmark import (COMPILED, Benchmark, BenchmarkOptions, SizeRows,
                        build_models, is_compiled, new_row, prepare_run,
                        project_configs, recompile_limit, start_report)
from .memory import peak_memory, skipped
from .report import Baseline, compiled_notes
from .timing import autocast

# model name -> config (relative to configs/, {size} = t|s|b)
TRAIN_CONFIGS = {
    'vit+segmenter': 'segmenter/segmenter_vit-{size}_mask_*_ade20k-*.py',
    'vit+cbsa': 'cbsa/cbsa_vit-{size}_*_ade20k-*.py',
    'cbt+cbsa': 'cbsa/cbsa_cbt-{size}_*_ade20k-*.py',
    'crate+cbsa': 'cbsa/cbsa_crate-{size}_*_ade20k-*.py',
    'tost+cbsa': 'cbsa/cbsa_tost-{size}_*_ade20k-*.py',
    'cbsa-vit+cbsa': 'cbsa/cbsa_cbsa-vit-{size}_*_ade20k-*.py',
    'crate-cbt+cbsa': 'cbsa/cbsa_crate-cbt-{size}_*_ade20k-*.py',
}
DEFAULT_MODELS = ('vit+segmenter', 'vit+cbsa', 'cbt+cbsa', 'crate+cbsa',
                  'tost+cbsa', 'cbsa-vit+cbsa')
REFERENCE = 'vit+segmenter'
#: the name of a model's row with the banded loss: model name + this
BANDED = ' banded'
#: a compiled row's figures, as its notes name them
COMPILED_LABELS = dict(step='step', mem_step='step memory')


def build_trainable(names: List[str], size: str, device: torch.device,
                    seed: int, config_root: str, with_cp: bool = False,
                    loss_band_rows: Optional[int] = None,
                    rep_grid: Optional[Tuple[int, int]] = None,
                    compiled: bool = False
                    ) -> Dict[str, Tuple[nn.Module, object]]:
    """``name: (segmentor, optim_wrapper)``, random weights, the optimizer
    from each config's ``optim_wrapper``.

    ``with_cp``: activation checkpointing in the encoder;
    ``loss_band_rows``: each model followed by ``name + BANDED``, the same
    weights in a ``BandedLossEncoderDecoder``; ``rep_grid``: CBSA's grid
    of representatives, if not the configs'; ``compiled``: each model
    followed by ``name + '+compile'``, a copy with its loss compiled as
    ``compile=True`` does in training (static shapes)."""
    from mmengine.optim import build_optim_wrapper
    options = {'model.backbone.with_cp': True} if with_cp else {}
    configs = {n: BENCHMARK.config(n, size, config_root) for n in names}
    built = build_models(configs, device, seed, options or None, rep_grid)
    if loss_band_rows is not None:
        banded = build_models(configs, device, seed, dict(
            options, **{'model.type': 'BandedLossEncoderDecoder',
                        'model.loss_band_rows': int(loss_band_rows)}),
            rep_grid)
        built = {key: model for name in names for key, model in
                 ((name, built[name]), (name + BANDED, banded[name]))}
    if compiled:
        from mmseg_whitebox.engine.hooks.compile_hook import \
            compile_segmentor
        eager, built = built, {}
        for name, model in eager.items():
            built[name] = model
            built[COMPILED.format(name)] = copy.deepcopy(model)
            compile_segmentor(built[COMPILED.format(name)],
                              dict(dynamic=False))
    return {name: (model, build_optim_wrapper(model, model.cfg.optim_wrapper))
            for name, model in built.items()}


def random_batch(model: nn.Module, batch: int, size: Tuple[int, int],
                 device: torch.device, seed: int) -> Tuple[torch.Tensor,
                                                          list]:
    """``batch`` normalised random crops of ``size`` and their random
    labels (one of the model's classes per pixel) as data samples."""
    from mmengine.structures import PixelData
    from mmseg.structures import SegDataSample
    gen = torch.Generator().manual_seed(seed)
    inputs = torch.randn(batch, 3, *size, generator=gen).to(device)
    classes = model.decode_head.num_classes
    samples = []
    for _ in range(batch):
        labels = torch.randint(0, classes, (1, *size), generator=gen)
        sample = SegDataSample(metainfo=dict(
            img_shape=size, pad_shape=size, ori_shape=size))
        sample.gt_sem_seg = PixelData(data=labels.to(device))
        samples.append(sample)
    return inputs, samples


def train_step_fn(model: nn.Module, optim_wrapper, inputs: torch.Tensor,
                  samples: list, device: torch.device,
                  amp: Optional[str]) -> Callable[[], float]:
    """One optimizer step as in a training run (forward in training mode,
    ``OptimWrapper.update_params``); the call returns the loss."""

    def run() -> float:
        model.train()
        try:
            with autocast(device, amp):
                losses = model(inputs, samples, mode='loss')
            loss, _ = model.parse_losses(losses)
            optim_wrapper.update_params(loss)
            return loss.item()
        finally:
            model.eval()

    return run


def measure_size(models: Dict[str, Tuple[nn.Module, object]],
                 size: Tuple[int, int], batch: int,
                 options: BenchmarkOptions, device: torch.device,
                 history: Dict[str, List[Dict]],
                 memory_limit: Optional[int]) -> SizeRows:
    """Time and peak memory of one training step of every model at one
    crop size (a model predicted to need more than ``memory_limit`` bytes
    skipped)."""

    def measure(name: str, built: Tuple[nn.Module, object],
                past: List[Dict]):
        model, optim_wrapper = built
        row = new_row(name, size, batch=batch, tokens=batch * (
            -(-size[0] // 16)) * (-(-size[1] // 16)))
        if skipped(row, 'mem_step', past, memory_limit,
                   'skipped: predicted to need'):
            return row, None
        inputs, samples = random_batch(model, batch, size, device,
                                       options.seed)
        step = train_step_fn(model, optim_wrapper, inputs, samples, device,
                             options.amp)
        # a first step creates the optimizer's state; seeded, so that a
        # model and its banded-loss row draw the same dropout and loss
        torch.manual_seed(options.seed)
        start = time.perf_counter()
        row['loss'] = step()  # a float: the step has finished
        if is_compiled(name):  # the first call compiles
            row['step_compile_s'] = time.perf_counter() - start
        row['mem_step'], _ = peak_memory(step, device)
        row['params'] = sum(p.numel() for p in model.parameters())
        return row, dict(step=step)

    return BENCHMARK.measure_size(models, measure, history)


def describe(row: Dict) -> str:
    """A row's progress line: its step's time and peak memory."""
    step, mem = row.get('step_ms'), row.get('mem_step')
    return (f'{row["head"]:<15} {row["size"]:>9} batch {row["batch"]}  step '
            + (f'{step:.0f} ms' if step else '-') + '  peak '
            + (f'{mem / 2**20:.0f} MiB' if mem else '-')
            + f'  {row["status"]}')


#: ``<key>_vs_ref``: the step's time and memory against :data:`REFERENCE`
BENCHMARK = Benchmark(
    columns=[
        ('head', 'model', '{}'), ('size', 'crop', '{}'),
        ('batch', 'batch', '{}'), ('params', 'params (M)', 'M'),
        ('loss', 'first loss', '.4f'), ('step_ms', 'step ms', '.0f'),
        ('step_ms_vs_ref', f'x {REFERENCE}', 'r'),
        ('mem_step', 'step peak MiB', 'Mi'),
        ('mem_step_vs_ref', f'x {REFERENCE}', 'r')],
    baselines=(Baseline(REFERENCE, ('step_ms', 'mem_step'), 'ref'), ),
    kinds=('step', ), configs=TRAIN_CONFIGS,
    what='model {name!r} of size {size!r}',
    remedy='choose another size or leave that model out', describe=describe,
    notes=lambda row: compiled_notes(row, COMPILED_LABELS))


# ------------------------------------------------------------------- a run
def run_train_step_benchmark(out: str,
                             models: Sequence[str],
                             sizes: Sequence[Tuple[int, int]],
                             size: str = 's',
                             batch: int = 2,
                             with_cp: bool = False,
                             banded_loss: Optional[int] = None,
                             options: Optional[BenchmarkOptions] = None,
                             device: Optional[str] = None,
                             threads: Optional[int] = None,
                             memory_limit_gb: Optional[float] = None,
                             config_root: Optional[str] = None) -> Dict:
    """What ``tools/analysis_tools/benchmark_train_step.py`` does: one
    training step of ``models`` (names of :data:`TRAIN_CONFIGS`) of model
    ``size``, ``batch`` crops of every size of ``sizes``, written to
    ``out`` (``benchmark.json`` after every size, so that a run killed for
    memory keeps what it measured). ``with_cp``, ``banded_loss``: as in
    :func:`build_trainable`. Returns the report: the set-up, ``results``
    and ``slopes``."""
    options = options or BenchmarkOptions()
    torch_device, memory_limit = prepare_run(device, threads,
                                             memory_limit_gb)
    built = build_trainable(list(models), size, torch_device,
                            options.seed,
                            config_root or project_configs(), with_cp,
                            banded_loss, compiled=options.compile)
    benchmark = BENCHMARK.with_compiled(
        [n for n in built if not is_compiled(n)] if options.compile else (),
        ('step_ms', 'mem_step'))
    with start_report(
        out, torch_device, f'size {size.upper()}, batch {batch}'
        + (', with_cp' if with_cp else '')
        + (f', banded loss {banded_loss} rows' if banded_loss else ''),
        options.amp) as facts, (recompile_limit() if options.compile
                                else contextlib.nullcontext()):
        setup = dict(machine=facts, size=size, batch=batch, with_cp=with_cp,
                     banded_loss=banded_loss, amp=options.amp,
                     compile=options.compile)
        history: Dict[str, List[Dict]] = {}
        done: List[Dict] = []

        def measure(crop):
            rows, calls = measure_size(built, crop, batch, options,
                                       torch_device, history, memory_limit)
            done.extend(rows)
            write_json(osp.join(out, 'benchmark.json'),
                       dict(setup, results=done, partial=True))
            return rows, calls

        return benchmark.run(
            out, sizes, measure, options, torch_device, setup,
            f'training step ({size.upper()}, batch {batch})',
            ('step_ms', 'mem_step'), latency=('step_ms', ),
            memory=('mem_step', ))
