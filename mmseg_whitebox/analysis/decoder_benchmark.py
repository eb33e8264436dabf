"""Decode heads side by side on the same encoder features.

The logic behind ``tools/analysis_tools/benchmark_decoders.py``: every head
is built from this project's ADE20K config for one ViT size and fed the
same random encoder feature map, ``(1, width, H/16, W/16)``, as it sees it
inside an ``EncoderDecoder`` (the final upsampling, equal for all heads, is
left out). Per image size and head: parameters and FLOPs, forward and
forward+backward latency (heads timed in interleaved rounds, see
:func:`~.benchmark.time_interleaved`), peak memory, and every figure as a
ratio to mmseg's Segmenter mask head.

Three entries compute the same function with the same parameters:
``cbsa`` (the operators' equations, the default path), ``cbsa-fast`` (the
inference fast path, :mod:`mmseg_whitebox.ops.fast`) and
``cbsa-straightforward`` (the CBSA paper's Appendix D listing,
:func:`~mmseg_whitebox.ops.reference.straightforward_cbsa`, in the
published decoder frame); the first two are reported as ratios to the
third, with the largest output difference.
"""
from __future__ import annotations

import argparse
import datetime
import glob
import os
import os.path as osp
import platform
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F

from mmseg_whitebox.ops import fast_path
from mmseg_whitebox.ops.reference import straightforward_cbsa
from mmseg_whitebox.utils.atomic import save_figure, write_json, write_text
from .benchmark import (available_memory, extrapolate_loglog, loglog_slope,
                        median, peak_memory, time_interleaved)
from .complexity import decode_head_complexity

# head name -> config (relative to configs/, {enc} = t|s|b|l)
HEAD_CONFIGS = {
    'segmenter': 'segmenter/segmenter_vit-{enc}_mask_*_ade20k-*.py',
    'linear': 'segmenter/segmenter_vit-{enc}_linear_*_ade20k-*.py',
    'mssa': 'mssa/mssa_vit-{enc}_*_ade20k-*.py',
    'mssa-ca': 'mssa/mssa-ca_vit-{enc}_*_ade20k-*.py',
    'tssa': 'tssa/tssa_vit-{enc}_*_ade20k-*.py',
    'cbsa': 'cbsa/cbsa_vit-{enc}_*_ade20k-*.py',
    'cbsa-fast': 'cbsa/cbsa_vit-{enc}_*_ade20k-*.py',
    'cbsa-rigorous': 'cbsa/cbsa-rigorous_vit-{enc}_*_ade20k-*.py',
    'cbsa-straightforward': 'cbsa/cbsa_vit-{enc}_*_ade20k-*.py',
}
REFERENCE = 'segmenter'
DEFAULT, FAST, STRAIGHTFORWARD = 'cbsa', 'cbsa-fast', 'cbsa-straightforward'
#: entries whose parameters are those of the ``cbsa`` head
SHARES_CBSA = (FAST, STRAIGHTFORWARD)


@dataclass
class BenchmarkOptions:
    """What to measure, and how often (the tool's command-line options)."""
    repeats: int = 10
    warmup: int = 2
    max_seconds: Optional[float] = 30.0
    backward: bool = True
    flops: bool = True
    amp: Optional[str] = None
    seed: int = 0


# ------------------------------------------------------------ the baselines
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


def over_limit(past: List[Dict], key: str, tokens: int,
               limit: Optional[float]) -> Optional[float]:
    """The memory ``key`` predicted at ``tokens`` from the smaller runs in
    ``past`` when it exceeds ``limit`` bytes, else None."""
    predicted = extrapolate_loglog([r['tokens'] for r in past],
                                   [r.get(key) for r in past], tokens)
    if limit and predicted and predicted > limit:
        return predicted
    return None


class FastPathHead(nn.Module):
    """A head run with the inference fast path switched on."""

    def __init__(self, head: nn.Module) -> None:
        super().__init__()
        self.head = head

    def forward(self, inputs: List[torch.Tensor]) -> torch.Tensor:
        with fast_path(True):
            return self.head(inputs)


# ---------------------------------------------------------------- set-up
def parse_size(text: str) -> Tuple[int, int]:
    """``'1024'`` -> (1024, 1024); ``'512x1024'`` -> (512, 1024) (H x W)."""
    try:
        parts = [int(v) for v in text.lower().split('x')]
    except ValueError:
        parts = []
    if len(parts) == 1:
        parts = parts * 2
    if len(parts) != 2 or min(parts) < 16:
        raise ValueError(
            f'size {text!r}: give N (square) or HxW, each >= 16 pixels')
    return parts[0], parts[1]


def size_arg(text: str) -> Tuple[int, int]:
    """:func:`parse_size` as an argparse ``type``."""
    try:
        return parse_size(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def add_measurement_args(parser: argparse.ArgumentParser, what: str,
                         repeats: int, warmup: int,
                         max_seconds: float) -> None:
    """The options of the benchmark tools that say where and how to
    measure (``what``: the things timed, for the help text); check them
    with :func:`check_measurement_args`."""
    add = parser.add_argument
    add('--device', default='cpu', help='cpu, cuda or cuda:N (default: cpu)')
    add('--threads', type=int, help="CPU threads (default: torch's choice)")
    add('--repeats', type=int, default=repeats,
        help=f'timed calls per measurement, median reported (default: '
        f'{repeats})')
    add('--warmup', type=int, default=warmup,
        help=f'untimed calls first (default: {warmup})')
    add('--max-seconds', type=float, default=max_seconds,
        help=f'stop timing one of the {what} after this many seconds (at '
        f'least 3 calls; default: {max_seconds:g})')
    add('--no-backward', action='store_true',
        help='skip the forward+backward measurements')
    add('--amp', choices=['bf16', 'fp16'],
        help='run under torch.autocast with this dtype')
    add('--memory-limit-gb', type=float,
        help='skip runs predicted to need more (default: 80%% of the '
        'memory available at the start)')
    add('--seed', type=int, default=0)


def check_measurement_args(parser: argparse.ArgumentParser,
                           args: argparse.Namespace) -> None:
    """Exit through ``parser.error`` on impossible timing options."""
    if args.repeats < 1 or args.warmup < 0:
        parser.error('--repeats must be >= 1 and --warmup >= 0')


def find_config(config_root: str, pattern: str, what: str,
                remedy: str) -> str:
    """The first config (sorted) under ``config_root`` that matches the
    glob ``pattern``; ``FileNotFoundError`` naming ``what`` is missing and
    the ``remedy`` if none does."""
    found = sorted(glob.glob(osp.join(config_root, pattern)))
    if not found:
        raise FileNotFoundError(f'no config for {what} ({pattern} under '
                                f'{config_root}); {remedy}')
    return found[0]


def head_config(name: str, encoder: str, config_root: str) -> str:
    """The ADE20K config of head ``name`` for ViT-``encoder``."""
    return find_config(config_root, HEAD_CONFIGS[name].format(enc=encoder),
                       f'head {name!r} with ViT-{encoder}',
                       'choose another encoder or leave this head out')


def build_heads(names: List[str], encoder: str, device: torch.device,
                seed: int, config_root: str
                ) -> Tuple[Dict[str, nn.Module], Dict[str, Dict]]:
    """Heads (eval mode) and, per head, its config facts. The ``cbsa-*``
    entries share the parameters of the ``cbsa`` head."""
    from mmengine.config import Config
    from mmengine.registry import init_default_scope
    from mmseg.registry import MODELS
    init_default_scope('mmseg')
    heads: Dict[str, nn.Module] = {}
    info: Dict[str, Dict] = {}
    wrappers = {FAST: FastPathHead,
                STRAIGHTFORWARD: StraightforwardCBSADecoder}
    cbsa_head = None
    for name in names:
        path = head_config(name, encoder, config_root)
        cfg = Config.fromfile(path)
        if name in SHARES_CBSA and cbsa_head is not None:
            head = wrappers[name](cbsa_head)
        else:
            torch.manual_seed(seed)
            head = MODELS.build(cfg.model.decode_head)
            head.init_weights()
            if name in SHARES_CBSA or name == DEFAULT:
                cbsa_head = head
            if name in SHARES_CBSA:
                head = wrappers[name](head)
        heads[name] = head.to(device).eval()
        info[name] = dict(config=osp.relpath(path, osp.dirname(config_root)),
                          in_channels=cfg.model.decode_head.in_channels,
                          patch_size=cfg.model.backbone.patch_size)
    return heads, info


# ------------------------------------------------------------ measuring
def autocast(device: torch.device, amp: Optional[str]):
    if amp is None:
        return nullcontext()
    dtype = torch.bfloat16 if amp == 'bf16' else torch.float16
    return torch.autocast(device_type=device.type, dtype=dtype)


def forward_fn(head: nn.Module, feature: torch.Tensor, device: torch.device,
               amp: Optional[str]) -> Callable[[], torch.Tensor]:

    def run():
        with torch.no_grad(), autocast(device, amp):
            return head([feature])

    return run


def train_step_fn(head: nn.Module, feature: torch.Tensor,
                  device: torch.device,
                  amp: Optional[str]) -> Callable[[], None]:
    """Forward in training mode and backward of the summed output, with
    gradients to the parameters and to the features (the encoder is
    fine-tuned)."""
    params = [p for p in head.parameters() if p.requires_grad]
    feature = feature.detach().requires_grad_(True)

    def run():
        head.train()
        try:
            with autocast(device, amp):
                out = head([feature])
            out.float().sum().backward()
        finally:
            head.eval()
            feature.grad = None
            for p in params:
                p.grad = None

    return run


def measure_size(heads: Dict[str, nn.Module], info: Dict[str, Dict],
                 size: Tuple[int, int], options: BenchmarkOptions,
                 device: torch.device, history: Dict[str, List[Dict]],
                 memory_limit: Optional[int]) -> List[Dict]:
    """All measurements of every head at one image size."""
    rows = []
    runnable: Dict[str, Dict[str, Callable]] = {}
    outputs: Dict[str, torch.Tensor] = {}
    for name, head in heads.items():
        patch = info[name]['patch_size']
        grid = (-(-size[0] // patch), -(-size[1] // patch))
        tokens = grid[0] * grid[1]
        gen = torch.Generator().manual_seed(options.seed)
        feature = torch.randn(1, info[name]['in_channels'], *grid,
                              generator=gen).to(device)
        row = dict(head=name, size=f'{size[0]}x{size[1]}', grid=list(grid),
                   tokens=tokens, status='ok')
        rows.append(row)
        past = history.setdefault(name, [])
        fwd = forward_fn(head, feature, device, options.amp)
        predicted = over_limit(past, 'mem_fwd', tokens, memory_limit)
        if predicted:
            row['status'] = (f'skipped: forward predicted to need '
                             f'{predicted / 2**30:.1f} GiB')
            print(f'  {name:<22} {row["status"]}', flush=True)
            continue
        row['mem_fwd'], out = peak_memory(fwd, device)
        outputs[name] = out.float()
        del out
        if options.flops:
            flops, params = decode_head_complexity(head, feature)
            row.update(flops=flops, params=params)
        else:
            row['params'] = sum(p.numel() for p in head.parameters())
        fns = dict(fwd=fwd)
        if options.backward:
            step = train_step_fn(head, feature, device, options.amp)
            predicted = over_limit(past, 'mem_train', tokens, memory_limit)
            if predicted:
                row['status'] = (f'backward skipped: predicted to need '
                                 f'{predicted / 2**30:.1f} GiB')
            else:
                row['mem_train'], _ = peak_memory(step, device)
                fns['train'] = step
        runnable[name] = fns
        past.append(row)
    by_name = {r['head']: r for r in rows}
    for name in (DEFAULT, FAST):
        if STRAIGHTFORWARD in outputs and name in outputs:
            diff = (outputs[STRAIGHTFORWARD] - outputs[name]).abs().max()
            by_name[name]['max_abs_diff_vs_straightforward'] = float(diff)
    outputs.clear()
    time_rows(rows, runnable, ('fwd', 'train'), options, device)
    for row in rows:
        print('  ' + describe_row(row), flush=True)
    return rows


def time_rows(rows: List[Dict], runnable: Dict[str, Dict[str, Callable]],
              kinds: Sequence[str], options: BenchmarkOptions,
              device: torch.device) -> None:
    """Time every kind of call (``runnable[head][kind]``) of all heads in
    interleaved rounds, kind after kind, into ``row['<kind>_ms']`` (the
    median) and ``row['<kind>_calls']``."""
    for kind in kinds:
        fns = {name: f[kind] for name, f in runnable.items() if kind in f}
        if not fns:
            continue
        times = time_interleaved(fns, device, options.repeats,
                                 options.warmup, options.max_seconds)
        for row in rows:
            if row['head'] in times:
                t = times[row['head']]
                row[f'{kind}_ms'] = 1e3 * median(t)
                row[f'{kind}_calls'] = len(t)


def prepare_run(device_name: str, threads: Optional[int],
                memory_limit_gb: Optional[float]
                ) -> Tuple[torch.device, Optional[int]]:
    """The device (``ValueError`` if CUDA is asked for and missing), the
    CPU threads set, and the memory budget in bytes (``memory_limit_gb``,
    else 80% of what is available now)."""
    device = torch.device(device_name)
    if device.type == 'cuda' and not torch.cuda.is_available():
        raise ValueError('--device cuda, but torch sees no CUDA device')
    if threads:
        torch.set_num_threads(threads)
    if memory_limit_gb:
        return device, int(memory_limit_gb * 2**30)
    avail = available_memory(device)
    return device, int(0.8 * avail) if avail else None


# ------------------------------------------------------------- reporting
def add_ratios(rows: List[Dict]) -> None:
    """``*_vs_segmenter`` for every figure, per size."""
    keys = ('flops', 'params', 'fwd_ms', 'train_ms', 'mem_fwd', 'mem_train')
    by_size: Dict[str, Dict[str, Dict]] = {}
    for row in rows:
        by_size.setdefault(row['size'], {})[row['head']] = row
    for heads in by_size.values():
        ref = heads.get(REFERENCE)
        straight = heads.get(STRAIGHTFORWARD)
        for row in heads.values():
            for key in keys:
                if ref and row.get(key) and ref.get(key):
                    row[f'{key}_vs_{REFERENCE}'] = row[key] / ref[key]
            if row['head'] in (DEFAULT, FAST) and straight:
                for key in ('fwd_ms', 'train_ms', 'mem_fwd'):
                    if row.get(key) and straight.get(key):
                        row[f'{key}_vs_straightforward'] = (row[key] /
                                                            straight[key])


def _fmt(value, spec: str, scale: float = 1.0) -> str:
    return '-' if value is None else format(value * scale, spec)


def describe_row(row: Dict) -> str:
    mem = row.get('mem_fwd')
    return (f'{row["head"]:<22} {row["size"]:>9} {row["tokens"]:>6} tokens  '
            f'fwd {_fmt(row.get("fwd_ms"), ".1f")} ms  '
            f'fwd+bwd {_fmt(row.get("train_ms"), ".1f")} ms  '
            f'mem {_fmt(mem, ".1f", 2**-20)} MiB  {row["status"]}')


COLUMNS = [
    ('head', 'head', '{}'), ('size', 'image', '{}'), ('tokens', 'tokens',
                                                      '{}'),
    ('params', 'params (M)', 'M'), ('flops', 'GFLOPs', 'G'),
    ('flops_vs_segmenter', 'x seg', 'r'), ('fwd_ms', 'fwd ms', '.1f'),
    ('fwd_ms_vs_segmenter', 'x seg', 'r'),
    ('train_ms', 'fwd+bwd ms', '.1f'),
    ('train_ms_vs_segmenter', 'x seg', 'r'), ('mem_fwd', 'fwd MiB', 'Mi'),
    ('mem_fwd_vs_segmenter', 'x seg', 'r'), ('mem_train', 'train MiB',
                                            'Mi'),
]


def cell(row: Dict, key: str, kind: str) -> str:
    value = row.get(key)
    if value is None:
        return '-'
    if kind == 'M':
        return f'{value / 1e6:.2f}'
    if kind == 'G':
        return f'{value / 1e9:.2f}'
    if kind == 'Mi':
        return f'{value / 2**20:.0f}'
    if kind == 'r':
        return f'{value:.3f}'
    return format(value, kind) if kind != '{}' else str(value)


def markdown_table(rows: List[Dict]) -> str:
    lines = ['| ' + ' | '.join(c[1] for c in COLUMNS) + ' | note |',
             '|' + '---|' * (len(COLUMNS) + 1)]
    for row in rows:
        note = '' if row['status'] == 'ok' else row['status']
        if 'fwd_ms_vs_straightforward' in row:
            note = (note + ' ' if note else '') + (
                f'fwd {row["fwd_ms_vs_straightforward"]:.3f}x '
                'straightforward')
        if 'max_abs_diff_vs_straightforward' in row:
            note = (note + ' ' if note else '') + (
                'max |out - straightforward| = '
                f'{row["max_abs_diff_vs_straightforward"]:.1e}')
        lines.append('| ' + ' | '.join(cell(row, k, f)
                                       for k, _, f in COLUMNS) +
                     f' | {note} |')
    return '\n'.join(lines)


def slopes(rows: List[Dict],
           keys: Sequence[str] = ('fwd_ms', 'train_ms', 'mem_fwd', 'flops')
           ) -> Dict[str, Dict[str, float]]:
    """Per head (row ``'head'``), the log-log slope of each cost in
    ``keys`` against tokens."""
    out: Dict[str, Dict[str, float]] = {}
    for head in dict.fromkeys(r['head'] for r in rows):
        mine = [r for r in rows if r['head'] == head]
        for key in keys:
            pts = [(r['tokens'], r[key]) for r in mine if r.get(key)]
            if len({t for t, _ in pts}) >= 2:
                out.setdefault(head, {})[key] = loglog_slope(
                    [t for t, _ in pts], [v for _, v in pts])
    return out


def plot(rows: List[Dict], fits: Dict, out_file: str, title: str,
         latency: Sequence[str] = ('fwd_ms', 'train_ms'),
         memory: Sequence[str] = ('mem_fwd', 'mem_train')) -> str:
    """Latency (``latency`` keys) and peak memory (``memory`` keys) of
    every head against tokens, log-log, with the fitted slopes."""
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.8))
    colors = plt.rcParams['axes.prop_cycle'].by_key()['color']
    panels = ((axes[0], latency, 'latency (ms)', 1.0),
              (axes[1], memory, 'peak memory (MiB)', 2**-20))
    for ax, keys, ylabel, scale in panels:
        for i, head in enumerate(dict.fromkeys(r['head'] for r in rows)):
            mine = sorted((r for r in rows if r['head'] == head),
                          key=lambda r: r['tokens'])
            for key, style in zip(keys, ('o-', 's--', 'd:')):
                pts = [(r['tokens'], r[key] * scale) for r in mine
                       if r.get(key)]
                if not pts:
                    continue
                slope = fits.get(head, {}).get(key)
                label = f'{head} {key}' + (f' (slope {slope:.2f})'
                                           if slope is not None else '')
                ax.plot(*zip(*pts), style, color=colors[i % len(colors)],
                        label=label, markersize=4)
        ax.set_xscale('log')
        ax.set_yscale('log')
        ax.set_xlabel('tokens (patch grid)')
        ax.set_ylabel(ylabel)
        ax.grid(True, which='both', alpha=0.3)
        ax.legend(fontsize=6)
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    save_figure(fig, out_file, dpi=120)
    plt.close(fig)
    return out_file


def measure_sizes(sizes: Sequence[Tuple[int, int]],
                  measure: Callable[[Tuple[int, int]], List[Dict]]
                  ) -> List[Dict]:
    """``measure(size)``'s rows for every size, smallest first (so a run
    stopped early has the cheap sizes, and memory predictions grow from
    measured ones)."""
    rows: List[Dict] = []
    for size in sorted(sizes, key=lambda s: s[0] * s[1]):
        print(f'== {size[0]}x{size[1]}', flush=True)
        rows += measure(size)
    return rows


def machine_line(facts: Dict, what: str, amp: Optional[str]) -> str:
    """One line naming the machine and what is benchmarked."""
    return (f'benchmark on {facts["cpu"]} ({facts["threads"]} threads), '
            f'{facts.get("gpu", "")} torch {facts["torch"]}, {what}'
            + (f', autocast {amp}' if amp else ''))


def write_report(out_dir: str, report: Dict, table: str, title: str,
                 **plot_keys: Sequence[str]) -> None:
    """``benchmark.json`` (``report``), ``benchmark.md`` (``table``) and
    ``benchmark.png`` (:func:`plot` of ``report['results']`` with
    ``report['slopes']``; ``plot_keys`` choose its curves) in
    ``out_dir``; prints the table and the files written."""
    write_json(osp.join(out_dir, 'benchmark.json'), report)
    write_text(osp.join(out_dir, 'benchmark.md'), table + '\n')
    title = (f'{title}, {report["machine"]["cpu"]}, '
             f'{report["machine"]["threads"]} threads, '
             f'{report["machine"]["date"][:10]}')
    plot(report['results'], report['slopes'],
         osp.join(out_dir, 'benchmark.png'), title, **plot_keys)
    print('\n' + table)
    print(f'\nwritten to {out_dir}: benchmark.json, benchmark.md, '
          'benchmark.png')


def machine(device: torch.device) -> Dict:
    facts = dict(date=datetime.datetime.now().isoformat(timespec='seconds'),
                 platform=platform.platform(), python=platform.python_version(),
                 torch=torch.__version__, device=str(device),
                 cpu=platform.processor() or platform.machine(),
                 cpu_count=os.cpu_count(), threads=torch.get_num_threads())
    try:
        with open('/proc/cpuinfo') as f:
            for line in f:
                if line.startswith('model name'):
                    facts['cpu'] = line.split(':', 1)[1].strip()
                    break
    except OSError:
        pass
    if device.type == 'cuda':
        facts['gpu'] = torch.cuda.get_device_name(device)
    return facts
