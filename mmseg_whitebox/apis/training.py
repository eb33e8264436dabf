"""Training as ``tools/train.py`` trains, callable from Python.

:func:`train_model` is the whole tool after its arguments are parsed: the
device (never the CPU for a launched run unless asked), the pretrained
weights each process needs (found or downloaded before any collective
step, so that a failure stops every process with the same line), the
checks of the config that would otherwise fail minutes into the run (or
as a bare mmengine error), one run per work dir (its lock), the removal
of checkpoint files a killed run cut off, mmengine's Runner with the
hooks that refuse another model's checkpoint on resume and count
non-finite values, and errors that name the input at fault.
"""
from __future__ import annotations

import os
import sys
from typing import Any, Optional

from mmseg_whitebox.engine.config_checks import (check_data_roots,
                                                 check_param_schedulers,
                                                 num_classes_problem,
                                                 reported_errors)
from mmseg_whitebox.engine.hooks import (LAST_CHECKPOINT, NonFiniteCounter,
                                         ResumeCheckHook)
from mmseg_whitebox.engine.pretrained import fetch_pretrained_weights
from mmseg_whitebox.utils.amp import amp_device_problem, enable_amp
from mmseg_whitebox.utils.atomic import stale_temporaries
from mmseg_whitebox.utils.distributed import run_device
from mmseg_whitebox.utils.input_checks import check_writable_folder
from mmseg_whitebox.utils.run_lock import lock_folder
from mmseg_whitebox.utils.tool_error import ToolError


def train_model(cfg: Any, resume: bool = False, amp: bool = False,
                amp_dtype: Optional[str] = None,
                device: Optional[str] = None) -> NonFiniteCounter:
    """Train the model of ``cfg`` (an mmengine ``Config`` with its
    ``work_dir`` and ``launcher`` set) as ``tools/train.py`` does:
    ``resume`` from the latest checkpoint in the work dir (or
    ``load_from``); ``amp`` or an ``amp_dtype`` (``'float16'``,
    ``'bfloat16'``) trains under autocast with ``AmpOptimWrapper``;
    ``device``: ``'cuda'`` or ``'cpu'`` (default: the GPU when one is
    visible, else the CPU for one process; a launched run without a GPU
    needs ``'cpu'``, see :func:`~mmseg_whitebox.utils.distributed.
    run_device`). Returns the counter of the non-finite values the run
    met (its ``summary()`` is the warning the tool prints).

    Raises :class:`~mmseg_whitebox.utils.tool_error.ToolError` for a
    device or config that cannot train (its message says what to
    change), before the Runner is built, on every process of a
    distributed run.
    """
    with run_device(cfg, device):
        return _train(cfg, resume, amp, amp_dtype)


def _train(cfg: Any, resume: bool, amp: bool,
           amp_dtype: Optional[str]) -> NonFiniteCounter:
    if amp or amp_dtype:
        enable_amp(cfg, amp_dtype)
        problem = amp_device_problem(cfg.optim_wrapper.get('dtype', None)
                                     or 'float16')
        if problem:
            raise ToolError(problem)
    cfg.resume = resume
    check_data_roots(cfg, ('train_dataloader', 'val_dataloader'))
    check_param_schedulers(cfg)
    problem = num_classes_problem(cfg)
    if problem:
        raise ToolError(problem)
    check_writable_folder(cfg.work_dir, '--work-dir')
    # every process, before the Runner's first collective step
    fetch_pretrained_weights(cfg)
    # one training run per work dir, from here to the end (a crash too)
    with lock_folder(cfg.work_dir, '--work-dir'):
        remove_cut_off_checkpoints(cfg.work_dir)
        return _run(cfg, resume)


def remove_cut_off_checkpoints(work_dir: str) -> None:
    """Delete, with a note on stderr, the temporary files of checkpoints
    (and of ``last_checkpoint``) whose write a killed run cut off. Only
    the holder of the work dir's lock may call it."""
    for path in stale_temporaries(work_dir, '.pth') + \
            stale_temporaries(work_dir, '', LAST_CHECKPOINT):
        print(f'note: removing {path}, a checkpoint file whose write was '
              'cut off', file=sys.stderr)
        os.remove(path)


def _run(cfg: Any, resume: bool) -> NonFiniteCounter:
    from mmengine.runner import Runner
    from mmseg.registry import RUNNERS
    if 'runner_type' in cfg:
        runner = RUNNERS.build(cfg)
    else:
        runner = Runner.from_cfg(cfg)
    if resume:  # refuse the checkpoint of another model
        runner.register_hook(ResumeCheckHook())
    counter = NonFiniteCounter()
    runner.register_hook(counter)
    with reported_errors(cfg):
        runner.train()
    return counter
