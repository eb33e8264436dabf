"""Runner hooks that keep a wrong checkpoint from becoming wrong numbers:
the checks of :mod:`mmseg_whitebox.utils.checkpoint_checks` at the moment
a Runner loads a checkpoint (``tools/test.py``, ``tools/noise_robustness.py``
and ``tools/train.py --resume``)."""
from __future__ import annotations

from typing import Any

from mmengine.hooks import Hook
from mmseg.registry import HOOKS

from mmseg_whitebox.utils.checkpoint_checks import (check_state_dict,
                                                    compare_state_dict,
                                                    state_dict_of)
from mmseg_whitebox.utils.tool_error import InputError


@HOOKS.register_module()
class CheckpointCheckHook(Hook):
    """:func:`check_state_dict` on every checkpoint a Runner loads (for
    evaluation: fine-tuning from a partial checkpoint is a training
    matter, so the training tool does not add it)."""

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
        ``--allow-nonfinite-weights`` say (``options``: their parsed
        arguments, or a dataclass with the same fields)."""
        return cls(options.allow_partial_checkpoint,
                   options.allow_nonfinite_weights,
                   '--allow-partial-checkpoint', '--allow-nonfinite-weights')

    def after_load_checkpoint(self, runner: Any, checkpoint: dict) -> None:
        model = runner.model
        source = f'checkpoint {runner.cfg.get("load_from")!r}'
        check_state_dict(model, state_dict_of(checkpoint), source,
                         self.allow_partial, self.allow_nonfinite,
                         self.partial_flag, self.nonfinite_flag)


@HOOKS.register_module()
class ResumeCheckHook(Hook):
    """``--resume``: the checkpoint resumed from must be of this model. A
    work dir reused for another config otherwise fails in mmengine's
    optimizer load (``loaded state dict has a different number of parameter
    groups``) after the weights were loaded partially."""

    priority = 'LOWEST'

    def after_load_checkpoint(self, runner: Any, checkpoint: dict) -> None:
        missing, unexpected, mismatched = compare_state_dict(
            runner.model, state_dict_of(checkpoint))
        if not (missing or unexpected or mismatched):
            return
        from mmengine.runner import find_latest_checkpoint
        source = runner.cfg.get('load_from') or find_latest_checkpoint(
            runner.work_dir)
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
