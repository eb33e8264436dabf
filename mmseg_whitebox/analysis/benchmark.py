"""What the benchmarks share: latency, peak memory, scaling slopes, the
measurement options of the benchmark tools and their reports.

Behind ``tools/analysis_tools/benchmark_{decoders,encoders,shared_encoder}
.py`` (the decoder- and encoder-specific parts are in
:mod:`.decoder_benchmark` and :mod:`.encoder_benchmark`), usable on their
own:

* :func:`time_interleaved` -- wall time of repeated calls of several
  functions, in interleaved rounds after warm-up, with CUDA
  synchronisation, each timed call preceded by an untimed one of the same
  function (steady state, not the previous function's cache and allocator
  state), each stopping early once its time budget is spent (a Segmenter
  head at 2048x2048 takes seconds per call on a CPU);
* :func:`peak_memory` -- the extra memory one call needs at its peak: on
  CUDA ``torch.cuda.max_memory_allocated`` above what was allocated
  before; on a CPU the rise of the process's resident-set high-water mark
  (``VmHWM``, reset through ``/proc/self/clear_refs`` on Linux) after
  returning freed heap to the system, which counts every page the call
  touched, torch's allocations and the allocator's own overhead alike;
* :func:`loglog_slope` -- the exponent ``s`` of ``cost ~ tokens^s``,
  least squares on log-log axes (1: linear, 2: quadratic);
* :class:`BenchmarkOptions`, :func:`add_measurement_args`,
  :func:`prepare_run` -- the tools' common options and set-up;
  :func:`time_rows`, :func:`measure_sizes`, :func:`write_report` -- timing
  rows of results and writing the table, JSON and plot.
"""
from __future__ import annotations

import argparse
import ctypes
import ctypes.util
import datetime
import gc
import glob
import math
import os
import os.path as osp
import platform
import time
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import torch

from mmseg_whitebox.utils.atomic import save_figure, write_json, write_text


# calls slower than this (seconds) are past any warm-up or cache effect
SLOW_CALL = 1.0


def synchronize(device: torch.device) -> None:
    if device.type == 'cuda':
        torch.cuda.synchronize(device)


def time_interleaved(fns: Dict[str, Callable[[], object]],
                     device: torch.device,
                     repeats: int = 10,
                     warmup: int = 2,
                     max_seconds: Optional[float] = None,
                     settle: bool = True,
                     clock: Callable[[], float] = time.perf_counter
                     ) -> Dict[str, List[float]]:
    """Seconds of each timed call of every function in ``fns``.

    After up to ``warmup`` untimed calls each (one, for calls slower than
    a second), the functions are called in rounds -- one timed call of
    each per round, ``repeats`` rounds -- so a change in machine load
    during the run affects all of them alike. With ``settle``, each timed
    call follows an untimed call of the same function: what is timed is
    that function in steady use, not its first call after another one
    evicted the caches and left the allocator to fetch fresh pages from
    the system (which on a CPU costs a small decoder more than its
    compute). Functions slower than a second are not settled. With
    ``max_seconds``, a function stops being timed once that much timed
    time was spent on it, after at least 3 calls -- or after one, when
    that one call alone took longer (a single minutes-long call is
    already a stable figure). ``clock`` reads seconds (a stand-in clock
    makes the schedule testable without timing anything).
    """
    if repeats < 1:
        raise ValueError(f'repeats must be >= 1, got {repeats}')

    def call(fn: Callable[[], object]) -> float:
        start = clock()
        fn()
        synchronize(device)
        return clock() - start

    for fn in fns.values():
        for _ in range(warmup):
            if call(fn) > SLOW_CALL:
                break  # a call this slow is past any warm-up effect
    times: Dict[str, List[float]] = {name: [] for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            done = times[name]
            if max_seconds is not None and done and (
                    done[0] >= max_seconds
                    or (len(done) >= 3 and sum(done) >= max_seconds)):
                continue
            if settle and (not done or done[-1] <= SLOW_CALL):
                call(fn)
            done.append(call(fn))
    return times


def median(values: Sequence[float]) -> float:
    ordered = sorted(values)
    mid = len(ordered) // 2
    if len(ordered) % 2:
        return ordered[mid]
    return 0.5 * (ordered[mid - 1] + ordered[mid])


# ---------------------------------------------------------------- memory
def _proc_status_bytes(key: str) -> Optional[int]:
    try:
        with open('/proc/self/status') as f:
            for line in f:
                if line.startswith(key + ':'):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def _release_heap() -> None:
    """Return freed memory to the system, so the baseline RSS is lean."""
    gc.collect()
    name = ctypes.util.find_library('c')
    if name:
        try:
            ctypes.CDLL(name).malloc_trim(0)
        except (OSError, AttributeError):
            pass


def cpu_peak_supported() -> bool:
    """Whether this system lets a process reset and read its peak RSS
    (Linux >= 4.0)."""
    if _proc_status_bytes('VmHWM') is None:
        return False
    try:
        with open('/proc/self/clear_refs', 'w') as f:
            f.write('5')
    except OSError:
        return False
    return True


def peak_memory(fn: Callable[[], Any],
                device: torch.device) -> Tuple[Optional[int], Any]:
    """``(bytes, result)``: the memory one call of ``fn`` needs at its peak
    beyond what was in use before it (``None`` where this cannot be
    measured), and what the call returned."""
    if device.type == 'cuda':
        synchronize(device)
        gc.collect()
        torch.cuda.empty_cache()
        before = torch.cuda.memory_allocated(device)
        torch.cuda.reset_peak_memory_stats(device)
        result = fn()
        synchronize(device)
        peak = torch.cuda.max_memory_allocated(device)
        return int(peak - before), result
    if not cpu_peak_supported():
        return None, fn()
    _release_heap()
    before = _proc_status_bytes('VmRSS')
    with open('/proc/self/clear_refs', 'w') as f:
        f.write('5')  # reset VmHWM to the current RSS
    result = fn()
    peak = _proc_status_bytes('VmHWM')
    if before is None or peak is None:
        return None, result
    return max(0, peak - before), result


def available_memory(device: torch.device) -> Optional[int]:
    """Bytes free for a measurement: free GPU memory, or the system's
    ``MemAvailable``."""
    if device.type == 'cuda':
        free, _ = torch.cuda.mem_get_info(device)
        return int(free)
    try:
        with open('/proc/meminfo') as f:
            for line in f:
                if line.startswith('MemAvailable:'):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


# ---------------------------------------------------------------- scaling
def loglog_slope(xs: Sequence[float], ys: Sequence[float]) -> float:
    """Least-squares slope of ``log y`` against ``log x`` (needs two
    distinct positive ``x``)."""
    pairs = [(math.log(x), math.log(y)) for x, y in zip(xs, ys)
             if x > 0 and y > 0]
    if len({p[0] for p in pairs}) < 2:
        raise ValueError('need at least two distinct positive points')
    mx = sum(p[0] for p in pairs) / len(pairs)
    my = sum(p[1] for p in pairs) / len(pairs)
    sxx = sum((p[0] - mx)**2 for p in pairs)
    sxy = sum((p[0] - mx) * (p[1] - my) for p in pairs)
    return sxy / sxx


def extrapolate_loglog(xs: Sequence[float], ys: Sequence[float],
                       x: float) -> Optional[float]:
    """``y`` at ``x`` on the power law through the last two points (None
    with fewer than two); used to skip runs that would not fit in
    memory."""
    pts = [(a, b) for a, b in zip(xs, ys) if a > 0 and b and b > 0]
    if len(pts) < 2 or pts[-1][0] == pts[-2][0]:
        return None
    (x0, y0), (x1, y1) = pts[-2], pts[-1]
    slope = math.log(y1 / y0) / math.log(x1 / x0)
    return y1 * (x / x1)**max(slope, 1.0)


# ------------------------------------------------- shared by the benchmark tools
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


def over_limit(past: List[Dict], key: str, tokens: int,
               limit: Optional[float]) -> Optional[float]:
    """The memory ``key`` predicted at ``tokens`` from the smaller runs in
    ``past`` when it exceeds ``limit`` bytes, else None."""
    predicted = extrapolate_loglog([r['tokens'] for r in past],
                                   [r.get(key) for r in past], tokens)
    if limit and predicted and predicted > limit:
        return predicted
    return None


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
        raise argparse.ArgumentTypeError(str(exc)) from exc


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


def build_models(configs: Dict[str, str], device: torch.device, seed: int,
                 options: Optional[Dict[str, Any]] = None
                 ) -> Dict[str, torch.nn.Module]:
    """The segmentor of every ``name: config file`` (eval mode, random
    weights from ``seed``, no pretrained encoder: nothing is downloaded);
    ``options`` are merged into each config first (``--cfg-options``
    style keys)."""
    from mmengine.config import Config
    from mmengine.registry import init_default_scope
    from mmseg.registry import MODELS

    from mmseg_whitebox.robustness.metrics import quiet_logging
    init_default_scope('mmseg')
    models = {}
    for name, path in configs.items():
        cfg = Config.fromfile(path)
        cfg.model.pretrained = None
        cfg.model.backbone.init_cfg = None
        if options:
            cfg.merge_from_dict(options)
        torch.manual_seed(seed)
        model = MODELS.build(cfg.model)
        with quiet_logging():  # not mmengine's per-parameter init report
            model.init_weights()
        model.cfg = cfg
        models[name] = model.to(device).eval()
    return models


def ratios_to_reference(rows: List[Dict], reference: str,
                        keys: Sequence[str], suffix: str) -> None:
    """``<key>_vs_<suffix>``: every figure in ``keys`` as a ratio to the
    ``reference`` row (``row['head']``) of the same size."""
    by_size: Dict[str, Dict[str, Dict]] = {}
    for row in rows:
        by_size.setdefault(row['size'], {})[row['head']] = row
    for group in by_size.values():
        ref = group.get(reference)
        for row in group.values():
            for key in keys:
                if ref and row.get(key) and ref.get(key):
                    row[f'{key}_vs_{suffix}'] = row[key] / ref[key]


def ratio_lines(rows: List[Dict], reference: str, time_key: str,
                memory_key: str) -> List[str]:
    """One line per row other than the reference: its ``time_key`` and
    ``memory_key`` ratios (as :func:`ratios_to_reference` names them)."""
    lines = []
    for r in rows:
        if r['head'] != reference and time_key in r:
            mem = r.get(memory_key)
            lines.append(f'  {r["head"]:<15} {r["size"]:>9}: '
                         f'{r[time_key]:.3f}  '
                         + (f'{mem:.3f}' if mem else '-'))
    return lines


def autocast(device: torch.device, amp: Optional[str]):
    if amp is None:
        return nullcontext()
    dtype = torch.bfloat16 if amp == 'bf16' else torch.float16
    return torch.autocast(device_type=device.type, dtype=dtype)


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


def _fmt(value, spec: str, scale: float = 1.0) -> str:
    return '-' if value is None else format(value * scale, spec)


def describe_row(row: Dict) -> str:
    mem = row.get('mem_fwd')
    return (f'{row["head"]:<22} {row["size"]:>9} {row["tokens"]:>6} tokens  '
            f'fwd {_fmt(row.get("fwd_ms"), ".1f")} ms  '
            f'fwd+bwd {_fmt(row.get("train_ms"), ".1f")} ms  '
            f'mem {_fmt(mem, ".1f", 2**-20)} MiB  {row["status"]}')


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


def results_table(rows: List[Dict], columns: Sequence[Tuple[str, str, str]],
                  notes: Callable[[Dict], List[str]] = lambda row: []
                  ) -> str:
    """A markdown table of ``rows``: one column per ``(key, title, kind)``
    (see :func:`cell`) and a note column (the row's status when it is not
    ``'ok'``, then ``notes(row)``)."""
    lines = ['| ' + ' | '.join(c[1] for c in columns) + ' | note |',
             '|' + '---|' * (len(columns) + 1)]
    for row in rows:
        note = ([] if row['status'] == 'ok' else [row['status']]) + \
            notes(row)
        lines.append('| ' + ' | '.join(cell(row, k, f)
                                       for k, _, f in columns) +
                     f' | {" ".join(note)} |')
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


# ------------------------------------------------- shared by the benchmark tools
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
