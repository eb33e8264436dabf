"""The memory the benchmarks measure (:func:`peak_memory`) and predict
(:func:`skipped`), and the analysis tools' one reader of ``/proc``
(:func:`proc_field`)."""
from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import gc
import math
from typing import (Any, Callable, Dict, Iterator, List, Optional, Sequence,
                    Tuple)

import torch


def proc_field(key: str, path: str = '/proc/self/status') -> Optional[str]:
    """The text after ``key:`` in a ``/proc`` file; None where the system
    has no such file or line."""
    try:
        with open(path) as f:
            for line in f:
                name, _, value = line.partition(':')
                if name.strip() == key:
                    return value.strip()
    except OSError:
        return None
    return None


def proc_bytes(key: str, path: str = '/proc/self/status') -> Optional[int]:
    """The ``kB`` figure ``key`` of a ``/proc`` file in bytes."""
    value = proc_field(key, path)
    return None if value is None else int(value.split()[0]) * 1024


def _reset_peak() -> None:
    """Reset ``VmHWM`` to the current resident set (Linux >= 4.0)."""
    with open('/proc/self/clear_refs', 'w') as f:
        f.write('5')


def _release_heap() -> None:
    """Return freed memory to the system, so the baseline RSS is lean."""
    gc.collect()
    name = ctypes.util.find_library('c')
    if name:
        try:
            ctypes.CDLL(name).malloc_trim(0)
        except (OSError, AttributeError):
            pass


@contextlib.contextmanager
def frozen_heap() -> Iterator[None]:
    """Within the block, the objects alive when it starts (modules,
    models) are frozen out of garbage collection, so the collection
    before every measurement scans only what the measurements made. The
    end unfreezes them, with what :func:`~mmseg_whitebox.cli.run_tool`
    froze. Not nestable."""
    gc.collect()
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


def cpu_peak_supported() -> bool:
    """Whether this system lets a process reset and read its peak RSS
    (Linux >= 4.0)."""
    if proc_bytes('VmHWM') is None:
        return False
    try:
        _reset_peak()
    except OSError:
        return False
    return True


def peak_memory(fn: Callable[[], Any],
                device: torch.device) -> Tuple[Optional[int], Any]:
    """``(bytes, result)``: the memory one call of ``fn`` needs at its peak
    beyond what was in use before it (``None`` where this cannot be
    measured), and what the call returned.

    On CUDA, ``max_memory_allocated``; on a CPU, the rise of the
    resident-set high-water mark (``VmHWM``) after freed heap is returned
    to the system: every page the call touched, the allocator's too."""
    if device.type == 'cuda':
        torch.cuda.synchronize(device)
        gc.collect()
        torch.cuda.empty_cache()
        before = torch.cuda.memory_allocated(device)
        torch.cuda.reset_peak_memory_stats(device)
        result = fn()
        torch.cuda.synchronize(device)
        peak = torch.cuda.max_memory_allocated(device)
        return int(peak - before), result
    if not cpu_peak_supported():
        return None, fn()
    _release_heap()
    before = proc_bytes('VmRSS')
    _reset_peak()
    result = fn()
    peak = proc_bytes('VmHWM')
    if before is None or peak is None:
        return None, result
    return max(0, peak - before), result


def available_memory(device: torch.device) -> Optional[int]:
    """Bytes free for a measurement: free GPU memory, or the system's
    ``MemAvailable``."""
    if device.type == 'cuda':
        free, _ = torch.cuda.mem_get_info(device)
        return int(free)
    return proc_bytes('MemAvailable', '/proc/meminfo')


def extrapolate_loglog(xs: Sequence[float], ys: Sequence[float],
                       x: float) -> Optional[float]:
    """``y`` at ``x`` on the power law through the last two points (None
    with fewer than two)."""
    pts = [(a, b) for a, b in zip(xs, ys) if a > 0 and b and b > 0]
    if len(pts) < 2 or pts[-1][0] == pts[-2][0]:
        return None
    (x0, y0), (x1, y1) = pts[-2], pts[-1]
    slope = math.log(y1 / y0) / math.log(x1 / x0)
    return y1 * (x / x1)**max(slope, 1.0)


def skipped(row: Dict, key: str, past: List[Dict], limit: Optional[int],
            note: str) -> bool:
    """Whether the memory ``key`` of ``row`` predicted from the smaller
    sizes in ``past`` exceeds ``limit`` bytes; if so, ``row['status']``
    is ``note`` and the GiB predicted."""
    predicted = extrapolate_loglog([r['tokens'] for r in past],
                                   [r.get(key) for r in past], row['tokens'])
    if limit and predicted and predicted > limit:
        row['status'] = f'{note} {predicted / 2**30:.1f} GiB'
        return True
    return False
