"""Decode heads side by side on the same encoder features
(``tools/analysis_tools/benchmark_decoders.py``).

Every head is built from this project's ADE20K config for one ViT size and
fed the same random feature map, ``(1, width, H/16, W/16)`` (the final
upsampling, equal for all, left out). Per image size and head: parameters
and FLOPs, forward and forward+backward latency, peak memory, and each as
a ratio to mmseg's Segmenter mask head. ``cbsa`` is also reported against
``cbsa-straightforward`` (the CBSA paper's Appendix D listing, the same
parameters), with the largest output difference.
"""
from __future__ import annotations

import contextlib
import os.path as osp
from typing import Dict, List, Optional, Sequence, Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F

from .benchmark import (COMPILED, Benchmark, BenchmarkOptions, SizeRows,
                        is_compiled, new_row, prepare_run, project_configs,
                        recompile_limit, rep_grid_options, start_report)
from .complexity import decode_head_complexity
from .memory import peak_memory, skipped
from .report import Baseline, compiled_notes
from .timing import backward_call, inference_call, timed_call

# head name -> config (relative to configs/, {size} = t|s|b|l: the ViT)
HEAD_CONFIGS = {
    'segmenter': 'segmenter/segmenter_vit-{size}_mask_*_ade20k-*.py',
    'linear': 'segmenter/segmenter_vit-{size}_linear_*_ade20k-*.py',
    'mssa': 'mssa/mssa_vit-{size}_*_ade20k-*.py',
    'mssa-ca': 'mssa/mssa-ca_vit-{size}_*_ade20k-*.py',
    'tssa': 'tssa/tssa_vit-{size}_*_ade20k-*.py',
    'cbsa': 'cbsa/cbsa_vit-{size}_*_ade20k-*.py',
    'cbsa-rigorous': 'cbsa/cbsa-rigorous_vit-{size}_*_ade20k-*.py',
    'cbsa-straightforward': 'cbsa/cbsa_vit-{size}_*_ade20k-*.py',
}
REFERENCE = 'segmenter'
DEFAULT, STRAIGHTFORWARD = 'cbsa', 'cbsa-straightforward'
#: a compiled row's figures, as its notes name them
COMPILED_LABELS = dict(fwd='fwd', train='fwd+bwd', mem_fwd='fwd memory')
#: a compiled row's figures given as ratios to the same head eager
COMPILED_KEYS = ('fwd_ms', 'train_ms', 'mem_fwd', 'mem_train')


# ------------------------------------------------------------ the baselines
def _softmax_attention(query: torch.Tensor, key: torch.Tensor,
                       value: torch.Tensor,
                       scale: float) -> Tuple[torch.Tensor, torch.Tensor]:
    """``softmax(q k^T * scale) v`` and the attention matrix."""
    attn = torch.softmax(query @ key.transpose(-1, -2) * scale, dim=-1)
    return attn @ value, attn


def straightforward_cbsa(op: nn.Module, x: torch.Tensor, h: int,
                         w: int) -> torch.Tensor:
    """CBSA on ``(B, N, d)`` tokens whose first ``h*w`` form the patch grid,
    as the CBSA paper's Appendix D listing writes it (for an ``h x w``
    grid, with the stop-gradient of eq. 5), with the parameters of ``op``
    (a :class:`~mmseg_whitebox.ops.CBSA`): the library's CBSA's baseline."""
    b, n, _ = x.shape
    heads, p = op.num_heads, op.head_dim
    z = op.proj(x)  # U_k^T z for every subspace, (B, N, heads * p)
    grid = z[:, :h * w].reshape(b, h, w, heads * p).permute(0, 3, 1, 2)
    rep = F.adaptive_avg_pool2d(grid, op.rep_grid)
    rep = rep.reshape(b, heads * p, -1).permute(0, 2, 1)
    z = z.reshape(b, n, heads, p).permute(0, 2, 1, 3)
    rep = rep.reshape(b, -1, heads, p).permute(0, 2, 1, 3).detach()
    scale = p**-0.5
    rep_delta, attn = _softmax_attention(rep, z, z, scale)  # eq. 5
    rep = rep + op.eta * rep_delta
    contraction, _ = _softmax_attention(rep, rep, rep, scale)  # eq. 8
    delta = op.kappa * (attn.transpose(-1, -2) @ contraction)  # broadcast
    delta = delta.permute(0, 2, 1, 3).reshape(b, n, heads * p)
    if op.out_proj is None:  # tied: back through the same bases
        return delta @ op.proj.weight
    return op.out_proj(delta)


class StraightforwardCBSADecoder(nn.Module):
    """The CBT decoder in the published decoder frame, computed
    straightforwardly with the parameters of a ``CBSAHead``: patch tokens
    and class embeddings concatenated, pre-LayerNorm residual CBSA layers,
    a final LayerNorm, L2-normalised patch/class features, their
    similarities LayerNorm-ed over the classes and laid out on the grid."""

    def __init__(self, head: nn.Module) -> None:
        super().__init__()
        self.head = head

    def forward(self, inputs: List[torch.Tensor]) -> torch.Tensor:
        head = self.head
        feature = head._transform_inputs(inputs)
        b, c, h, w = feature.shape
        x = head.dec_proj(feature.permute(0, 2, 3, 1).reshape(b, h * w, c))
        x = torch.cat([x, head.cls_emb.expand(b, -1, -1)], dim=1)
        for layer in head.layers:
            x = x + straightforward_cbsa(layer.attn, layer.norm(x), h, w)
        x = head.decoder_norm(x)
        patches = F.normalize(x[:, :h * w], dim=-1)
        classes = F.normalize(x[:, h * w:], dim=-1)
        masks = head.mask_norm(patches @ classes.transpose(1, 2))
        return masks.permute(0, 2, 1).reshape(b, -1, h, w)


# ---------------------------------------------------------------- set-up
def build_heads(names: List[str], encoder: str, device: torch.device,
                seed: int, config_root: str,
                rep_grid: Optional[Tuple[int, int]] = None
                ) -> Tuple[Dict[str, nn.Module], Dict[str, Dict]]:
    """Heads (eval mode) and, per head, its config facts; the
    straightforward entry shares the ``cbsa`` head's parameters."""
    from mmengine.config import Config
    from mmengine.registry import init_default_scope
    from mmseg.registry import MODELS
    init_default_scope('mmseg')
    heads: Dict[str, nn.Module] = {}
    info: Dict[str, Dict] = {}
    cbsa_head = None
    for name in names:
        path = BENCHMARK.config(name, encoder, config_root)
        cfg = Config.fromfile(path)
        if rep_grid is not None:
            cfg.merge_from_dict(rep_grid_options(cfg.model, rep_grid))
        if name == STRAIGHTFORWARD and cbsa_head is not None:
            head = StraightforwardCBSADecoder(cbsa_head)
        else:
            torch.manual_seed(seed)
            head = MODELS.build(cfg.model.decode_head)
            head.init_weights()
            if name in (DEFAULT, STRAIGHTFORWARD):
                cbsa_head = head
            if name == STRAIGHTFORWARD:
                head = StraightforwardCBSADecoder(head)
        heads[name] = head.to(device).eval()
        info[name] = dict(config=osp.relpath(path, osp.dirname(config_root)),
                          in_channels=cfg.model.decode_head.in_channels,
                          patch_size=cfg.model.backbone.patch_size)
    return heads, info


def add_compiled(heads: Dict[str, nn.Module], info: Dict[str, Dict],
                 names: Optional[Sequence[str]] = None) -> List[str]:
    """Each head of ``names`` (default: all) also compiled (static
    shapes), as ``<name>+compile``; returns the names compiled."""
    eager = list(heads if names is None else names)
    for name in eager:
        heads[COMPILED.format(name)] = torch.compile(heads[name],
                                                     dynamic=False)
        info[COMPILED.format(name)] = info[name]
    return eager


# ------------------------------------------------------------ measuring
def measure_size(heads: Dict[str, nn.Module], info: Dict[str, Dict],
                 size: Tuple[int, int], options: BenchmarkOptions,
                 device: torch.device, history: Dict[str, List[Dict]],
                 memory_limit: Optional[int]) -> SizeRows:
    """All measurements of every head at one image size."""
    rows: Dict[str, Dict] = {}
    outputs: Dict[str, torch.Tensor] = {}

    def measure(name: str, head: nn.Module, past: List[Dict]):
        patch = info[name]['patch_size']
        grid = (-(-size[0] // patch), -(-size[1] // patch))
        gen = torch.Generator().manual_seed(options.seed)
        feature = torch.randn(1, info[name]['in_channels'], *grid,
                              generator=gen).to(device)
        row = rows[name] = new_row(name, size, grid=list(grid),
                                   tokens=grid[0] * grid[1])
        compiled = is_compiled(name)
        fwd = inference_call(head, [feature], device, options.amp)
        if skipped(row, 'mem_fwd', past, memory_limit,
                   'skipped: forward predicted to need'):
            print(f'  {name:<22} {row["status"]}', flush=True)
            return row, None
        if compiled:  # the first call compiles
            row['fwd_compile_s'] = timed_call(fwd, device)
        row['mem_fwd'], out = peak_memory(fwd, device)
        if name in (DEFAULT, STRAIGHTFORWARD):
            outputs[name] = out.float()
        del out
        if options.flops and not compiled:
            flops, params = decode_head_complexity(head, feature)
            row.update(flops=flops, params=params)
        else:
            row['params'] = sum(p.numel() for p in head.parameters())
        calls = dict(fwd=fwd)
        if options.backward:
            # gradients to the features too (the encoder is fine-tuned)
            step = backward_call(head, [feature.detach().requires_grad_()],
                                 device, options.amp)
            if not skipped(row, 'mem_train', past, memory_limit,
                           'backward skipped: predicted to need'):
                if compiled:
                    row['train_compile_s'] = timed_call(step, device)
                row['mem_train'], _ = peak_memory(step, device)
                calls['train'] = step
        if len(outputs) == 2:
            diff = outputs.pop(STRAIGHTFORWARD) - outputs.pop(DEFAULT)
            rows[DEFAULT]['max_abs_diff_vs_straightforward'] = float(
                diff.abs().max())
        return row, calls

    return BENCHMARK.measure_size(heads, measure, history)


# ------------------------------------------------------------- reporting
def straightforward_note(row: Dict) -> List[str]:
    """A row's note: :func:`~.report.compiled_notes`, and the ``cbsa``
    row's speed and output difference against the straightforward one."""
    notes = compiled_notes(row, COMPILED_LABELS)
    if 'fwd_ms_vs_straightforward' in row:
        notes.append(f'fwd {row["fwd_ms_vs_straightforward"]:.3f}x '
                     'straightforward')
    if 'max_abs_diff_vs_straightforward' in row:
        notes.append('max |out - straightforward| = '
                     f'{row["max_abs_diff_vs_straightforward"]:.1e}')
    return notes


BENCHMARK = Benchmark(
    columns=[
        ('head', 'head', '{}'), ('size', 'image', '{}'),
        ('tokens', 'tokens', '{}'), ('params', 'params (M)', 'M'),
        ('flops', 'GFLOPs', 'G'), ('flops_vs_segmenter', 'x seg', 'r'),
        ('fwd_ms', 'fwd ms', '.1f'), ('fwd_ms_vs_segmenter', 'x seg', 'r'),
        ('train_ms', 'fwd+bwd ms', '.1f'),
        ('train_ms_vs_segmenter', 'x seg', 'r'),
        ('mem_fwd', 'fwd MiB', 'Mi'), ('mem_fwd_vs_segmenter', 'x seg', 'r'),
        ('mem_train', 'train MiB', 'Mi')],
    baselines=(Baseline(REFERENCE, ('flops', 'params', 'fwd_ms', 'train_ms',
                                    'mem_fwd', 'mem_train'), REFERENCE),
               Baseline(STRAIGHTFORWARD, ('fwd_ms', 'train_ms', 'mem_fwd'),
                        'straightforward', only=DEFAULT)),
    kinds=('fwd', 'train'), configs=HEAD_CONFIGS,
    what='head {name!r} with ViT-{size}',
    remedy='choose another encoder or leave this head out',
    notes=straightforward_note)


# ------------------------------------------------------------------- a run
def run_decoder_benchmark(out: str,
                          models: Sequence[str],
                          sizes: Sequence[Tuple[int, int]],
                          encoder: str = 's',
                          options: Optional[BenchmarkOptions] = None,
                          device: Optional[str] = None,
                          threads: Optional[int] = None,
                          memory_limit_gb: Optional[float] = None,
                          config_root: Optional[str] = None) -> Dict:
    """What ``tools/analysis_tools/benchmark_decoders.py`` does: the heads
    ``models`` (names of :data:`HEAD_CONFIGS`) on ViT-``encoder`` features
    at every image size of ``sizes``, written to ``out``. Returns the
    report: the machine, ``results`` and ``slopes``."""
    options = options or BenchmarkOptions()
    torch_device, memory_limit = prepare_run(device, threads,
                                             memory_limit_gb)
    built, info = build_heads(list(models), encoder, torch_device,
                              options.seed,
                              config_root or project_configs())
    benchmark = BENCHMARK.with_compiled(
        add_compiled(built, info) if options.compile else (), COMPILED_KEYS)
    with start_report(out, torch_device, f'ViT-{encoder} features',
                      options.amp) as facts, recompile_limit() \
            if options.compile else contextlib.nullcontext():
        history: Dict[str, List[Dict]] = {}
        return benchmark.run(
            out, sizes, lambda size: measure_size(
                built, info, size, options, torch_device, history,
                memory_limit), options, torch_device,
            dict(machine=facts, encoder=encoder, amp=options.amp,
                 compile=options.compile, heads=info),
            f'decoders on ViT-{encoder} features')
