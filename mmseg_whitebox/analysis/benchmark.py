"""Measuring decoders: latency, peak memory and scaling slopes.

The pieces behind ``tools/analysis_tools/benchmark_decoders.py``, usable on
their own:

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
  least squares on log-log axes (1: linear, 2: quadratic).
"""
from __future__ import annotations

import ctypes
import ctypes.util
import gc
import math
import time
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import torch


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
