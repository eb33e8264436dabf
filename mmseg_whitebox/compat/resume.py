"""``--resume`` at iteration k advances the data sampler by k batches
instead of loading them, and the run stays bitwise equal to the
uninterrupted one (mmengine 0.10.7 and onedl-mmengine 0.10.12 checked).

*What it patches.* ``mmengine.runner.loops._InfiniteDataloaderIterator``
becomes :class:`ResumableDataIterator`; on mmengine 0.10.7, whose loop has
no ``skip_iter``, ``IterBasedTrainLoop.run`` is wrapped so the ``next``
calls of its replay cost nothing (:func:`_run_skipping`).

*Why.* mmengine 0.10.7 resumes by loading and discarding k batches per
rank; onedl-mmengine skips them in the sampler but draws the DataLoader's
seed after the resume restored torch's generator, and restarts the data
workers from their seeds: either way the resumed run differs.

*What it does.* An ``InfiniteSampler``'s index stream restarts k x batch
size indices on (no data read); the DataLoader iterator is created at the
first batch without moving torch's generator; each batch carries its
worker's random state, so a resumed iterator starts its workers where the
uninterrupted run's were (batch j comes from worker j mod
``num_workers``). Other samplers are replayed as mmengine does.
"""
from __future__ import annotations

import functools
import itertools
import logging
import random
import time
from typing import Any, Callable, Dict, List, Optional

import numpy as np
import torch
from torch.utils.data import BatchSampler
from torch.utils.data._utils.pin_memory import pin_memory

State = Dict[str, Any]


def process_random_state() -> State:
    """This process's CPU random states: Python's ``random``, numpy's
    global generator and torch's CPU generator (a data worker's, or with
    CUDA's the training process's: ``RNGStateCheckpointHook``)."""
    return {'python': random.getstate(), 'numpy': np.random.get_state(),
            'torch': torch.get_rng_state()}


def set_process_random_state(state: State) -> None:
    """Set the states :func:`process_random_state` returned (a torch state
    loaded onto a GPU is moved back: the generator takes a CPU tensor)."""
    random.setstate(state['python'])
    np.random.set_state(state['numpy'])
    torch.set_rng_state(state['torch'].cpu())


def _log(message: str) -> None:
    from mmengine.logging import print_log
    print_log(message, logger='current', level=logging.WARNING)


def seeded_worker_state(init_fn: Any, worker_id: int) -> Optional[State]:
    """The random state worker ``worker_id`` starts from when ``init_fn``
    is mmengine's ``worker_init_fn`` (which seeds Python, numpy and torch
    with ``num_workers * rank + worker_id + seed``), computed without
    touching this process's generators; None for another ``init_fn``."""
    from mmengine.dataset import worker_init_fn
    if not (isinstance(init_fn, functools.partial) and
            init_fn.func is worker_init_fn and not init_fn.args):
        return None
    kw = init_fn.keywords
    seed = kw['num_workers'] * kw['rank'] + worker_id + kw['seed']
    return {'python': random.Random(seed).getstate(),
            'numpy': np.random.RandomState(seed).get_state(),
            'torch': torch.Generator().manual_seed(seed).get_state()}


class _WithRandomState:
    """A worker's batch with the worker's random state after making it."""

    def __init__(self, batch: Any, state: State) -> None:
        self.batch, self.state = batch, state

    def pin_memory(self, *args: Any) -> '_WithRandomState':
        return _WithRandomState(pin_memory(self.batch, *args), self.state)


class _CollateWithRandomState:
    """The loader's ``collate_fn`` in a worker, its state attached."""

    def __init__(self, collate_fn: Any) -> None:
        self.collate_fn = collate_fn

    def __call__(self, samples: Any) -> _WithRandomState:
        return _WithRandomState(self.collate_fn(samples),
                                process_random_state())


class _WorkerInit:
    """The loader's ``worker_init_fn``, then the worker's saved state."""

    def __init__(self, init_fn: Any, states: Optional[List]) -> None:
        self.init_fn, self.states = init_fn, states

    def __call__(self, worker_id: int) -> None:
        if self.init_fn is not None:
            self.init_fn(worker_id)
        if self.states and self.states[worker_id] is not None:
            set_process_random_state(self.states[worker_id])


def _iter_keeping_torch_state(loader: Any) -> Any:
    """``iter(loader)``, torch's generator left as it was: the
    DataLoader's base seed draw would otherwise move it."""
    state = torch.get_rng_state()
    try:
        return iter(loader)
    finally:
        torch.set_rng_state(state)


class ResumableDataIterator:
    """``IterBasedTrainLoop``'s infinite data iterator (module docstring):
    created lazily, skipped in the sampler, its workers' random states
    kept and restorable."""

    def __init__(self, dataloader: Any) -> None:
        self._dataloader = dataloader
        self._iterator: Any = None
        self._epoch = 0
        #: batches taken from the start of this rank's stream
        self.position = 0
        self._absorb = 0  # ``next`` calls of 0.10.7's replay left
        self._on_next: Optional[Callable[[], None]] = None
        self._start: Optional[int] = None  # where worker tracking began
        self._first: List = []  # each worker's state before its 1st batch
        self._after: Dict[int, State] = {}  # position -> worker's after
        self._pending: Optional[Dict[str, Any]] = None

    def __iter__(self) -> 'ResumableDataIterator':
        return self

    def __next__(self) -> Any:
        if self._absorb:
            self._absorb -= 1
            return None
        if self._on_next is not None:
            on_next, self._on_next = self._on_next, None
            on_next()
        return self._load()

    def before_next_batch(self, fn: Callable[[], None]) -> None:
        """Call ``fn`` right before the next batch to train is loaded:
        after a resume's skip (``RNGStateCheckpointHook`` restores the
        random states there, the point the uninterrupted run had
        reached)."""
        self._on_next = fn

    def _load(self) -> Any:
        self._ensure_iterator()
        try:
            data = next(self._iterator)
        except StopIteration:
            self._next_epoch()
            data = next(self._iterator)
        if isinstance(data, _WithRandomState):
            self._after[self.position] = data.state
            self._after.pop(self.position - self._dataloader.num_workers,
                            None)
            data = data.batch
        self.position += 1
        return data

    # ------------------------------------------------------------ skipping
    def skip_iter(self, num_iters: int) -> None:
        """Skip ``num_iters`` batches: in the sampler when it is
        mmengine's ``InfiniteSampler`` under torch's ``BatchSampler`` and
        no batch was taken yet, else by loading them (0.10.7's replay)."""
        if num_iters <= 0:
            return
        if self._iterator is None and self.position == 0 and \
                self._skip_in_sampler(num_iters):
            self.position = num_iters
            return
        _log(f'resume: the sampler cannot be advanced without data, so the '
             f'{num_iters} trained batches are loaded again')
        for _ in range(num_iters):
            self._load()

    def absorb_next(self, num: int) -> None:
        """Let the next ``num`` ``next`` calls return None (0.10.7's loop
        replays by ``next`` after :meth:`skip_iter` skipped)."""
        self._absorb = num

    def _skip_in_sampler(self, num_iters: int) -> bool:
        from mmengine.dataset import InfiniteSampler
        batch_sampler = getattr(self._dataloader, 'batch_sampler', None)
        sampler = getattr(batch_sampler, 'sampler', None)
        if type(batch_sampler) is not BatchSampler or \
                not isinstance(sampler, InfiniteSampler):
            return False
        count = num_iters * batch_sampler.batch_size
        if hasattr(sampler, 'skip'):  # onedl: from the start of the stream
            sampler.skip(count)
        else:
            sampler.indices = itertools.islice(sampler._indices_of_rank(),
                                               count, None)
        return True

    def _ensure_iterator(self) -> None:
        if self._iterator is not None:
            return
        loader = self._dataloader
        workers = loader.num_workers
        pending, self._pending = self._pending, None
        init_fn, collate_fn = loader.worker_init_fn, loader.collate_fn
        states = pending['workers'] if pending and \
            pending['position'] == self.position else None
        if workers and self.position and states is None and pending != {}:
            _log(f'data workers start from their seeds at batch '
                 f'{self.position}: no random state of them was restored '
                 '(a checkpoint saved with num_workers=0 or another number, '
                 'or without RNGStateCheckpointHook), so the random '
                 'transforms differ from the uninterrupted run\'s')
        if workers:
            loader.worker_init_fn = _WorkerInit(init_fn, states)
            loader.collate_fn = _CollateWithRandomState(collate_fn)
            self._first = states or [seeded_worker_state(init_fn, w)
                                     for w in range(workers)]
            self._start, self._after = self.position, {}
        try:
            self._iterator = _iter_keeping_torch_state(loader)
        finally:
            loader.worker_init_fn, loader.collate_fn = init_fn, collate_fn

    def _next_epoch(self) -> None:
        """mmengine's restart of a finite sampler (its warning and pause);
        workers' states are not tracked after it."""
        _log('Reach the end of the dataloader, it will be restarted and '
             'continue to iterate. It is recommended to use '
             '`mmengine.dataset.InfiniteSampler` to enable the dataloader '
             'to iterate infinitely.')
        self._epoch += 1
        sampler = getattr(self._dataloader, 'sampler', None)
        if not hasattr(sampler, 'set_epoch'):
            sampler = getattr(getattr(self._dataloader, 'batch_sampler',
                                      None), 'sampler', None)
        if hasattr(sampler, 'set_epoch'):
            sampler.set_epoch(self._epoch)
        time.sleep(2)  # mmengine's guard against a deadlock here
        self._start = None
        self._iterator = _iter_keeping_torch_state(self._dataloader)

    # ------------------------------------------------ workers' random state
    def worker_random_states(self) -> Optional[Dict[str, Any]]:
        """``{'position': p, 'workers': [...]}``: the state each of the next
        ``num_workers`` batches (p, p + 1, ...) is started from by its
        worker (None where unknown); None without workers or tracking."""
        if self._start is None or self._iterator is None:
            return None
        workers = self._dataloader.num_workers
        states = []
        for p in range(self.position, self.position + workers):
            states.append(self._after.get(p - workers)
                          if p - workers >= self._start
                          else self._first[p - self._start])
        return {'position': self.position, 'workers': states}

    def restore_worker_random_states(self, saved: Dict[str, Any]) -> None:
        """Start the workers of the iterator created at ``saved['position']``
        from ``saved['workers']`` (an iterator that replays from 0 makes
        the states itself and ignores them)."""
        workers = self._dataloader.num_workers
        if len(saved['workers']) != workers:
            _log(f'data workers\' random states not restored: saved by '
                 f'{len(saved["workers"])} workers, this run has {workers}')
            self._pending = {}  # said once
            return
        if any(state is None for state in saved['workers']):
            _log('data workers\' random states restored in part: the '
                 'checkpoint does not know every worker\'s seed')
        self._pending = saved


def _run_skipping(run: Any) -> Any:
    """mmengine 0.10.7's ``IterBasedTrainLoop.run``, its replay skipped in
    the sampler (:meth:`ResumableDataIterator.skip_iter`) and its ``next``
    calls absorbed."""
    @functools.wraps(run)
    def wrapper(self: Any) -> Any:
        iterator = self.dataloader_iterator
        if self._iter > 0 and isinstance(iterator, ResumableDataIterator):
            iterator.skip_iter(self._iter)
            iterator.absorb_next(self._iter)
        return run(self)
    wrapper.skips_in_sampler = True
    return wrapper


def runner_resumes(runner: Any) -> bool:
    """Whether ``runner`` resumes its training (``resume=True``). mmengine
    0.10.x keeps the flag only as the private ``Runner._resume``; a hook
    learns it here, not by reading the private name itself."""
    return bool(getattr(runner, '_resume', False))


def patch_resume_skip() -> bool:
    """Install :class:`ResumableDataIterator` (and, on mmengine 0.10.7,
    :func:`_run_skipping`). Returns True once applied."""
    from mmengine.runner import loops
    if loops._InfiniteDataloaderIterator is ResumableDataIterator:
        return True
    if not hasattr(loops._InfiniteDataloaderIterator, 'skip_iter') and \
            not getattr(loops.IterBasedTrainLoop.run, 'skips_in_sampler',
                        False):
        loops.IterBasedTrainLoop.run = _run_skipping(
            loops.IterBasedTrainLoop.run)
    loops._InfiniteDataloaderIterator = ResumableDataIterator
    return True
