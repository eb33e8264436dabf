"""Training as ``tools/train.py`` trains, callable from Python
(:func:`train_model`: the whole tool after its arguments are parsed)."""
from __future__ import annotations

import os
import sys
from typing import Any, Optional

from mmseg_whitebox.engine.config_checks import (check_data_roots,
                                                 check_param_schedulers,
                                                 num_classes_problem)
from mmseg_whitebox.engine.hooks import (LAST_CHECKPOINT, NonFiniteCounter,
                                         ResumeCheckHook)
from mmseg_whitebox.engine.pretrained import (fetch_pretrained_weights,
                                              reported_errors)
from mmseg_whitebox.engine.runner_config import run_device
from mmseg_whitebox.utils.amp import amp_device_problem, enable_amp
from mmseg_whitebox.utils.atomic import stale_temporaries
from mmseg_whitebox.utils.downloads import fetch_checkpoint
from mmseg_whitebox.utils.input_checks import check_writable_folder
from mmseg_whitebox.utils.run_lock import lock_folder
from mmseg_whitebox.utils.tool_error import ToolError


def train_model(cfg: Any, resume: bool = False, amp: bool = False,
                amp_dtype: Optional[str] = None,
                auto_scale_lr: bool = False,
                device: Optional[str] = None) -> NonFiniteCounter:
    """Train the model of ``cfg`` (an mmengine ``Config`` with its
    ``work_dir`` and ``launcher`` set) as ``tools/train.py`` does.

    Pretrained weights are fetched and the config checked before the
    Runner is built, on every process, so that a problem stops every rank
    with the same :class:`~mmseg_whitebox.utils.tool_error.ToolError`.

    Args:
        resume: from the latest checkpoint in the work dir (or
            ``load_from``).
        amp, amp_dtype: train under autocast (``'float16'`` by default,
            or ``'bfloat16'``) with ``AmpOptimWrapper``.
        auto_scale_lr: turn on the config's ``auto_scale_lr`` (the
            learning rate scaled by the world batch over its
            ``base_batch_size``), as mmseg's ``--auto-scale-lr``.
        device: ``'cuda'`` or ``'cpu'`` (default: the GPU if one is
            visible, else the CPU for one process; see
            :func:`~mmseg_whitebox.engine.runner_config.run_device`).

    Returns:
        The counter of the non-finite values the run met (its
        ``summary()`` is the warning the tool prints).
    """
    with run_device(cfg, device):
        return _train(cfg, resume, amp, amp_dtype, auto_scale_lr)


def _train(cfg: Any, resume: bool, amp: bool, amp_dtype: Optional[str],
           auto_scale_lr: bool) -> NonFiniteCounter:
    if amp or amp_dtype:
        enable_amp(cfg, amp_dtype)
        problem = amp_device_problem(cfg.optim_wrapper.get('dtype', None)
                                     or 'float16')
        if problem:
            raise ToolError(problem)
    cfg.resume = resume
    if auto_scale_lr:
        enable_auto_scale_lr(cfg)
    check_data_roots(cfg, ('train_dataloader', 'val_dataloader'))
    check_param_schedulers(cfg)
    problem = num_classes_problem(cfg)
    if problem:
        raise ToolError(problem)
    check_writable_folder(cfg.work_dir, '--work-dir')
    # every process, before the Runner's first collective step
    fetch_pretrained_weights(cfg)
    fetch_checkpoint(cfg.get('load_from', None), 'load_from')
    # one run per work dir (rank 0 holds the lock for every rank)
    with lock_folder(cfg.work_dir, '--work-dir'):
        return _run(cfg, resume)


def enable_auto_scale_lr(cfg: Any) -> None:
    """Turn on ``cfg.auto_scale_lr``; a config without its
    ``base_batch_size`` is a :class:`ToolError` (mmengine would assert)."""
    scaling = cfg.get('auto_scale_lr', None)
    if not scaling or 'base_batch_size' not in scaling:
        raise ToolError(
            '--auto-scale-lr: the config sets no auto_scale_lr.'
            'base_batch_size (the world batch its learning rate is for); '
            'add auto_scale_lr = dict(enable=False, base_batch_size=N) to '
            'it, or pass --cfg-options auto_scale_lr.base_batch_size=N')
    cfg.auto_scale_lr = dict(scaling, enable=True)


def remove_cut_off_checkpoints(work_dir: str) -> None:
    """Delete, with a note on stderr, the temporary files of checkpoints
    (and of ``last_checkpoint``) whose write a killed run cut off.

    Every process calls it once the process group exists, before the
    checkpoint to resume from is looked for: rank 0 alone deletes (it
    holds the work dir's lock) and the others wait at a barrier, so that
    no rank races for the files or reads the folder while it changes.
    """
    from mmengine.dist import barrier, get_rank
    if get_rank() == 0:
        for path in stale_temporaries(work_dir, '.pth') + \
                stale_temporaries(work_dir, '', LAST_CHECKPOINT):
            try:
                os.remove(path)
            except FileNotFoundError:
                continue
            print(f'note: removing {path}, a checkpoint file whose write '
                  'was cut off', file=sys.stderr)
    barrier()


def _run(cfg: Any, resume: bool) -> NonFiniteCounter:
    from mmengine.runner import Runner
    from mmseg.registry import RUNNERS
    if 'runner_type' in cfg:
        runner = RUNNERS.build(cfg)
    else:
        runner = Runner.from_cfg(cfg)
    # the process group exists now; train() reads the checkpoint
    remove_cut_off_checkpoints(cfg.work_dir)
    if resume:  # refuse the checkpoint of another model
        runner.register_hook(ResumeCheckHook())
    counter = NonFiniteCounter()
    runner.register_hook(counter)
    with reported_errors(cfg):
        runner.train()
    return counter
