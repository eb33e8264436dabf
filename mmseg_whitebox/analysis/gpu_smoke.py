"""A GPU check in minutes: every published decode head and the CBT encoder
train in float32, bfloat16 and float16, then once under DDP.

The logic behind ``tools/analysis_tools/gpu_smoke.py``. Mixed precision
and DDP can only go wrong where they run, and a GPU is often lent for a
few minutes only; this is the check to run first. On the visible GPUs, per
model of :data:`SMOKE_CONFIGS` (the CBSA head over-parameterised and
rigorous, the MSSA head in self- and cross-attention, the TSSA head, the
Segmenter mask head and linear head, each on ViT-T, and the CBT-T encoder
under its CBSA head), :attr:`SmokePlan.iterations` training iterations
from the same random weights on the same batches in each precision of
:data:`PRECISIONS`: float32 with the config's ``OptimWrapper``, and
mmengine's ``AmpOptimWrapper`` with a dynamic loss scale autocasting in
bfloat16 or float16 (:func:`~mmseg_whitebox.utils.amp.enable_amp`, what
``tools/train.py --amp [--amp-dtype]`` trains with). Per row: every loss
finite; the loss of the last iteration within :data:`LOSS_TOLERANCE`
(relative) of float32's; how many steps the loss scaler skipped (each
skipped step halves its scale: the decreases of ``get_scale()``); and
which scaled-dot-product kernel each attention ran, read from the
profiler's record of the first iteration (``aten::_scaled_dot_product_*``
under each attention module: flash, memory-efficient, cudnn or math, and
"explicit matmul" for an attention that does not call
``F.scaled_dot_product_attention``, such as mmcv's ``MultiheadAttention``
with its weights returned). Then one DDP run of :attr:`SmokePlan.ddp_model`
over all visible GPUs (``torchrun`` on 127.0.0.1 with a free port, NCCL),
its losses finite and its parameters equal across ranks after the steps;
it needs 2 GPUs or more (with one, "equal across ranks" would compare a
rank with itself), and says ``skipped: one GPU`` otherwise. A CUDA device
torch cannot see is an :class:`~mmseg_whitebox.utils.tool_error.InputError`
(exit status 2, as ``tools/train.py --device cuda``), not a report.
Writes ``gpu_smoke.md``
(the tables, headed by the device name, torch version and date) and
``gpu_smoke.json``.

:data:`GPU_PLAN` is sized to take under 5 minutes on one current GPU
(512x512 crops, batch 4, 20 iterations, ViT-T models). ``dry_run`` runs
the same plan (:data:`DRY_RUN_PLAN`: the same models, precisions and DDP
run, only the crop, batch and iteration counts replaced) on the CPU, with
DDP as 2 gloo processes; mmengine's ``AmpOptimWrapper`` refuses a CPU, so
there the same wrapper runs with torch's CPU ``GradScaler`` and CPU
autocast (:class:`CPUAmpOptimWrapper`). A precision the device cannot run
(CPU autocast in float16 before torch 2.3, a GPU without bfloat16) gives
a row saying so instead of a failure.

:data:`LOSS_TOLERANCE` (5%): the relative gap between an autocast run's
last loss and float32's that counts as a failure. Measured on the CPU only
(2026-11-28, torch 2.13, two dry runs: 64x64 crops, 2 iterations of batch 1
and 3 of batch 2), the largest gap of any model was 0.80% in bfloat16 and
0.74% in float16 (docs/benchmarks.md, "GPU smoke check"): 5% leaves room
for a GPU's other kernels, while a broken cast (a loss scaled but never
unscaled, a float16 overflow into the softmax) moves the loss by far more.
No GPU run has measured the GPU's gaps yet.
"""
from __future__ import annotations

import contextlib
import copy
import json
import math
import os
import os.path as osp
import signal
import subprocess
import sys
import tempfile
import time
import traceback
import warnings
from dataclasses import asdict, dataclass, replace
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple

import torch
import torch.nn as nn

from mmseg_whitebox.utils.atomic import write_json, write_text
from mmseg_whitebox.utils.distributed import free_port
from mmseg_whitebox.utils.input_checks import check_device
from mmseg_whitebox.utils.tool_error import InputError, ToolError
from .benchmark import (Benchmark, build_models, prepare_run,
                        project_configs, start_report)
from .decoder_benchmark import HEAD_CONFIGS
from .report import results_table
from .train_step_benchmark import TRAIN_CONFIGS

#: the precisions of every model, float32 first (the others' reference)
PRECISIONS: Tuple[str, ...] = ('float32', 'bfloat16', 'float16')
#: the largest relative gap |loss_amp - loss_fp32| / |loss_fp32| of the
#: last iteration's loss that passes (module docstring: how it was chosen)
LOSS_TOLERANCE = 0.05
REPORT, RESULTS = 'gpu_smoke.md', 'gpu_smoke.json'
#: what an attention that never calls F.scaled_dot_product_attention ran
EXPLICIT = 'explicit matmul'
#: ``aten::`` ops that are one scaled-dot-product backend each (what
#: ``F.scaled_dot_product_attention`` dispatches to), and its name
SDPA_BACKENDS = {
    '_scaled_dot_product_flash_attention_for_cpu': 'flash (CPU)',
    '_scaled_dot_product_flash_attention': 'flash',
    '_scaled_dot_product_efficient_attention': 'memory-efficient',
    '_scaled_dot_product_cudnn_attention': 'cudnn',
    '_scaled_dot_product_fused_attention_overrideable': 'fused (other)',
    '_scaled_dot_product_attention_math': 'math',
    '_scaled_dot_product_attention_math_for_mps': 'math',
}
#: the prefix of the profiler ranges that mark an attention module's call
SITE_RANGE = 'gpu_smoke_site:'
#: the DDP row's status on a machine with one GPU: one rank proves nothing
DDP_ONE_GPU = ('skipped: one GPU (DDP needs 2 or more: with one rank, '
               '"parameters equal across ranks" compares a rank with '
               'itself)')
#: what to do without a GPU (the --device check's advice)
NO_GPU_REMEDY = ('run it on a machine with a GPU, or pass --dry-run for '
                 'the same plan on the CPU at tiny sizes')

#: Segmenter's linear head is published on ViT-S only (mmseg ships it so);
#: the smoke check runs that head on the ViT-T of
#: configs/segmenter/segmenter_vit-t_mask_*.py (width 192, 3 heads)
VIT_T_LINEAR = {'model.backbone.embed_dims': 192,
                'model.backbone.num_heads': 3,
                'model.decode_head.in_channels': 192,
                'model.decode_head.channels': 192}

#: model name -> (config glob under configs/, with {size}; cfg options):
#: every published decode head on ViT, and the CBT encoder
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
    model, None for each config's own (10x10 in the ViT heads, 16x16 in
    the CBT encoder: it needs a token grid at least that large)."""
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

#: what a GPU runs: about 25 s of training per model on a current GPU at
#: most (ViT-T at 512x512, batch 4: tens of ms per step), the profiled
#: first iteration and the builds, and one torchrun start for DDP
GPU_PLAN = SmokePlan(
    models=tuple(SMOKE_CONFIGS), precisions=PRECISIONS, arch='t',
    crop=(512, 512), batch=4, iterations=20, ddp_model='cbsa',
    ddp_crop=(512, 512), ddp_batch=4, ddp_iterations=5, ddp_processes=None,
    rep_grid=None,
    sizes_note=('ViT-T models, 512x512 crops, batch 4, 20 iterations; DDP: '
                '5 iterations of batch 4 per GPU on every visible GPU'))

#: the same plan on the CPU at tiny sizes (a check of the code path in the
#: test suite; its figures mean nothing): 64x64 crops are a 4x4 token grid,
#: so CBSA's representatives shrink with them to 2x2 (the configs' 10x10
#: and 16x16 are sized for 32x32 tokens; at the 256x256 crops those would
#: need, half-precision autocast on a CPU takes minutes per model)
DRY_RUN_PLAN = replace(
    GPU_PLAN, crop=(64, 64), batch=1, iterations=2, ddp_crop=(64, 64),
    ddp_batch=1, ddp_iterations=2, ddp_processes=2, rep_grid=(2, 2),
    sizes_note=('dry run on the CPU: 64x64 crops, batch 1, 2 iterations, '
                'CBSA representatives 2x2; DDP: 2 gloo processes, 2 '
                'iterations of one 64x64 crop each'))


def check_gpu(device: str) -> None:
    """``device`` is a CUDA device torch sees: the check of ``--device``
    (:func:`~mmseg_whitebox.utils.input_checks.check_device`, which
    ``tools/train.py`` and ``tools/test.py`` stop with, exit 2), here also
    for the tool's default ``cuda``; an :class:`InputError` otherwise."""
    if torch.device(device).type != 'cuda':
        raise InputError(f'the GPU smoke check on {device!r}: give a '
                         'CUDA device, or --dry-run for the tiny CPU run')
    try:
        check_device(device, NO_GPU_REMEDY)
    except ToolError as exc:
        raise InputError(str(exc)) from None


def passes(status: str) -> bool:
    """Whether a row's status is not a failure: ok, a precision the device
    cannot run, or the DDP row skipped on one GPU."""
    return status == 'ok' or status.startswith(('unavailable', 'skipped'))


# ----------------------------------------------------------- the precisions
def _cpu_grad_scaler() -> Any:
    """torch's CPU loss scaler (``torch.amp.GradScaler('cpu')``, torch >=
    2.3); ``TypeError``/``AttributeError``/``RuntimeError`` before."""
    return torch.amp.GradScaler('cpu')


def precision_problem(device: torch.device, precision: str) -> Optional[str]:
    """Why ``device`` cannot train in ``precision`` here, or None: a GPU
    without bfloat16; on the CPU, a torch without a CPU loss scaler or
    whose CPU autocast does not cast to that dtype (float16 before torch
    2.3: it warns and stays in float32)."""
    if precision == 'float32':
        return None
    dtype = getattr(torch, precision)
    if device.type == 'cuda':
        if dtype == torch.bfloat16 and not torch.cuda.is_bf16_supported():
            return f'unavailable: {torch.cuda.get_device_name(device)} has ' \
                'no bfloat16'
        return None
    try:
        _cpu_grad_scaler()
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


def _amp_optim_wrapper_cls():
    from mmengine.optim import AmpOptimWrapper, OptimWrapper

    class CPUAmpOptimWrapper(AmpOptimWrapper):
        """mmengine's ``AmpOptimWrapper`` on the CPU, for the dry run: the
        same ``update_params`` (scaled backward, the scaler's step and
        update), with torch's CPU ``GradScaler`` and ``torch.autocast('cpu',
        dtype)`` in place of the CUDA ones mmengine insists on (its
        constructor refuses a machine without an accelerator, and its
        autocast a CPU float16)."""

        def __init__(self, dtype: str, **kwargs: Any) -> None:
            OptimWrapper.__init__(self, **kwargs)
            self._scale_update_param = None
            self.loss_scaler = _cpu_grad_scaler()
            self.cast_dtype = getattr(torch, dtype)

        @contextlib.contextmanager
        def optim_context(self, model: nn.Module) -> Iterator[None]:
            with OptimWrapper.optim_context(self, model), torch.autocast(
                    'cpu', dtype=self.cast_dtype):
                yield

    return CPUAmpOptimWrapper


def build_optim_wrapper(model: nn.Module, precision: str,
                        device: torch.device) -> Any:
    """The config's optimizer wrapper for ``precision``: its own in
    float32; otherwise ``AmpOptimWrapper`` with a dynamic loss scale in
    that dtype (:func:`~mmseg_whitebox.utils.amp.enable_amp`, as
    ``tools/train.py --amp --amp-dtype`` builds it), the CPU stand-in
    :class:`CPUAmpOptimWrapper` on a CPU."""
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
    return _amp_optim_wrapper_cls()(
        precision, optimizer=built.optimizer,
        clip_grad=cfg.optim_wrapper.get('clip_grad'))


# -------------------------------------------------------------- the models
def build_smoke_model(name: str, arch: str, device: torch.device, seed: int,
                      config_root: str,
                      rep_grid: Optional[Tuple[int, int]] = None
                      ) -> nn.Module:
    """Model ``name`` of :data:`SMOKE_CONFIGS` at size ``arch``: random
    weights from ``seed`` (no pretrained encoder: nothing is downloaded),
    training mode, its config as ``model.cfg``; ``rep_grid``: CBSA's grid
    of representatives, if not the config's."""
    options = dict(SMOKE_CONFIGS[name][1])
    path = _SMOKE.config(name, arch, config_root)
    model = build_models({name: path}, device, seed, options or None,
                         rep_grid)[name]
    model.config_path = path
    return model.train()


def smoke_batch(num_classes: int, batch: int, crop: Tuple[int, int],
                seed: int, device: torch.device) -> Tuple[torch.Tensor,
                                                         list]:
    """``batch`` crops whose labels can be learnt: a coarse grid of random
    classes (cells of 16 pixels) and an image that is each class's own
    colour plus noise, as data samples (the loss falls over the run, so
    that a precision that trains differently shows)."""
    from mmengine.structures import PixelData
    from mmseg.structures import SegDataSample
    gen = torch.Generator().manual_seed(seed)
    colours = torch.randn(num_classes, 3,
                          generator=torch.Generator().manual_seed(0))
    h, w = crop
    cells = torch.randint(0, num_classes, (batch, -(-h // 16), -(-w // 16)),
                          generator=gen)
    labels = cells.repeat_interleave(16, 1).repeat_interleave(16, 2)
    labels = labels[:, :h, :w]
    inputs = colours[labels].permute(0, 3, 1, 2) + 0.5 * torch.randn(
        batch, 3, h, w, generator=gen)
    samples = []
    for label in labels:
        sample = SegDataSample(metainfo=dict(img_shape=crop, pad_shape=crop,
                                             ori_shape=crop))
        sample.gt_sem_seg = PixelData(data=label[None].to(device))
        samples.append(sample)
    return inputs.to(device), samples


def train_iteration(model: nn.Module, optim_wrapper: Any,
                    inputs: torch.Tensor, samples: list,
                    forward_context: Any = None) -> float:
    """One iteration as mmengine's ``BaseModel.train_step`` runs it (the
    wrapper's context, autocast included; the losses; ``update_params``),
    with the batch already preprocessed; returns the loss.
    ``forward_context``: a context manager around the forward alone."""
    with optim_wrapper.optim_context(model), \
            forward_context or contextlib.nullcontext():
        losses = model(inputs, samples, mode='loss')
    loss, _ = unwrap(model).parse_losses(losses)
    optim_wrapper.update_params(loss)
    return float(loss.detach())


def unwrap(model: nn.Module) -> nn.Module:
    return getattr(model, 'module', model)


# --------------------------------------------------- the attention kernels
@contextlib.contextmanager
def site_ranges(model: nn.Module) -> Iterator[List[Any]]:
    """Every attention site of ``model`` (encoder and head,
    :func:`~mmseg_whitebox.models.attention_sites.find_attention_sites`)
    wrapped in a profiler range ``SITE_RANGE + name`` while the block
    runs; gives the sites."""
    from torch.autograd.profiler import record_function

    from mmseg_whitebox.models.attention_sites import find_attention_sites
    sites = find_attention_sites(model, scope='')
    handles, open_ranges = [], []

    def enter(site):
        def pre_hook(module, args):
            rng = record_function(SITE_RANGE + site.name)
            rng.__enter__()
            open_ranges.append(rng)
        return pre_hook

    def leave(module, args, output):
        if open_ranges:
            open_ranges.pop().__exit__(None, None, None)

    for site in sites:
        handles.append(site.attention.register_forward_pre_hook(enter(site)))
        handles.append(site.attention.register_forward_hook(leave))
    try:
        yield sites
    finally:
        for handle in handles:
            handle.remove()
        while open_ranges:
            open_ranges.pop().__exit__(None, None, None)


def sdpa_backend(op_name: str) -> Optional[str]:
    """The backend an ``aten::`` op is (:data:`SDPA_BACKENDS`), or None."""
    return SDPA_BACKENDS.get(op_name.split('::', 1)[-1])


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


def profiled_iteration(model: nn.Module, optim_wrapper: Any,
                       inputs: torch.Tensor, samples: list
                       ) -> Tuple[float, Dict[str, List[str]], str]:
    """One training iteration, its forward under the profiler (CPU
    activity: the ``aten::`` op a backend dispatches to is recorded on the
    host, CUDA or not; the backward runs each backend's own backward, and
    reading the events of a whole step costs seconds): its loss, the
    kernels per site and their summary."""
    from torch.profiler import ProfilerActivity, profile
    prof = profile(activities=[ProfilerActivity.CPU])
    with site_ranges(model) as sites:
        loss = train_iteration(model, optim_wrapper, inputs, samples, prof)
    kernels = kernels_by_site(prof.events(), sites)
    return loss, kernels, kernel_summary(sites, kernels)


# ------------------------------------------------------------- one leg
def _synchronize(device: torch.device) -> None:
    if device.type == 'cuda':
        torch.cuda.synchronize(device)


def train_leg(model: nn.Module, initial: Dict[str, torch.Tensor],
              precision: str, batches: Sequence[Tuple[torch.Tensor, list]],
              device: torch.device, seed: int) -> Dict:
    """``len(batches)`` iterations of ``model`` from the weights
    ``initial`` in ``precision``: the losses, the loss scaler's record
    (its scale after every step; a decrease is a skipped step), the
    kernels of the first (profiled) iteration, seconds per later
    iteration and, on CUDA, the peak memory."""
    model.load_state_dict(initial)
    model.train()
    optim_wrapper = build_optim_wrapper(model, precision, device)
    scaler = getattr(optim_wrapper, 'loss_scaler', None)
    torch.manual_seed(seed)  # the same dropout draws in every precision
    if device.type == 'cuda':
        torch.cuda.reset_peak_memory_stats(device)
    row: Dict[str, Any] = dict(precision=precision)
    scales = [scaler.get_scale()] if scaler is not None else []
    loss, row['kernels'], row['attention'] = profiled_iteration(
        model, optim_wrapper, *batches[0])
    losses = [loss]
    if scaler is not None:
        scales.append(scaler.get_scale())
    _synchronize(device)
    start = time.perf_counter()
    for inputs, samples in batches[1:]:
        losses.append(train_iteration(model, optim_wrapper, inputs,
                                      samples))
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
    bad = [i for i, loss in enumerate(row['losses']) if not math.isfinite(
        loss)]
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
                seed: int, config_root: str,
                batches: Dict[int, List]) -> List[Dict]:
    """The rows of model ``name``, one per precision of ``plan`` (an
    error in one precision is its row's status; the others still run)."""
    model = build_smoke_model(name, plan.arch, device, seed, config_root,
                              plan.rep_grid)
    initial = {k: v.detach().clone() for k, v in model.state_dict().items()}
    classes = model.decode_head.num_classes
    if classes not in batches:
        batches[classes] = [
            smoke_batch(classes, plan.batch, plan.crop, seed + i, device)
            for i in range(plan.iterations)]
    config = osp.relpath(model.config_path, osp.dirname(config_root))
    rows, reference = [], None
    for precision in plan.precisions:
        base = dict(model=name, config=config, precision=precision)
        problem = precision_problem(device, precision)
        if problem:
            rows.append(dict(base, status=problem))
            print(f'  {name:<14} {precision:<9} {problem}', flush=True)
            continue
        try:
            row = dict(base, **train_leg(model, initial, precision,
                                         batches[classes], device, seed))
            judge(row, reference, LOSS_TOLERANCE)
        except Exception as exc:  # noqa: BLE001 (the row says it; go on)
            if isinstance(exc, torch.cuda.OutOfMemoryError):
                torch.cuda.empty_cache()
            row = dict(base, status=f'error: {type(exc).__name__}: '
                       f'{str(exc).splitlines()[0] if str(exc) else ""}',
                       traceback=traceback.format_exc())
        if precision == 'float32' and 'last_loss' in row:
            reference = row['last_loss']
        print('  ' + describe(row), flush=True)
        rows.append(row)
    del model
    if device.type == 'cuda':
        torch.cuda.empty_cache()
    return rows


def describe(row: Dict) -> str:
    """A row's progress line."""
    text = f'{row["model"]:<14} {row["precision"]:<9}'
    if 'first_loss' in row:
        text += (f' loss {row["first_loss"]:.4f} -> {row["last_loss"]:.4f}')
    if 'skipped_steps' in row:
        text += f'  skipped {row["skipped_steps"]}'
    return f'{text}  {row["status"]}'


# ------------------------------------------------------------- DDP
def first_error(log: str) -> str:
    """The first rank's exception line in a torchrun log (``[rankN]:
    SomeError: ...``), a rank's watchdog line (its stacks follow it), else
    the log's last line."""
    with open(log, errors='replace') as f:
        lines = [line.strip() for line in f if line.strip()]
    for line in lines:
        if line.startswith('Timeout ('):  # faulthandler's, see run_rank
            return f'a rank stalled: {line} its threads\' stacks follow'
        if line.startswith('[rank') and ('Error: ' in line or
                                         'Exception: ' in line):
            return line
    return lines[-1] if lines else 'no output'


def stop_launch(proc: subprocess.Popen, grace: float = 30.0) -> None:
    """Stop ``torchrun`` (``proc``, its own session) and its ranks: SIGTERM,
    which torchrun passes on to the ranks (each in a session of its own,
    out of reach of a signal to torchrun's group), then SIGKILL after
    ``grace`` seconds. SIGKILL alone left a hung rank running."""
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def run_ddp(plan: SmokePlan, device: torch.device, seed: int,
            config_root: str, out_dir: str, timeout: float) -> Dict:
    """The DDP row: ``torchrun`` with one process per visible GPU (NCCL)
    or ``plan.ddp_processes`` CPU processes (gloo), each training
    ``plan.ddp_model`` (:mod:`.gpu_smoke_ddp`); its losses finite and its
    parameters equal across ranks after the last step. The launch's
    output is ``ddp.log`` in ``out_dir``. With fewer than 2 processes
    (one visible GPU) nothing runs: the row says :data:`DDP_ONE_GPU`."""
    processes = plan.ddp_processes or torch.cuda.device_count()
    row: Dict[str, Any] = dict(
        model=plan.ddp_model, processes=processes,
        backend='nccl' if device.type == 'cuda' else 'gloo',
        iterations=plan.ddp_iterations, batch=plan.ddp_batch,
        crop='x'.join(map(str, plan.ddp_crop)))
    if processes < 2:
        row['status'] = DDP_ONE_GPU
        return row
    log = osp.join(out_dir, 'ddp.log')
    with tempfile.TemporaryDirectory() as tmp:
        spec_path, result = osp.join(tmp, 'spec.json'), osp.join(
            tmp, 'result.json')
        write_json(spec_path, dict(
            model=plan.ddp_model, arch=plan.arch, crop=list(plan.ddp_crop),
            batch=plan.ddp_batch, iterations=plan.ddp_iterations, seed=seed,
            rep_grid=plan.rep_grid, watchdog=max(timeout - 30, timeout / 2),
            device=device.type, config_root=config_root, out=result))
        package_root = osp.dirname(osp.dirname(osp.dirname(
            osp.abspath(__file__))))
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(
            [package_root] + [p for p in [os.environ.get('PYTHONPATH')]
                              if p]))
        if device.type == 'cpu':
            env['OMP_NUM_THREADS'] = '1'  # 2 processes share the cores
        # one node on 127.0.0.1 with a free port (what torchrun's
        # --standalone picks), as tools/dist_train.sh launches: no c10d
        # rendezvous, whose node names come from DNS (getfqdn)
        command = [sys.executable, '-m', 'torch.distributed.run',
                   '--nnodes=1', f'--nproc_per_node={processes}',
                   '--master_addr=127.0.0.1', f'--master_port={free_port()}',
                   '-m', 'mmseg_whitebox.analysis.gpu_smoke_ddp', spec_path]
        start = time.perf_counter()
        with open(log, 'w') as log_file:
            proc = subprocess.Popen(command, stdout=log_file,
                                    stderr=subprocess.STDOUT, env=env,
                                    start_new_session=True)
            try:
                code = proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                stop_launch(proc)
                code = None
        row['seconds'] = time.perf_counter() - start
        if code != 0 or not osp.exists(result):
            row['status'] = 'error: ' + (
                f'timed out after {timeout:.0f} s' if code is None else
                f'torchrun exit {code}') + f' ({first_error(log)}; ddp.log)'
            return row
        with open(result) as f:
            row.update(json.load(f))
    losses = [x for rank in row['losses'] for x in rank]
    problems = []
    if not all(math.isfinite(x) for x in losses):
        problems.append('non-finite loss')
    if row['max_param_diff'] != 0.0:
        problems.append('parameters differ across ranks by up to '
                        f'{row["max_param_diff"]:.2e}')
    row['status'] = 'FAILED: ' + '; '.join(problems) if problems else 'ok'
    return row


# ------------------------------------------------------------- the report
#: the training table (:func:`~.report.results_table` columns)
_SMOKE = Benchmark(
    columns=[('model', 'model', '{}'), ('precision', 'precision', '{}'),
             ('first_loss', 'first loss', '.4f'),
             ('last_loss', 'last loss', '.4f'),
             ('vs_float32', 'gap to float32', '.2%'),
             ('skipped_steps', 'scaler skipped', '{}'),
             ('final_scale', 'final scale', '.0f'),
             ('s_per_iter', 's/iter', '.3f'),
             ('peak_mib', 'peak MiB', '.0f'),
             ('attention', 'attention kernels (first iteration)', '{}')],
    configs={name: pattern for name, (pattern, _) in SMOKE_CONFIGS.items()},
    what='model {name!r} at size {size!r}',
    remedy='the published configs are missing from this installation')

_DDP_COLUMNS = [('model', 'model', '{}'), ('processes', 'processes', '{}'),
                ('backend', 'backend', '{}'), ('crop', 'crop', '{}'),
                ('batch', 'batch per process', '{}'),
                ('iterations', 'iterations', '{}'),
                ('mean_losses', 'mean loss per iteration', '{}'),
                ('max_param_diff', 'max param diff across ranks', '.1e'),
                ('stride_warnings', 'DDP stride warnings', '{}'),
                ('seconds', 's (with start)', '.0f')]


def _row_for_table(row: Dict) -> Dict:
    row = dict(row, head=row.get('model'))
    if 'losses' in row and row['losses'] and isinstance(row['losses'][0],
                                                        list):
        per_step = zip(*row['losses'])
        row['mean_losses'] = ' '.join(
            f'{sum(s) / len(s):.4f}' for s in per_step)
    return row


def report_markdown(facts: Dict, plan: SmokePlan, rows: List[Dict],
                    ddp: Dict) -> str:
    """The report: the device, torch and date, the plan, one table of the
    training runs (a row per model and precision) and the DDP row."""
    device = facts.get('gpu') or facts['cpu']
    passed = all(passes(r['status']) for r in rows + [ddp])
    skipped = ' (DDP skipped: one GPU)' if ddp['status'] == DDP_ONE_GPU \
        else ''
    lines = [f'# GPU smoke check: {device}', '',
             f'{device}, torch {facts["torch"]}, {facts["date"]}; '
             f'{plan.sizes_note}. Every model from the same random weights '
             'on the same batches in each precision; "gap to float32": '
             '|last loss - float32\'s| / float32\'s (tolerance '
             f'{LOSS_TOLERANCE:.0%}); "scaler skipped": steps the dynamic '
             'loss scale skipped (its decreases). '
             + (f'All checks passed{skipped}.' if passed else
                '**Some checks FAILED** (see the note column).'), '',
             '## Training in float32, bfloat16 and float16', '',
             results_table([_row_for_table(r) for r in rows],
                           _SMOKE.columns), '',
             '## DDP', '',
             results_table([_row_for_table(ddp)], _DDP_COLUMNS)]
    return '\n'.join(lines)


def run_gpu_smoke(out_dir: str, device: str = 'cuda', dry_run: bool = False,
                  seed: int = 0, config_root: Optional[str] = None,
                  ddp_timeout: float = 300.0) -> Dict:
    """Run :data:`GPU_PLAN` on ``device`` (or :data:`DRY_RUN_PLAN` on the
    CPU with ``dry_run``) and write ``gpu_smoke.md`` and
    ``gpu_smoke.json`` to ``out_dir``; returns ``{machine, plan, rows,
    ddp, passed}`` (``passed``: every row ``ok``, unavailable on this
    device, or the DDP row skipped on one GPU). ``InputError`` for the GPU
    plan on a CPU (use ``dry_run``) or a CUDA device torch cannot see
    (:func:`check_gpu`), before anything is written."""
    if dry_run:
        device, plan = 'cpu', DRY_RUN_PLAN
    else:
        plan = GPU_PLAN
        check_gpu(device)
    dev, _ = prepare_run(device, None, None)
    root = config_root or project_configs()
    with start_report(out_dir, dev, f'GPU smoke check: {plan.sizes_note}',
                      None) as facts:
        facts['torch_cuda'] = torch.version.cuda
        if dev.type == 'cuda':
            facts['visible_gpus'] = torch.cuda.device_count()
        rows: List[Dict] = []
        batches: Dict[int, List] = {}
        start = time.perf_counter()
        for name in plan.models:
            print(f'== {name}', flush=True)
            rows += smoke_model(name, plan, dev, seed, root, batches)
        batches.clear()
        print(f'== DDP: {plan.ddp_model}', flush=True)
        ddp = run_ddp(plan, dev, seed, root, out_dir, ddp_timeout)
        print(f'  {ddp["processes"]} processes ({ddp["backend"]}): '
              f'{ddp["status"]}', flush=True)
        passed = all(passes(r['status']) for r in rows + [ddp])
        report = dict(machine=facts, plan=asdict(plan),
                      tolerance=LOSS_TOLERANCE, rows=rows, ddp=ddp,
                      passed=passed,
                      seconds=time.perf_counter() - start)
        write_json(osp.join(out_dir, RESULTS), report)
        write_text(osp.join(out_dir, REPORT),
                   report_markdown(facts, plan, rows, ddp) + '\n')
        return report
