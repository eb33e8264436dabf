"""Train a segmentor; the same options as mmseg's ``tools/train.py``.

    python tools/train.py CONFIG [--work-dir DIR] [--resume]
        [--amp] [--amp-dtype float16|bfloat16]
        [--cfg-options k=v ...] [--launcher pytorch]

``--amp`` trains under float16 autocast with a dynamic loss scale (as
mmseg's); ``--amp-dtype bfloat16`` under bfloat16 (docs/training.md,
"Mixed precision").
"""
import argparse
import os
import sys

import mmseg_whitebox  # noqa: F401  (compat + registration first)
from mmseg_whitebox.cli import add_common_args, load_config, run_tool
from mmseg_whitebox.cli.run_checks import (check_param_schedulers,
                                           num_classes_problem)
from mmseg_whitebox.engine.hooks import (LAST_CHECKPOINT, NonFiniteCounter,
                                         ResumeCheckHook)
from mmseg_whitebox.utils.amp import AMP_DTYPES, amp_device_problem, enable_amp
from mmseg_whitebox.utils.atomic import stale_temporaries
from mmseg_whitebox.utils.input_checks import (check_data_roots,
                                               check_work_dir, reported_errors)
from mmseg_whitebox.utils.run_lock import lock_folder
from mmseg_whitebox.utils.tool_error import ToolError


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description='Train a segmentor')
    parser.add_argument('config', help='train config file path')
    parser.add_argument(
        '--resume',
        action='store_true',
        help='resume from the latest checkpoint in the work dir '
        '(or from load_from, if the config sets it)')
    parser.add_argument(
        '--amp',
        action='store_true',
        help='automatic mixed precision: float16 autocast with a dynamic '
        'loss scale, as mmseg\'s --amp (needs a GPU)')
    parser.add_argument(
        '--amp-dtype',
        choices=AMP_DTYPES,
        help='the autocast dtype of --amp (implies it): float16 (default) '
        'or bfloat16')
    add_common_args(parser)
    return parser.parse_args(argv)


def train(cfg, resume: bool) -> NonFiniteCounter:
    """Build the Runner of ``cfg`` and train; the counter of non-finite
    values it reported."""
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


def main(argv=None) -> None:
    args = parse_args(argv)
    cfg = load_config(args)

    if args.amp or args.amp_dtype:
        enable_amp(cfg, args.amp_dtype)
        problem = amp_device_problem(cfg.optim_wrapper.get('dtype', None)
                                     or 'float16')
        if problem:
            raise ToolError(problem)

    cfg.resume = args.resume
    check_data_roots(cfg, ('train_dataloader', 'val_dataloader'))
    check_param_schedulers(cfg)
    problem = num_classes_problem(cfg)
    if problem:
        raise ToolError(problem)
    check_work_dir(cfg.work_dir)
    # one training run per work dir, from here to the end (a crash too)
    with lock_folder(cfg.work_dir, '--work-dir'):
        for path in stale_temporaries(cfg.work_dir, '.pth') + \
                stale_temporaries(cfg.work_dir, '', LAST_CHECKPOINT):
            print(f'note: removing {path}, a checkpoint file whose write '
                  'was cut off', file=sys.stderr)
            os.remove(path)
        counter = train(cfg, args.resume)
    if counter.summary():  # of the last validation, repeated at the end
        print(f'WARNING: {counter.summary()}', file=sys.stderr)


if __name__ == '__main__':
    run_tool(main)
