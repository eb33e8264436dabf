"""The config of a tool's Runner, from its common options (see
:func:`mmseg_whitebox.apis.runner_config.runner_config`)."""
from __future__ import annotations

import argparse
import os

from mmengine.config import Config

from mmseg_whitebox.apis.runner_config import runner_config


def load_config(args: argparse.Namespace) -> Config:
    """The Runner config of ``args.config`` with the common options
    (``--cfg-options``, ``--work-dir``, ``--launcher``, ``--local-rank``)
    applied."""
    if 'LOCAL_RANK' not in os.environ:
        os.environ['LOCAL_RANK'] = str(getattr(args, 'local_rank', 0))
    return runner_config(args.config, args.cfg_options, args.work_dir,
                         args.launcher)
