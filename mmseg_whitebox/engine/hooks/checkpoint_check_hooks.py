"""The checks of :mod:`mmseg_whitebox.utils.checkpoint_checks` at the
moment a Runner loads a checkpoint (testing, the noise sweep, ``--resume``)."""
from __future__ import annotations

import math
from typing import Any, Iterator, Tuple

from mmengine.hooks import Hook
from mmseg.registry import HOOKS

from mmseg_whitebox.utils.checkpoint_checks import (check_state_dict,
                                                    compare_state_dict,
                                                    state_dict_of)
from mmseg_whitebox.utils.tool_error import InputError


@HOOKS.register_module()
class CheckpointCheckHook(Hook):
    """:func:`check_state_dict` on every checkpoint a Runner loads for
    evaluation (not added for training: fine-tuning may load partially)."""

    priority = 'LOWEST'  # after hooks that rewrite the checkpoint (EMA)

    def __init__(self, allow_partial: bool = False,
                 allow_nonfinite: bool = False,
                 partial_flag: str = 'allow_partial=True',
                 nonfinite_flag: str = 'allow_nonfinite=True') -> None:
        self.allow_partial = allow_partial
        self.allow_nonfinite = allow_nonfinite
        self.partial_flag = partial_flag
        self.nonfinite_flag = nonfinite_flag

    @classmethod
    def from_options(cls, options: Any) -> 'CheckpointCheckHook':
        """The hook as the tools' ``--allow-partial-checkpoint`` and
        ``--allow-nonfinite-weights`` (``options``) say."""
        return cls(options.allow_partial_checkpoint,
                   options.allow_nonfinite_weights,
                   '--allow-partial-checkpoint', '--allow-nonfinite-weights')

    def after_load_checkpoint(self, runner: Any, checkpoint: dict) -> None:
        model = runner.model
        source = f'checkpoint {runner.cfg.get("load_from")!r}'
        check_state_dict(model, state_dict_of(checkpoint), source,
                         self.allow_partial, self.allow_nonfinite,
                         self.partial_flag, self.nonfinite_flag)


def _resumed_from(runner: Any) -> str:
    from mmengine.runner import find_latest_checkpoint
    return runner.cfg.get('load_from') or find_latest_checkpoint(
        runner.work_dir)


def _base_lrs(runner: Any, checkpoint: dict
              ) -> Iterator[Tuple[float, float]]:
    """Per parameter group: this run's base learning rate (after
    ``scale_lr``) and the checkpoint's (``initial_lr``, else ``lr``)."""
    wrapper, state = runner.optim_wrapper, checkpoint.get('optimizer', {})
    pairs = ([(w, state.get(name, {}))
              for name, w in wrapper.optim_wrappers.items()]
             if hasattr(wrapper, 'optim_wrappers') else [(wrapper, state)])
    for w, saved in pairs:
        for now, then in zip(w.optimizer.param_groups,
                             saved.get('param_groups', [])):
            yield (now.get('initial_lr', now['lr']),
                   then.get('initial_lr', then['lr']))


def check_scaled_lr(runner: Any, checkpoint: dict) -> None:
    """``--auto-scale-lr`` with ``--resume``: refuse a checkpoint whose
    learning rate is not the one scaled for this run's world batch
    (resuming would silently keep the checkpoint's, its optimizer
    state)."""
    scaling = getattr(runner, 'auto_scale_lr', None) or {}
    if not scaling.get('enable', False):
        return
    for new, old in _base_lrs(runner, checkpoint):
        if math.isclose(new, old, rel_tol=1e-6, abs_tol=0.0):
            continue
        loader = runner.train_dataloader  # what scale_lr reads
        batch = runner.world_size * loader.batch_size
        base = scaling['base_batch_size']
        raise InputError(
            f'--auto-scale-lr with --resume: {_resumed_from(runner)!r} was '
            f'trained at learning rate {old:.6g}, --auto-scale-lr sets '
            f'{new:.6g} for this run\'s world batch of {batch} '
            f'({runner.world_size} process(es) x batch '
            f'{loader.batch_size}, base_batch_size {base}), and resuming '
            'would keep the checkpoint\'s learning rate (its optimizer '
            'state). Resume with the world batch it was trained with '
            f'({batch * old / new:.6g} by its learning rate), or without '
            '--auto-scale-lr to go on at its learning rate')


@HOOKS.register_module()
class ResumeCheckHook(Hook):
    """``--resume``: the checkpoint must be of this model (a work dir
    reused for another config otherwise fails deep in the optimizer's
    load), and with ``--auto-scale-lr`` of this run's learning rate
    (:func:`check_scaled_lr`)."""

    priority = 'LOWEST'

    def after_load_checkpoint(self, runner: Any, checkpoint: dict) -> None:
        missing, unexpected, mismatched = compare_state_dict(
            runner.model, state_dict_of(checkpoint))
        if not (missing or unexpected or mismatched):
            check_scaled_lr(runner, checkpoint)
            return
        source = _resumed_from(runner)
        counts = ', '.join(f'{len(keys)} {what}' for keys, what in (
            (mismatched, 'of another shape'), (missing, 'missing'),
            (unexpected, 'not in the model')) if keys)
        first = (mismatched[0][0] if mismatched else
                 (missing or unexpected)[0])
        raise InputError(
            f'--resume: {source!r} is a checkpoint of another model '
            f'(weights {counts}, e.g. {first}): the work dir '
            f'{runner.work_dir!r} belongs to another config. Give this '
            'config its own --work-dir, or train without --resume')
