"""Gaussian parameter noise that always goes away again.

:class:`ParameterNoise` adds i.i.d. ``N(0, sigma^2)`` noise (``absolute``,
the CBSA paper's setting) or ``N(0, (sigma * rms(W))^2)`` (``relative``, to
compare heads whose weights live at different scales) to the selected
parameters, and on exit restores them bit for bit, also on an exception or
Ctrl-C. Noise is drawn on the CPU from the draw's seed, tensor by tensor in
the selection's order: the same on any device and every rank.
"""
from __future__ import annotations

import signal
import threading
from contextlib import contextmanager
from typing import Iterator, List, Sequence, Tuple

import torch
import torch.nn as nn

MODES = ('absolute', 'relative')


@contextmanager
def deferred_sigint() -> Iterator[None]:
    """Hold back Ctrl-C until the block is done (main thread only)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    received = []
    previous = signal.signal(signal.SIGINT,
                             lambda signum, frame: received.append(signum))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
        if received:
            raise KeyboardInterrupt


def noise_like(param: torch.Tensor,
               generator: torch.Generator) -> torch.Tensor:
    dtype = param.dtype if param.dtype == torch.float64 else torch.float32
    noise = torch.randn(param.shape, generator=generator, dtype=dtype)
    return noise.to(device=param.device, dtype=param.dtype)


class ParameterNoise:
    """Context manager perturbing ``(name, parameter)`` pairs in place
    with noise of std ``sigma`` (``mode``: see module docstring), drawn
    from ``seed``."""

    def __init__(self, parameters: Sequence[Tuple[str, nn.Parameter]],
                 sigma: float, mode: str = 'absolute', seed: int = 0) -> None:
        if mode not in MODES:
            raise ValueError(f'mode must be one of {MODES}, got {mode!r}')
        if not sigma >= 0:
            raise ValueError(f'sigma must be >= 0, got {sigma}')
        self.parameters = list(parameters)
        self.sigma = float(sigma)
        self.mode = mode
        self.seed = int(seed)
        self._saved: List[Tuple[nn.Parameter, torch.Tensor]] = []

    def __enter__(self) -> 'ParameterNoise':
        with torch.no_grad():
            self._saved = [(p, p.detach().clone()) for _, p in self.parameters]
            try:
                generator = torch.Generator(device='cpu')
                generator.manual_seed(self.seed)
                for _, p in self.parameters:
                    scale = self.sigma
                    if self.mode == 'relative':
                        scale *= float(
                            p.detach().double().pow(2).mean().sqrt())
                    p.add_(noise_like(p, generator) * scale)
            except BaseException:
                self.restore()
                raise
        return self

    def restore(self) -> None:
        """Copy the saved originals back (bit-exact)."""
        with deferred_sigint(), torch.no_grad():
            for p, saved in self._saved:
                p.copy_(saved)
        self._saved = []

    def __exit__(self, *exc) -> bool:
        self.restore()
        return False
