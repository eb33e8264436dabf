"""The benchmarks' calls and their wall time (:func:`time_interleaved`)."""
from __future__ import annotations

import time
from contextlib import nullcontext
from typing import Any, Callable, Dict, List, Optional

import torch

from mmseg_whitebox.ops.precision import autocast_problem
from mmseg_whitebox.utils.amp import AMP_DTYPES
from mmseg_whitebox.utils.tool_error import InputError

#: seconds past which a call is past any warm-up or cache effect
SLOW_CALL = 1.0


def synchronize(device: torch.device) -> None:
    if device.type == 'cuda':
        torch.cuda.synchronize(device)


def timed_call(fn: Callable[[], object], device: torch.device,
               clock: Callable[[], float] = time.perf_counter) -> float:
    """Seconds of one call of ``fn``, its queued GPU work included."""
    start = clock()
    fn()
    synchronize(device)
    return clock() - start


def autocast(device: torch.device, amp: Optional[str]):
    """``torch.autocast`` in ``amp`` (``'float16'`` or ``'bfloat16'``, as
    ``--amp-dtype``), or nothing."""
    if amp is None:
        return nullcontext()
    if amp not in AMP_DTYPES:
        raise ValueError(f'amp must be one of {AMP_DTYPES}, got {amp!r}')
    dtype = getattr(torch, amp)
    problem = autocast_problem(device.type, dtype)
    if problem:
        raise InputError(problem)
    return torch.autocast(device_type=device.type, dtype=dtype)


def inference_call(module: torch.nn.Module, x: Any, device: torch.device,
                   amp: Optional[str]) -> Callable[[], Any]:
    """One call of ``module(x)`` without gradients, under ``amp``."""

    def run():
        with torch.no_grad(), autocast(device, amp):
            return module(x)

    return run


def backward_call(module: torch.nn.Module, x: Any, device: torch.device,
                  amp: Optional[str]) -> Callable[[], None]:
    """Forward of ``module(x)`` in training mode and backward of its
    summed output(s), the gradients cleared after."""
    leaves = [t for t in list(module.parameters()) + list(
        x if isinstance(x, list) else [x]) if t.requires_grad]

    def run():
        module.train()
        try:
            with autocast(device, amp):
                out = module(x)
            outs = [out] if isinstance(out, torch.Tensor) else out
            sum(o.float().sum() for o in outs).backward()
        finally:
            module.eval()
            for t in leaves:
                t.grad = None

    return run


def time_interleaved(fns: Dict[str, Callable[[], object]],
                     device: torch.device,
                     repeats: int = 10,
                     warmup: int = 2,
                     max_seconds: Optional[float] = None,
                     settle: bool = True,
                     clock: Callable[[], float] = time.perf_counter
                     ) -> Dict[str, List[float]]:
    """Seconds of each timed call of every function in ``fns``.

    After up to ``warmup`` untimed calls each, the functions are called in
    ``repeats`` rounds, one timed call of each per round, so a change in
    machine load affects all alike. With ``settle``, each timed call
    (under a second) follows an untimed one of the same function: steady
    use, not the caches and allocator state another function left. With
    ``max_seconds``, a function stops being timed once that much was
    spent on it, after at least 3 calls (or one that alone took longer).
    ``clock`` reads seconds (a stand-in makes the schedule testable).
    """
    if repeats < 1:
        raise ValueError(f'repeats must be >= 1, got {repeats}')

    def call(fn: Callable[[], object]) -> float:
        return timed_call(fn, device, clock)

    for fn in fns.values():
        for _ in range(warmup):
            if call(fn) > SLOW_CALL:
                break
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
