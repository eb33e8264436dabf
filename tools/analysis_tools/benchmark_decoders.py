"""Benchmark decode heads side by side on the same encoder features.

    python tools/analysis_tools/benchmark_decoders.py [--encoder s] \
        [--heads segmenter linear depict-sa depict-ca tost cbsa \
                 cbsa-rigorous cbsa-straightforward] \
        [--sizes 512 768 1024 1536 2048 512x1024] [--device cpu|cuda] \
        [--threads N] [--repeats 10] [--max-seconds 30] [--no-backward] \
        [--amp bf16|fp16] [--out work_dirs/benchmark_decoders]

Every head is built from this project's ADE20K config for the chosen ViT
(``--encoder t|s|b|l``) with its published hyperparameters and fed the same
random encoder feature map, ``(1, width, H/16, W/16)``, as the head sees it
inside an ``EncoderDecoder`` (the final upsampling, equal for all heads, is
not included). Per image size and head, in one run:

* parameters and FLOPs (mmengine's complexity analysis; fused
  multiply-adds, attention included -- see ``mmseg_whitebox.analysis``);
* forward latency (inference, ``no_grad``) and forward+backward latency
  (training mode, gradients to the parameters and the input features):
  the median over ``--repeats`` calls after warm-up, the heads timed in
  interleaved rounds so that a change in machine load hits all alike,
  each timed call right after an untimed one of the same head (so a head
  is timed in steady use, not after another head has flushed the caches
  and the allocator's free memory);
* peak memory of one forward and of one forward+backward (CUDA:
  ``max_memory_allocated``; CPU: the rise of the resident-set high-water
  mark);
* every figure as a ratio to mmseg's Segmenter mask head.

``cbsa-straightforward`` is the CBT decoder written the straightforward
way, from the CBSA paper's equations and its Appendix D listing (defined in
this file, not in the library). It shares the parameters of the ``cbsa``
head, so the two compute the same function; the table reports the largest
difference of their outputs next to the speed-up.

A run that would not fit in memory (predicted from the smaller sizes) is
skipped and marked so. Writes ``benchmark.json``, ``benchmark.md`` (the
table) and ``benchmark.png`` (latency and memory against the number of
tokens, log-log, with fitted slopes: 1 = linear, 2 = quadratic) to
``--out``, and checks the project's performance targets on what was
measured.
"""
import argparse
import datetime
import glob
import json
import os
import os.path as osp
import platform
import sys
from contextlib import nullcontext
from typing import Callable, Dict, List, Optional, Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F

REPO = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))
sys.path.insert(0, REPO)
import mmseg_whitebox  # noqa: E402,F401  (compat + registration first)
from mmseg_whitebox.analysis import decode_head_complexity  # noqa: E402
from mmseg_whitebox.analysis.benchmark import (  # noqa: E402
    available_memory, extrapolate_loglog, loglog_slope, median, peak_memory,
    time_interleaved)
from mmseg_whitebox.utils.cli import ToolError  # noqa: E402

# head name -> config (relative to configs/, {enc} = t|s|b|l)
HEAD_CONFIGS = {
    'segmenter': 'segmenter/segmenter_vit-{enc}_mask_*_ade20k-*.py',
    'linear': 'segmenter/segmenter_vit-{enc}_linear_*_ade20k-*.py',
    'depict-sa': 'depict/depict-sa_vit-{enc}_*_ade20k-*.py',
    'depict-ca': 'depict/depict-ca_vit-{enc}_*_ade20k-*.py',
    'tost': 'tost/tost_vit-{enc}_*_ade20k-*.py',
    'cbsa': 'cbsa/cbsa_vit-{enc}_*_ade20k-*.py',
    'cbsa-rigorous': 'cbsa/cbsa-rigorous_vit-{enc}_*_ade20k-*.py',
    'cbsa-straightforward': 'cbsa/cbsa_vit-{enc}_*_ade20k-*.py',
}
REFERENCE = 'segmenter'
STRAIGHTFORWARD, FAST = 'cbsa-straightforward', 'cbsa'
# the straightforward and the library CBSA decoder must agree to this
OUTPUT_ATOL = 1e-5


# ------------------------------------------------------------ the baseline
def _attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
               scale: float) -> Tuple[torch.Tensor, torch.Tensor]:
    attn = torch.softmax(query @ key.transpose(-1, -2) * scale, dim=-1)
    return attn @ value, attn


def straightforward_cbsa(op: nn.Module, x: torch.Tensor, h: int,
                         w: int) -> torch.Tensor:
    """CBSA on ``(B, N, d)`` tokens whose first ``h*w`` form the patch grid,
    written as the CBSA paper's Appendix D listing (generalised from a
    square grid to ``h x w``, with the stop-gradient of eq. 5), using the
    parameters of the library operator ``op``."""
    b, n, _ = x.shape
    heads, p = op.num_heads, op.head_dim
    z = op.proj(x)  # U_k^T z for every subspace, (B, N, heads * p)
    grid = z[:, :h * w].reshape(b, h, w, heads * p).permute(0, 3, 1, 2)
    rep = F.adaptive_avg_pool2d(grid, op.rep_grid)
    rep = rep.reshape(b, heads * p, -1).permute(0, 2, 1)
    z = z.reshape(b, n, heads, p).permute(0, 2, 1, 3)
    rep = rep.reshape(b, -1, heads, p).permute(0, 2, 1, 3).detach()
    scale = p**-0.5
    rep_delta, attn = _attention(rep, z, z, scale)  # extraction, eq. 5
    rep = rep + op.eta * rep_delta
    contraction, _ = _attention(rep, rep, rep, scale)  # eq. 8
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


def over_limit(past: List[Dict], key: str, tokens: int,
               limit: Optional[float]) -> Optional[float]:
    """The memory ``key`` predicted at ``tokens`` from the smaller runs in
    ``past`` when it exceeds ``limit`` bytes, else None."""
    predicted = extrapolate_loglog([r['tokens'] for r in past],
                                   [r.get(key) for r in past], tokens)
    if limit and predicted and predicted > limit:
        return predicted
    return None


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
        raise argparse.ArgumentTypeError(
            f'size {text!r}: give N (square) or HxW, each >= 16 pixels')
    return parts[0], parts[1]


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=__doc__.split('\n\n')[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=__doc__.split('\n\n', 1)[1])
    p.add_argument('--encoder', default='s', choices=['t', 's', 'b', 'l'],
                   help='ViT whose configs (feature width, head sizes) are '
                   'used (default: s)')
    p.add_argument('--heads', nargs='+', choices=list(HEAD_CONFIGS),
                   default=list(HEAD_CONFIGS), help='heads to compare')
    p.add_argument('--sizes', nargs='+', type=parse_size,
                   default=[parse_size(s) for s in
                            ('512', '768', '1024', '1536', '2048',
                             '512x1024')],
                   help='image sizes, N or HxW (default: 512 768 1024 1536 '
                   '2048 512x1024)')
    p.add_argument('--device', default='cpu',
                   help='cpu, cuda or cuda:N (default: cpu)')
    p.add_argument('--threads', type=int,
                   help='CPU threads (default: torch\'s choice)')
    p.add_argument('--repeats', type=int, default=10,
                   help='timed calls per measurement (median reported)')
    p.add_argument('--warmup', type=int, default=2,
                   help='untimed calls first (default: 2)')
    p.add_argument('--max-seconds', type=float, default=30.0,
                   help='stop timing a head after this many seconds (at '
                   'least 3 calls; default 30)')
    p.add_argument('--no-backward', action='store_true',
                   help='skip the forward+backward measurements')
    p.add_argument('--no-flops', action='store_true',
                   help='skip the FLOP counts')
    p.add_argument('--amp', choices=['bf16', 'fp16'],
                   help='run under torch.autocast with this dtype')
    p.add_argument('--memory-limit-gb', type=float,
                   help='skip runs predicted to need more (default: 80%% '
                   'of the memory available at the start)')
    p.add_argument('--seed', type=int, default=0)
    p.add_argument('--out', default='work_dirs/benchmark_decoders',
                   help='output folder (default: work_dirs/'
                   'benchmark_decoders)')
    args = p.parse_args(argv)
    if args.repeats < 1 or args.warmup < 0:
        p.error('--repeats must be >= 1 and --warmup >= 0')
    return args


def head_config(name: str, encoder: str) -> str:
    pattern = osp.join(REPO, 'configs',
                       HEAD_CONFIGS[name].format(enc=encoder))
    found = sorted(glob.glob(pattern))
    if not found:
        raise ToolError(f'no config for head {name!r} with ViT-{encoder} '
                        f'({osp.relpath(pattern, REPO)}); choose another '
                        '--encoder or leave this head out of --heads')
    return found[0]


def build_heads(names: List[str], encoder: str, device: torch.device,
                seed: int) -> Tuple[Dict[str, nn.Module], Dict[str, Dict]]:
    """Heads (eval mode) and, per head, its config facts."""
    from mmengine.config import Config
    from mmengine.registry import init_default_scope
    from mmseg.registry import MODELS
    init_default_scope('mmseg')
    heads: Dict[str, nn.Module] = {}
    info: Dict[str, Dict] = {}
    for name in names:
        path = head_config(name, encoder)
        cfg = Config.fromfile(path)
        if name == STRAIGHTFORWARD and FAST in heads:
            head = StraightforwardCBSADecoder(heads[FAST])
        else:
            torch.manual_seed(seed)
            head = MODELS.build(cfg.model.decode_head)
            head.init_weights()
            if name == STRAIGHTFORWARD:
                head = StraightforwardCBSADecoder(head)
        heads[name] = head.to(device).eval()
        info[name] = dict(config=osp.relpath(path, REPO),
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
                 size: Tuple[int, int], args: argparse.Namespace,
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
        gen = torch.Generator().manual_seed(args.seed)
        feature = torch.randn(1, info[name]['in_channels'], *grid,
                              generator=gen).to(device)
        row = dict(head=name, size=f'{size[0]}x{size[1]}', grid=list(grid),
                   tokens=tokens, status='ok')
        rows.append(row)
        past = history.setdefault(name, [])
        fwd = forward_fn(head, feature, device, args.amp)
        predicted = over_limit(past, 'mem_fwd', tokens, memory_limit)
        if predicted:
            row['status'] = (f'skipped: forward predicted to need '
                             f'{predicted / 2**30:.1f} GiB')
            print(f'  {name:<22} {row["status"]}', flush=True)
            continue
        row['mem_fwd'], out = peak_memory(fwd, device)
        outputs[name] = out.float()
        del out
        if not args.no_flops:
            flops, params = decode_head_complexity(head, feature)
            row.update(flops=flops, params=params)
        else:
            row['params'] = sum(p.numel() for p in head.parameters())
        fns = dict(fwd=fwd)
        if not args.no_backward:
            step = train_step_fn(head, feature, device, args.amp)
            predicted = over_limit(past, 'mem_train', tokens, memory_limit)
            if predicted:
                row['status'] = (f'backward skipped: predicted to need '
                                 f'{predicted / 2**30:.1f} GiB')
            else:
                row['mem_train'], _ = peak_memory(step, device)
                fns['train'] = step
        runnable[name] = fns
        past.append(row)
    if STRAIGHTFORWARD in outputs and FAST in outputs:
        diff = (outputs[STRAIGHTFORWARD] - outputs[FAST]).abs().max()
        by_name = {r['head']: r for r in rows}
        by_name[STRAIGHTFORWARD]['max_abs_diff_vs_cbsa'] = float(diff)
    outputs.clear()
    # timing: all heads in interleaved rounds, forward then training
    for kind in ('fwd', 'train'):
        fns = {name: f[kind] for name, f in runnable.items() if kind in f}
        if not fns:
            continue
        times = time_interleaved(fns, device, args.repeats, args.warmup,
                                 args.max_seconds)
        for row in rows:
            if row['head'] in times:
                t = times[row['head']]
                row[f'{kind}_ms'] = 1e3 * median(t)
                row[f'{kind}_calls'] = len(t)
    for row in rows:
        print('  ' + describe_row(row), flush=True)
    return rows


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
            if row['head'] == FAST and straight:
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
        if 'max_abs_diff_vs_cbsa' in row:
            note = (note + ' ' if note else '') + (
                f'max |out - cbsa| = {row["max_abs_diff_vs_cbsa"]:.1e}')
        lines.append('| ' + ' | '.join(cell(row, k, f)
                                       for k, _, f in COLUMNS) +
                     f' | {note} |')
    return '\n'.join(lines)


def slopes(rows: List[Dict]) -> Dict[str, Dict[str, float]]:
    """Per head, the log-log slope of each cost against tokens."""
    out: Dict[str, Dict[str, float]] = {}
    for head in dict.fromkeys(r['head'] for r in rows):
        mine = [r for r in rows if r['head'] == head]
        for key in ('fwd_ms', 'train_ms', 'mem_fwd', 'flops'):
            pts = [(r['tokens'], r[key]) for r in mine if r.get(key)]
            if len({t for t, _ in pts}) >= 2:
                out.setdefault(head, {})[key] = loglog_slope(
                    [t for t, _ in pts], [v for _, v in pts])
    return out


def _at(rows: List[Dict], head: str, size: str) -> Optional[Dict]:
    for row in rows:
        if row['head'] == head and row['size'] == size:
            return row
    return None


def check_targets(rows: List[Dict]) -> List[Dict]:
    """The project's performance targets, on what was measured (a target
    whose measurements are missing is left out)."""
    checks = []

    def add(text, value, limit):
        checks.append(dict(target=text, value=value, limit=limit,
                           met=bool(value <= limit)))

    r512 = _at(rows, FAST, '512x512')
    if r512 and r512.get('flops_vs_segmenter'):
        add('CBSA decoder FLOPs at 512x512 / Segmenter head',
            r512['flops_vs_segmenter'], 0.20)
    r1k, r2k = _at(rows, FAST, '1024x1024'), _at(rows, FAST, '2048x2048')
    if r1k and r1k.get('fwd_ms_vs_segmenter'):
        add('CBSA forward latency at 1024x1024 / Segmenter head',
            r1k['fwd_ms_vs_segmenter'], 0.05)
    for r in (r1k, r2k):
        if r and r.get('fwd_ms_vs_straightforward'):
            add(f'CBSA forward latency at {r["size"]} / straightforward '
                'CBSA', r['fwd_ms_vs_straightforward'], 0.8)
    for size in ('1024x1024', '2048x2048'):
        s = _at(rows, STRAIGHTFORWARD, size)
        if s and 'max_abs_diff_vs_cbsa' in s:
            add(f'max |CBSA - straightforward| output difference at {size}',
                s['max_abs_diff_vs_cbsa'], OUTPUT_ATOL)
    if r1k and r2k and r1k.get('fwd_ms') and r2k.get('fwd_ms'):
        add('CBSA forward latency 2048^2 / 1024^2 (tokens x4; linear)',
            r2k['fwd_ms'] / r1k['fwd_ms'], 4.5)
    if r2k and r2k.get('mem_fwd_vs_segmenter'):
        add('CBSA forward peak memory at 2048x2048 / Segmenter head',
            r2k['mem_fwd_vs_segmenter'], 0.25)
    return checks


def plot(rows: List[Dict], fits: Dict, out_file: str, title: str) -> str:
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.8))
    colors = plt.rcParams['axes.prop_cycle'].by_key()['color']
    panels = ((axes[0], ('fwd_ms', 'train_ms'), 'latency (ms)', 1.0),
              (axes[1], ('mem_fwd', 'mem_train'), 'peak memory (MiB)',
               2**-20))
    for ax, keys, ylabel, scale in panels:
        for i, head in enumerate(dict.fromkeys(r['head'] for r in rows)):
            mine = sorted((r for r in rows if r['head'] == head),
                          key=lambda r: r['tokens'])
            for key, style in zip(keys, ('o-', 's--')):
                pts = [(r['tokens'], r[key] * scale) for r in mine
                       if r.get(key)]
                if not pts:
                    continue
                slope = fits.get(head, {}).get(key)
                what = 'fwd' if key in ('fwd_ms', 'mem_fwd') else 'fwd+bwd'
                label = f'{head} {what}' + (f' (slope {slope:.2f})'
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
    fig.savefig(out_file, dpi=120)
    plt.close(fig)
    return out_file


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


def main(argv=None) -> Dict:
    args = parse_args(argv)
    device = torch.device(args.device)
    if device.type == 'cuda' and not torch.cuda.is_available():
        raise ToolError('--device cuda, but torch sees no CUDA device')
    if args.threads:
        torch.set_num_threads(args.threads)
    os.makedirs(args.out, exist_ok=True)
    heads, info = build_heads(args.heads, args.encoder, device, args.seed)
    if args.memory_limit_gb:
        memory_limit = int(args.memory_limit_gb * 2**30)
    else:
        avail = available_memory(device)
        memory_limit = int(0.8 * avail) if avail else None
    facts = machine(device)
    print(f'benchmark on {facts["cpu"]} ({facts["threads"]} threads), '
          f'{facts.get("gpu", "")} torch {facts["torch"]}, ViT-'
          f'{args.encoder} features' + (f', autocast {args.amp}'
                                        if args.amp else ''))
    rows: List[Dict] = []
    history: Dict[str, List[Dict]] = {}
    sizes = sorted(args.sizes, key=lambda s: s[0] * s[1])
    for size in sizes:
        print(f'== {size[0]}x{size[1]}', flush=True)
        rows += measure_size(heads, info, size, args, device, history,
                             memory_limit)
    add_ratios(rows)
    fits = slopes(rows)
    checks = check_targets(rows)
    report = dict(machine=facts, encoder=args.encoder, amp=args.amp,
                  heads=info, results=rows, slopes=fits, targets=checks)
    table = markdown_table(rows)
    with open(osp.join(args.out, 'benchmark.json'), 'w') as f:
        json.dump(report, f, indent=1)
    with open(osp.join(args.out, 'benchmark.md'), 'w') as f:
        f.write(table + '\n')
    title = (f'decoders on ViT-{args.encoder} features, {facts["cpu"]}, '
             f'{facts["threads"]} threads, {facts["date"][:10]}')
    plot(rows, fits, osp.join(args.out, 'benchmark.png'), title)
    print('\n' + table)
    print('\nslopes of cost vs tokens (log-log; 1 = linear):')
    for head, fit in fits.items():
        print(f'  {head:<22} ' + '  '.join(f'{k} {v:.2f}'
                                          for k, v in fit.items()))
    if checks:
        print('\ntargets:')
        for c in checks:
            print(f'  [{"met" if c["met"] else "MISSED"}] {c["target"]}: '
                  f'{c["value"]:.3g} (limit {c["limit"]:g})')
    print(f'\nwritten to {args.out}: benchmark.json, benchmark.md, '
          'benchmark.png')
    return report


if __name__ == '__main__':
    main()
