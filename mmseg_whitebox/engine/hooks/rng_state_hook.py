"""Keep every process's random states in checkpoints, so that ``--resume``
continues a run exactly as if it had never stopped, on one process or on
many."""
from __future__ import annotations

import functools
from typing import Any, Dict, List, Optional, Tuple

import torch
from mmengine.dist import all_gather_object, get_rank, get_world_size
from mmengine.hooks import CheckpointHook, Hook
from mmseg.registry import HOOKS

from mmseg_whitebox.compat import (process_random_state, runner_resumes,
                                   set_process_random_state)

KEY = 'rng_state'
#: a process's state key for its data workers' states
WORKERS = 'data_workers'

RandomState = Dict[str, Any]


def capture_random_state() -> RandomState:
    """This process's random states: Python's ``random``, numpy's global
    generator, torch's CPU generator
    (:func:`~mmseg_whitebox.compat.process_random_state`) and, once CUDA
    is in use, the generator of this process's own (current) GPU."""
    state = process_random_state()
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state['cuda'] = torch.cuda.get_rng_state()
    return state


def restore_random_state(state: RandomState) -> None:
    """Set the states :func:`capture_random_state` returned. A checkpoint
    loaded onto a GPU has its tensors there; the generators take CPU
    tensors."""
    set_process_random_state(state)
    if state.get('cuda') is not None and torch.cuda.is_available():
        torch.cuda.set_rng_state(state['cuda'].cpu())


def _state_of_process(loop: Any) -> RandomState:
    """:func:`capture_random_state`, plus, under :data:`WORKERS`, the
    random states the training's data workers start their next batches
    from, where ``loop``'s data iterator keeps them (the compat layer's
    ``ResumableDataIterator``, with ``num_workers > 0``)."""
    state = capture_random_state()
    iterator = getattr(loop, 'dataloader_iterator', None)
    workers = getattr(iterator, 'worker_random_states', None)
    workers = workers() if callable(workers) else None
    if workers is not None:
        state[WORKERS] = workers
    return state


@HOOKS.register_module()
class RNGStateCheckpointHook(Hook):
    """Save every process's random states with every checkpoint and
    restore each process's own when a run resumes from one.

    mmengine's resume restores weights, optimizer, schedulers and the data
    order, but no random state: the model's own randomness (stochastic
    depth, dropout) would then draw other numbers than in an uninterrupted
    run. Saved, in ``checkpoint['rng_state']``: ``world_size`` and
    ``ranks``, one state per process (:func:`capture_random_state`:
    Python, numpy, torch CPU, the process's GPU).

    *When they are taken.* mmengine 0.10.7 calls ``save_checkpoint`` (and
    so ``before_save_checkpoint``) on rank 0 alone, so the other ranks'
    states are gathered before: in ``after_train_iter`` /
    ``after_train_epoch`` (this hook runs before the ``CheckpointHook``s),
    on every rank, when a checkpoint hook of the runner will save then
    (its own interval, ``save_begin`` and ``save_last``). A checkpoint
    saved at another moment (``save_best``, after validation) holds rank
    0's state only; resuming from it warns for the other ranks.

    *When they are restored.* On resume, mmengine's loop skips the
    batches already trained (the compat layer's ``ResumableDataIterator``
    advances the sampler without loading them; a sampler it cannot
    advance is replayed by loading, as mmengine 0.10.7 does). The states
    are restored after that skip, right before the first batch to train
    is loaded: the point the uninterrupted run had reached when it saved.
    Validation, which draws a seed from torch's generator for its data
    loader, leaves the training's random states as they were (they are
    put back after it), so a run validated at a checkpoint resumes
    exactly too.

    *Data workers.* With ``num_workers > 0`` the data pipeline's random
    transforms draw in the workers. Each process's state then also holds,
    under ``data_workers``, the state each worker starts the next batch it
    makes from (``ResumableDataIterator.worker_random_states``); on resume
    the workers start from them. A run resumed with another number of
    workers keeps the workers' seeds, with a warning.

    *Another number of processes.* A checkpoint saved by another number of
    processes than the resuming run has restores nothing, with a warning:
    the ranks would take other data anyway (the sampler splits the data
    by the number of processes), so the run cannot continue as the
    uninterrupted one; it continues from the config's seed.

    Loading weights without resuming (``load_from``, tests) restores
    nothing.
    """

    priority = 'NORMAL'  # before CheckpointHook (VERY_LOW) and
    # WeightsOnlyCheckpointHook (LOWEST)

    def __init__(self) -> None:
        #: ((epoch, iter), every rank's state) gathered for the next save
        self._gathered: Optional[Tuple[Tuple[int, int],
                                       List[RandomState]]] = None
        #: the training's states while validation runs
        self._outside_val: Optional[RandomState] = None
        #: this rank's state from the checkpoint, until it is restored
        self._pending: Optional[RandomState] = None
        #: the training loop, from ``before_train`` on
        self._loop: Any = None

    # ------------------------------------------------------------ saving
    def after_train_iter(self, runner: Any, batch_idx: int,
                         data_batch: Any = None,
                         outputs: Any = None) -> None:
        if get_world_size() > 1 and self._saves(runner, by_epoch=False):
            self._gather(runner)

    def after_train_epoch(self, runner: Any) -> None:
        if get_world_size() > 1 and self._saves(runner, by_epoch=True):
            self._gather(runner)

    @staticmethod
    def _saves(runner: Any, by_epoch: bool) -> bool:
        """Whether a checkpoint hook of ``runner`` saves in this
        ``after_train_epoch`` (``by_epoch``) or ``after_train_iter``: the
        conditions of mmengine's ``CheckpointHook``, with its settings."""
        for hook in runner.hooks:
            if not isinstance(hook, CheckpointHook) or \
                    hook.by_epoch != by_epoch:
                continue
            if by_epoch:
                due = hook.every_n_epochs(runner, hook.interval,
                                          hook.save_begin) or (
                    hook.save_last and hook.is_last_train_epoch(runner))
            else:
                due = hook.every_n_train_iters(runner, hook.interval,
                                               hook.save_begin) or (
                    hook.save_last and hook.is_last_train_iter(runner))
            if due:
                return True
        return False

    def _gather(self, runner: Any) -> None:
        states = all_gather_object(_state_of_process(self._loop))
        self._gathered = ((runner.epoch, runner.iter), states) \
            if get_rank() == 0 else None

    def before_save_checkpoint(self, runner: Any,
                               checkpoint: Dict[str, Any]) -> None:
        world_size = get_world_size()
        if world_size == 1:
            ranks = [_state_of_process(self._loop)]
        elif self._gathered and \
                self._gathered[0] == (runner.epoch, runner.iter):
            ranks = self._gathered[1]
        else:  # a save no training step announced (save_best)
            ranks = [_state_of_process(self._loop)] + [None] * (world_size - 1)
        checkpoint[KEY] = dict(world_size=world_size, ranks=ranks)

    # ---------------------------------------------------------- restoring
    def after_load_checkpoint(self, runner: Any,
                              checkpoint: Dict[str, Any]) -> None:
        self._pending = None
        saved = checkpoint.get(KEY)
        if not runner_resumes(runner) or not saved:
            return
        ranks, saved_world = saved['ranks'], saved['world_size']
        world_size = get_world_size()
        if saved_world != world_size:
            runner.logger.warning(
                f'random states not restored: the checkpoint was saved by '
                f'{saved_world} process(es) and this run has {world_size}; '
                'the run goes on from the seed of its config, not as the '
                'uninterrupted run would')
            return
        missing = [r for r, state in enumerate(ranks) if state is None]
        if missing:
            runner.logger.warning(
                f'the checkpoint holds no random state of rank(s) {missing} '
                '(saved outside a training step, e.g. by save_best): those '
                'ranks go on from the seed of the config')
        self._pending = ranks[get_rank()]

    def before_train(self, runner: Any) -> None:
        self._loop = loop = runner.train_loop
        state, self._pending = self._pending, None
        if state is None:
            return
        iterator = getattr(loop, 'dataloader_iterator', None)
        replayed = getattr(loop, 'iter', 0)
        workers = state.get(WORKERS)
        restore = getattr(iterator, 'restore_worker_random_states', None)
        if workers is not None and restore is not None:
            restore(workers)
        elif workers is not None:
            runner.logger.warning(
                'data workers\' random states not restored: this loop\'s '
                'data iterator cannot start its workers from them')
        before_next_batch = getattr(iterator, 'before_next_batch', None)
        if before_next_batch is None or replayed == 0:  # epoch-based
            restore_random_state(state)
        else:
            before_next_batch(functools.partial(restore_random_state, state))

    # --------------------------------------------------------- validation
    def before_val(self, runner: Any) -> None:
        self._outside_val = capture_random_state()

    def after_val(self, runner: Any) -> None:
        if self._outside_val is not None:
            restore_random_state(self._outside_val)
            self._outside_val = None
