"""The GPU smoke check's plan and its training legs (used by
tests/gpu/test_gpu_smoke.py on a GPU and test_gpu_smoke_dry_run.py on the
CPU).

Every published decode head (the CBSA head over-parameterised and
rigorous, the MSSA head in self- and cross-attention, the TSSA head,
Segmenter's mask and linear heads, each on ViT-T) and the CBT-T encoder
under its CBSA head trains :attr:`SmokePlan.iterations` iterations from
the same random weights on the same batches in each precision of
:data:`PRECISIONS`, each step mmengine's ``model.train_step(data,
optim_wrapper)`` with the wrapper the Runner builds from the config: its
``OptimWrapper`` in float32, ``AmpOptimWrapper`` with a dynamic loss scale
in bfloat16 and float16 (``enable_amp``, as ``tools/train.py --amp
--amp-dtype``). Per row: every loss finite, the last within
:data:`LOSS_TOLERANCE` (relative) of float32's, the steps the loss scaler
skipped (the decreases of ``get_scale()``), and the scaled-dot-product
kernel each attention ran in the first forward, read from the profiler.
docs/benchmarks.md ("GPU check") says how the tolerance was chosen.
"""
from __future__ import annotations

import contextlib
import copy
import glob
import math
import os.path as osp
import time
import traceback
import warnings
from dataclasses import dataclass, replace
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple

import torch
import torch.nn as nn
from mmengine.optim import AmpOptimWrapper, OptimWrapper

from mmseg_whitebox.analysis.benchmark import build_models
from mmseg_whitebox.analysis.decoder_benchmark import HEAD_CONFIGS
from mmseg_whitebox.analysis.train_step_benchmark import TRAIN_CONFIGS

from _helpers import sdpa_backend

#: the precisions of every model, float32 first (the others' reference)
PRECISIONS: Tuple[str, ...] = ('float32', 'bfloat16', 'float16')
#: the largest relative gap |loss_amp - loss_fp32| / |loss_fp32| of the
#: last iteration's loss that passes
LOSS_TOLERANCE = 0.05
#: what an attention that never calls F.scaled_dot_product_attention ran
EXPLICIT = 'explicit matmul'
#: the prefix of the profiler ranges that mark an attention module's call
SITE_RANGE = 'gpu_smoke_site:'

#: Segmenter's linear head is published on ViT-S only; the check runs it
#: on the ViT-T of configs/segmenter/segmenter_vit-t_mask_*.py
VIT_T_LINEAR = {'model.backbone.embed_dims': 192,
                'model.backbone.num_heads': 3,
                'model.decode_head.in_channels': 192,
                'model.decode_head.channels': 192}

#: model name -> (config glob under configs/, with {size}; cfg options)
SMOKE_CONFIGS: Dict[str, Tuple[str, Dict[str, Any]]] = {
    'segmenter': (HEAD_CONFIGS['segmenter'], {}),
    'linear': (HEAD_CONFIGS['linear'].replace('{size}', 's'), VIT_T_LINEAR),
    'mssa': (HEAD_CONFIGS['mssa'], {}),
    'mssa-ca': (HEAD_CONFIGS['mssa-ca'], {}),
    'tssa': (HEAD_CONFIGS['tssa'], {}),
    'cbsa': (HEAD_CONFIGS['cbsa'], {}),
    'cbsa-rigorous': (HEAD_CONFIGS['cbsa-rigorous'], {}),
    'cbt+cbsa': (TRAIN_CONFIGS['cbt+cbsa'], {}),
}


@dataclass(frozen=True)
class SmokePlan:
    """What a smoke check runs: the models (of :data:`SMOKE_CONFIGS`, at
    model size ``arch``), the precisions, the training run of each
    (``iterations`` steps of ``batch`` crops of ``crop`` pixels) and the
    DDP run (``ddp_model``, ``ddp_iterations`` steps of ``ddp_batch``
    crops per process, ``ddp_processes`` processes: None for one per
    visible GPU). ``rep_grid``: CBSA's grid of representatives in every
    model, None for each config's own."""
    models: Tuple[str, ...]
    precisions: Tuple[str, ...]
    arch: str
    crop: Tuple[int, int]
    batch: int
    iterations: int
    ddp_model: str
    ddp_crop: Tuple[int, int]
    ddp_batch: int
    ddp_iterations: int
    ddp_processes: Optional[int]
    rep_grid: Optional[Tuple[int, int]]
    sizes_note: str


#: the plan's fields a dry run may shrink; every other field is the GPU's
SIZE_FIELDS = ('crop', 'batch', 'iterations', 'ddp_crop', 'ddp_batch',
               'ddp_iterations', 'ddp_processes', 'rep_grid', 'sizes_note')

#: what a GPU runs, meant to take under 5 minutes on one current GPU
GPU_PLAN = SmokePlan(
    models=tuple(SMOKE_CONFIGS), precisions=PRECISIONS, arch='t',
    crop=(512, 512), batch=4, iterations=20, ddp_model='cbsa',
    ddp_crop=(512, 512), ddp_batch=4, ddp_iterations=5, ddp_processes=None,
    rep_grid=None,
    sizes_note=('ViT-T models, 512x512 crops, batch 4, 20 iterations; DDP: '
                '5 iterations of batch 4 per GPU on every visible GPU'))

#: the same plan on the CPU at tiny sizes (a check of the code path; its
#: figures mean nothing): 64x64 crops are a 4x4 token grid, so CBSA's
#: representatives shrink with them to 2x2 (the configs' 10x10 and 16x16
#: need crops where half-precision autocast on a CPU takes minutes)
DRY_RUN_PLAN = replace(
    GPU_PLAN, crop=(64, 64), batch=1, iterations=2, ddp_crop=(64, 64),
    ddp_batch=1, ddp_iterations=2, ddp_processes=2, rep_grid=(2, 2),
    sizes_note=('dry run on the CPU: 64x64 crops, batch 1, 2 iterations, '
                'CBSA representatives 2x2; DDP: 2 gloo processes, 2 '
                'iterations of one 64x64 crop each'))


# ----------------------------------------------------------- the precisions
def precision_problem(device: torch.device, precision: str) -> Optional[str]:
    """Why ``device`` cannot train in ``precision`` here, or None: a GPU
    without bfloat16; on the CPU, a torch without a CPU loss scaler or
    whose CPU autocast does not cast to that dtype (float16 before torch
    2.3)."""
    if precision == 'float32':
        return None
    dtype = getattr(torch, precision)
    if device.type == 'cuda':
        if dtype == torch.bfloat16 and not torch.cuda.is_bf16_supported():
            return f'unavailable: {torch.cuda.get_device_name(device)} has ' \
                'no bfloat16'
        return None
    try:
        torch.amp.GradScaler('cpu')
    except (AttributeError, TypeError, RuntimeError):
        return (f'unavailable: torch {torch.__version__} has no CPU loss '
                'scaler (torch.amp.GradScaler("cpu"), torch >= 2.3)')
    with warnings.catch_warnings():
        warnings.simplefilter('ignore')
        with torch.autocast('cpu', dtype=dtype):
            cast = (torch.ones(2, 2) @ torch.ones(2, 2)).dtype
    if cast != dtype:
        return (f'unavailable: CPU autocast of torch {torch.__version__} '
                f'does not cast to {precision}')
    return None


class CPUAmpOptimWrapper(AmpOptimWrapper):
    """mmengine's ``AmpOptimWrapper`` on the CPU, for the dry run: the same
    ``update_params`` (scaled backward, the scaler's step and update), with
    torch's CPU ``GradScaler`` and CPU autocast in place of the CUDA ones
    mmengine insists on (its constructor refuses a machine without an
    accelerator)."""

    def __init__(self, dtype: str, **kwargs: Any) -> None:
        OptimWrapper.__init__(self, **kwargs)
        self._scale_update_param = None
        self.loss_scaler = torch.amp.GradScaler('cpu')
        self.cast_dtype = getattr(torch, dtype)

    @contextlib.contextmanager
    def optim_context(self, model: nn.Module) -> Iterator[None]:
        with OptimWrapper.optim_context(self, model), torch.autocast(
                'cpu', dtype=self.cast_dtype):
            yield


def build_optim_wrapper(model: nn.Module, precision: str,
                        device: torch.device) -> OptimWrapper:
    """The wrapper the Runner builds from the config for ``precision``: its
    own in float32, else ``AmpOptimWrapper`` in that dtype (``enable_amp``,
    as ``tools/train.py --amp --amp-dtype``); on a CPU, the config's
    optimizer in :class:`CPUAmpOptimWrapper`."""
    from mmengine.config import Config
    from mmengine.optim import build_optim_wrapper as build

    from mmseg_whitebox.utils.amp import enable_amp
    from mmseg_whitebox.utils.logs import quiet_logging
    cfg = Config(dict(optim_wrapper=copy.deepcopy(
        model.cfg.optim_wrapper.to_dict()
        if hasattr(model.cfg.optim_wrapper, 'to_dict')
        else dict(model.cfg.optim_wrapper))))
    if precision != 'float32' and device.type == 'cuda':
        enable_amp(cfg, precision)
    with quiet_logging():  # not mmengine's line per parameter group
        built = build(model, cfg.optim_wrapper)
    if precision == 'float32' or device.type == 'cuda':
        return built
    return CPUAmpOptimWrapper(precision, optimizer=built.optimizer,
                              clip_grad=cfg.optim_wrapper.get('clip_grad'))


# -------------------------------------------------------------- the models
def build_smoke_model(name: str, arch: str, crop: Tuple[int, int],
                      device: torch.device, seed: int, config_root: str,
                      rep_grid: Optional[Tuple[int, int]] = None
                      ) -> nn.Module:
    """Model ``name`` of :data:`SMOKE_CONFIGS` at size ``arch``: random
    weights from ``seed`` (nothing downloaded), training mode, its config
    as ``model.cfg`` and its path as ``model.config_path``; its data
    preprocessor pads to ``crop``, the size of the plan's crops."""
    pattern, options = SMOKE_CONFIGS[name]
    path = sorted(glob.glob(osp.join(config_root,
                                     pattern.format(size=arch))))[0]
    options = dict(options, **{'model.data_preprocessor.size': tuple(crop),
                               'model.data_preprocessor.size_divisor': None})
    model = build_models({name: path}, device, seed, options,
                         rep_grid)[name]
    model.config_path = path
    return model.train()


def smoke_batch(num_classes: int, batch: int, crop: Tuple[int, int],
                seed: int) -> Dict[str, list]:
    """A dataloader's batch (``inputs``: uint8 images, ``data_samples``
    with ``gt_sem_seg``) whose labels can be learnt: a coarse grid of
    random classes (cells of 16 pixels), each pixel its class's colour
    plus noise, so that the loss falls over the run."""
    from mmengine.structures import PixelData
    from mmseg.structures import SegDataSample
    gen = torch.Generator().manual_seed(seed)
    colours = torch.randint(0, 256, (num_classes, 3),
                            generator=torch.Generator().manual_seed(0))
    h, w = crop
    cells = torch.randint(0, num_classes, (batch, -(-h // 16), -(-w // 16)),
                          generator=gen)
    labels = cells.repeat_interleave(16, 1).repeat_interleave(16, 2)
    labels = labels[:, :h, :w]
    images = colours[labels].permute(0, 3, 1, 2).float() + 40 * torch.randn(
        batch, 3, h, w, generator=gen)
    images = images.round().clamp(0, 255).to(torch.uint8)
    samples = []
    for label in labels:
        sample = SegDataSample(metainfo=dict(img_shape=crop, ori_shape=crop))
        sample.gt_sem_seg = PixelData(data=label[None])
        samples.append(sample)
    return dict(inputs=list(images), data_samples=samples)


def train_step(model: nn.Module, optim_wrapper: OptimWrapper,
               data: Dict[str, list]) -> float:
    """One iteration as the Runner's loop runs it: ``model.train_step``
    (preprocessing, the wrapper's context, the loss, ``update_params``);
    returns the loss."""
    return float(model.train_step(data, optim_wrapper)['loss'].detach())


# --------------------------------------------------- the attention kernels
@contextlib.contextmanager
def profiled_forward(model: nn.Module) -> Iterator[Tuple[Any, List[Any]]]:
    """The next forward of ``model`` under the profiler (CPU activity: the
    ``aten::`` op a backend dispatches to is recorded on the host, CUDA or
    not), every attention site in a range ``SITE_RANGE + name``; gives
    the profiler and the sites."""
    from torch.autograd.profiler import record_function
    from torch.profiler import ProfilerActivity, profile

    from mmseg_whitebox.models.attention_sites import find_attention_sites
    sites = find_attention_sites(model, scope='')
    prof = profile(activities=[ProfilerActivity.CPU])
    open_ranges: List[Any] = []
    running = []

    def enter(name):
        def pre_hook(module, args):
            rng = record_function(SITE_RANGE + name)
            rng.__enter__()
            open_ranges.append(rng)
        return pre_hook

    def leave(module, args, output):
        if open_ranges:
            open_ranges.pop().__exit__(None, None, None)

    def start(module, args):
        if not running:
            prof.__enter__()
            running.append(True)

    def stop(module, args, output):
        if running:
            prof.__exit__(None, None, None)
            running.clear()

    handles = [model.register_forward_pre_hook(start),
               model.register_forward_hook(stop)]
    for site in sites:
        handles.append(site.attention.register_forward_pre_hook(
            enter(site.name)))
        handles.append(site.attention.register_forward_hook(leave))
    try:
        yield prof, sites
    finally:
        for handle in handles:
            handle.remove()
        while open_ranges:
            open_ranges.pop().__exit__(None, None, None)
        if running:
            prof.__exit__(None, None, None)


def kernels_by_site(events: Sequence[Any], sites: Sequence[Any]
                    ) -> Dict[str, List[str]]:
    """Per site name, the scaled-dot-product backends its forward ran
    (each backend op's enclosing site range), or ``[EXPLICIT]``."""
    found: Dict[str, set] = {site.name: set() for site in sites}
    for event in events:
        backend = sdpa_backend(event.name)
        if backend is None:
            continue
        parent = event.cpu_parent
        while parent is not None and not parent.name.startswith(SITE_RANGE):
            parent = parent.cpu_parent
        if parent is not None:
            found.setdefault(parent.name[len(SITE_RANGE):],
                             set()).add(backend)
    return {name: sorted(b) or [EXPLICIT] for name, b in found.items()}


def kernel_summary(sites: Sequence[Any], kernels: Dict[str, List[str]]
                   ) -> str:
    """The kernels in one cell: per part of the model (``backbone``,
    ``decode_head``) and operator class, how many attentions ran what."""
    groups: Dict[Tuple[str, str, str], int] = {}
    for site in sites:
        key = (site.name.split('.', 1)[0], type(site.attention).__name__,
               ' + '.join(kernels.get(site.name, [EXPLICIT])))
        groups[key] = groups.get(key, 0) + 1
    return '; '.join(f'{part} {count}x {cls}: {ran}'
                     for (part, cls, ran), count in groups.items()) or \
        'no attention'


# ------------------------------------------------------------- one leg
def _synchronize(device: torch.device) -> None:
    if device.type == 'cuda':
        torch.cuda.synchronize(device)


def train_leg(model: nn.Module, initial: Dict[str, torch.Tensor],
              precision: str, batches: Sequence[Dict[str, list]],
              device: torch.device, seed: int) -> Dict:
    """``len(batches)`` training steps of ``model`` from the weights
    ``initial`` in ``precision``: the losses, the loss scaler's scale
    after every step, the kernels of the first (profiled) forward,
    seconds per later step and, on CUDA, the peak memory."""
    model.load_state_dict(initial)
    model.train()
    optim_wrapper = build_optim_wrapper(model, precision, device)
    scaler = getattr(optim_wrapper, 'loss_scaler', None)
    torch.manual_seed(seed)  # the same dropout draws in every precision
    if device.type == 'cuda':
        torch.cuda.reset_peak_memory_stats(device)
    row: Dict[str, Any] = dict(precision=precision)
    scales = [scaler.get_scale()] if scaler is not None else []
    with profiled_forward(model) as (prof, sites):
        losses = [train_step(model, optim_wrapper, batches[0])]
    row['kernels'] = kernels_by_site(prof.events(), sites)
    row['attention'] = kernel_summary(sites, row['kernels'])
    if scaler is not None:
        scales.append(scaler.get_scale())
    _synchronize(device)
    start = time.perf_counter()
    for data in batches[1:]:
        losses.append(train_step(model, optim_wrapper, data))
        if scaler is not None:
            scales.append(scaler.get_scale())
    _synchronize(device)
    if len(batches) > 1:
        row['s_per_iter'] = (time.perf_counter() - start) / (
            len(batches) - 1)
    if device.type == 'cuda':
        row['peak_mib'] = torch.cuda.max_memory_allocated(device) / 2**20
    row.update(losses=losses, first_loss=losses[0], last_loss=losses[-1])
    if scaler is not None:
        row.update(scales=scales, final_scale=scales[-1], skipped_steps=sum(
            b < a for a, b in zip(scales, scales[1:])))
    return row


def judge(row: Dict, reference: Optional[float], tolerance: float) -> None:
    """``row['status']``: ``'ok'``, or what failed (a non-finite loss, the
    last loss too far from float32's ``reference``); adds ``vs_float32``
    (the relative gap) to an autocast row."""
    bad = [i for i, loss in enumerate(row['losses'])
           if not math.isfinite(loss)]
    problems = []
    if bad:
        problems.append(f'non-finite loss at iteration {bad[0] + 1} '
                        f'({len(bad)} of {len(row["losses"])})')
    if row['precision'] != 'float32' and reference is not None and \
            math.isfinite(reference) and not bad:
        gap = abs(row['last_loss'] - reference) / abs(reference)
        row['vs_float32'] = gap
        if gap > tolerance:
            problems.append(f'last loss {gap:.1%} from float32\'s '
                            f'(tolerance {tolerance:.0%})')
    row['status'] = 'FAILED: ' + '; '.join(problems) if problems else 'ok'


def smoke_model(name: str, plan: SmokePlan, device: torch.device,
                seed: int, config_root: str) -> List[Dict]:
    """The rows of model ``name``, one per precision of ``plan`` (an error
    in one precision is its row's status; the others still run)."""
    model = build_smoke_model(name, plan.arch, plan.crop, device, seed,
                              config_root, plan.rep_grid)
    initial = {k: v.detach().clone() for k, v in model.state_dict().items()}
    batches = [smoke_batch(model.decode_head.num_classes, plan.batch,
                           plan.crop, seed + i)
               for i in range(plan.iterations)]
    config = osp.relpath(model.config_path, osp.dirname(config_root))
    rows, reference = [], None
    for precision in plan.precisions:
        base = dict(model=name, config=config, precision=precision)
        problem = precision_problem(device, precision)
        if problem:
            rows.append(dict(base, status=problem))
            continue
        try:
            row = dict(base, **train_leg(model, initial, precision, batches,
                                         device, seed))
            judge(row, reference, LOSS_TOLERANCE)
        except Exception as exc:  # noqa: BLE001 (the row says it; go on)
            if isinstance(exc, torch.cuda.OutOfMemoryError):
                torch.cuda.empty_cache()
            row = dict(base, status=f'error: {type(exc).__name__}: '
                       f'{str(exc).splitlines()[0] if str(exc) else ""}',
                       traceback=traceback.format_exc())
        if precision == 'float32' and 'last_loss' in row:
            reference = row['last_loss']
        rows.append(row)
    del model
    if device.type == 'cuda':
        torch.cuda.empty_cache()
    return rows
