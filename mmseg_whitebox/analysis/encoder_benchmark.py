"""White-box encoders against mmseg's ViT, alone and inside the segmentor
(``tools/analysis_tools/benchmark_encoders.py``).

Every model is built from this project's ADE20K config of one size with
the CBSA head, random weights, and fed the same random image. Per image
size and encoder: parameters and FLOPs of the encoder and of the whole
segmentor (tensor mode), forward latency of both, forward+backward
latency of the encoder, their peak memory, and each as a ratio to ViT.
"""
from __future__ import annotations

from functools import partial
from typing import Dict, List, Optional, Sequence, Tuple

import torch
import torch.nn as nn

from .benchmark import (Benchmark, BenchmarkOptions, SizeRows, build_models,
                        new_row, prepare_run, project_configs, start_report)
from .complexity import flop_analyzer
from .memory import peak_memory, skipped
from .report import Baseline, describe_row
from .timing import backward_call, inference_call

# encoder name -> config (relative to configs/, {size} = t|s|b)
ENCODER_CONFIGS = {
    'vit': 'cbsa/cbsa_vit-{size}_*_ade20k-*.py',
    'crate': 'cbsa/cbsa_crate-{size}_*_ade20k-*.py',
    'tost': 'cbsa/cbsa_tost-{size}_*_ade20k-*.py',
    'cbt': 'cbsa/cbsa_cbt-{size}_*_ade20k-*.py',
    'crate-cbt': 'cbsa/cbsa_crate-cbt-{size}_*_ade20k-*.py',
    'cbsa-vit': 'cbsa/cbsa_cbsa-vit-{size}_*_ade20k-*.py',
    'mita': 'mita/cbsa_mita-vit-{size}_*_ade20k-*.py',
}
REFERENCE = 'vit'


class TensorMode(nn.Module):
    """The segmentor in tensor mode (encoder + head logits), traceable."""

    def __init__(self, segmentor: nn.Module) -> None:
        super().__init__()
        self.segmentor = segmentor

    def forward(self, image: torch.Tensor) -> torch.Tensor:
        return self.segmentor(image, mode='tensor')


def build_segmentors(names: List[str], size: str, device: torch.device,
                     seed: int, config_root: str,
                     rep_grid: Optional[Tuple[int, int]] = None
                     ) -> Dict[str, nn.Module]:
    """Segmentors (eval mode, random weights, nothing downloaded)."""
    return build_models({name: BENCHMARK.config(name, size, config_root)
                         for name in names}, device, seed, rep_grid=rep_grid)


def complexity(module: nn.Module, image: torch.Tensor) -> Tuple[int, int]:
    """``(flops, params)`` (fused multiply-adds, attention counted)."""
    with torch.no_grad():
        flops = flop_analyzer(module, (image, )).total()
    return int(flops), sum(p.numel() for p in module.parameters())


def measure_size(models: Dict[str, nn.Module], size: Tuple[int, int],
                 options: BenchmarkOptions, device: torch.device,
                 history: Dict[str, List[Dict]],
                 memory_limit: Optional[int], flops: bool) -> SizeRows:
    """All measurements of every encoder at one image size."""
    gen = torch.Generator().manual_seed(options.seed)
    image = torch.randn(1, 3, *size, generator=gen).to(device)

    def measure(name: str, model: nn.Module, past: List[Dict]):
        row = new_row(name, size, tokens=(-(-size[0] // 16)) *
                      (-(-size[1] // 16)))
        calls = {kind: inference_call(module, image, device, options.amp)
                 for kind, module in (('enc_fwd', model.backbone),
                                      ('seg_fwd', TensorMode(model)))}
        if options.backward:
            calls['enc_train'] = backward_call(model.backbone, image, device,
                                               options.amp)
        for kind, fn in list(calls.items()):
            mem_key = kind.replace('_fwd', '_mem_fwd').replace(
                '_train', '_mem_train')
            if skipped(row, mem_key, past, memory_limit,
                       f'{kind} skipped: predicted to need'):
                del calls[kind]
            else:
                row[mem_key], _ = peak_memory(fn, device)
        if flops:
            row['enc_flops'], row['enc_params'] = complexity(
                model.backbone, image)
            row['seg_flops'], row['seg_params'] = complexity(
                TensorMode(model), image)
        else:
            row['enc_params'] = sum(
                p.numel() for p in model.backbone.parameters())
        return row, calls

    return BENCHMARK.measure_size(models, measure, history)


#: a row's figures: ``enc_*`` (the encoder), ``seg_*`` (the segmentor)
BENCHMARK = Benchmark(
    columns=[
        ('head', 'encoder', '{}'), ('size', 'image', '{}'),
        ('tokens', 'tokens', '{}'), ('enc_params', 'enc params (M)', 'M'),
        ('enc_flops', 'enc GFLOPs', 'G'), ('seg_flops', 'seg GFLOPs', 'G'),
        ('enc_fwd_ms', 'enc fwd ms', '.1f'),
        ('enc_fwd_ms_vs_vit', 'x ViT', 'r'),
        ('seg_fwd_ms', 'seg fwd ms', '.1f'),
        ('seg_fwd_ms_vs_vit', 'x ViT', 'r'),
        ('enc_train_ms', 'enc fwd+bwd ms', '.1f'),
        ('enc_train_ms_vs_vit', 'x ViT', 'r'),
        ('enc_mem_fwd', 'enc fwd MiB', 'Mi'),
        ('enc_mem_fwd_vs_vit', 'x ViT', 'r'),
        ('seg_mem_fwd', 'seg fwd MiB', 'Mi'),
        ('enc_mem_train', 'enc train MiB', 'Mi')],
    baselines=(Baseline(REFERENCE, (
        'enc_flops', 'seg_flops', 'enc_params', 'enc_fwd_ms', 'seg_fwd_ms',
        'enc_train_ms', 'enc_mem_fwd', 'seg_mem_fwd', 'enc_mem_train'),
        REFERENCE), ),
    kinds=('enc_fwd', 'seg_fwd', 'enc_train'), configs=ENCODER_CONFIGS,
    what='encoder {name!r} of size {size!r}',
    remedy='choose another size or leave it out',
    describe=partial(describe_row, fwd='enc_fwd_ms', train='enc_train_ms',
                     mem='enc_mem_fwd'))


# ------------------------------------------------------------------- a run
#: the figures whose slope against tokens a run fits
SLOPE_KEYS = ('enc_fwd_ms', 'seg_fwd_ms', 'enc_train_ms', 'enc_mem_fwd')


def run_encoder_benchmark(out: str,
                          models: Sequence[str],
                          sizes: Sequence[Tuple[int, int]],
                          size: str = 's',
                          flops_sizes: Sequence[Tuple[int, int]] = (
                              (512, 512), ),
                          options: Optional[BenchmarkOptions] = None,
                          device: Optional[str] = None,
                          threads: Optional[int] = None,
                          memory_limit_gb: Optional[float] = None,
                          config_root: Optional[str] = None) -> Dict:
    """What ``tools/analysis_tools/benchmark_encoders.py`` does: the
    encoders ``models`` (names of :data:`ENCODER_CONFIGS`) of model
    ``size`` at every image size of ``sizes`` (FLOPs at ``flops_sizes``),
    written to ``out``. Returns the report: the machine, ``results`` and
    ``slopes``."""
    options = options or BenchmarkOptions()
    torch_device, memory_limit = prepare_run(device, threads,
                                             memory_limit_gb)
    built = build_segmentors(list(models), size, torch_device,
                             options.seed, config_root or project_configs())
    with start_report(out, torch_device, f'size {size.upper()}',
                      options.amp) as facts:
        history: Dict[str, List[Dict]] = {}
        return BENCHMARK.run(
            out, sizes, lambda image_size: measure_size(
                built, image_size, options, torch_device, history,
                memory_limit, image_size in flops_sizes),
            options, torch_device,
            dict(machine=facts, size=size, amp=options.amp),
            f'encoders ({size.upper()})', SLOPE_KEYS,
            latency=('enc_fwd_ms', 'seg_fwd_ms', 'enc_train_ms'),
            memory=('enc_mem_fwd', 'seg_mem_fwd', 'enc_mem_train'))
