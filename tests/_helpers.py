"""Helpers shared by the tests (import as ``from _helpers import ...``)."""
import os
import os.path as osp
import subprocess
import sys
from typing import List

from mmseg_whitebox.utils.demo_models import DEMO_MODELS, data_options

REPO = osp.dirname(osp.dirname(osp.abspath(__file__)))
DEMO_SEGMENTER = osp.join(
    REPO, 'configs', 'segmenter',
    'segmenter_vit-demo_mask_1xb8-800iter_synthade-128x128.py')


def run_tool(args: List[str], timeout: int = 600,
             check: bool = True) -> subprocess.CompletedProcess:
    """Run ``python <args>`` from the repository root, as a user would."""
    env = dict(os.environ, PYTHONUNBUFFERED='1')
    proc = subprocess.run([sys.executable] + args, cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=timeout)
    if check and proc.returncode != 0:
        raise AssertionError(
            f'{" ".join(args)} failed ({proc.returncode}):\n'
            f'{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}')
    return proc


def small_run_options(data_root: str, iters: int, work_dir: str = None,
                      batch_size: int = 2) -> List[str]:
    """--cfg-options that shrink a demo config to a few iterations on a
    tiny dataset, with no dataloader worker processes."""
    opts = ['randomness.seed=0',
            f'train_cfg.max_iters={iters}',
            f'train_cfg.val_interval={iters}',
            # no warm-up: the LinearLR factor stays 1
            'param_scheduler.0.start_factor=1.0',
            'param_scheduler.0.end=1',
            'param_scheduler.1.begin=1',
            f'param_scheduler.1.end={iters}',
            f'default_hooks.checkpoint.interval={iters}',
            'default_hooks.logger.interval=1',
            f'train_dataloader.batch_size={batch_size}']
    opts += data_options(data_root)
    for loader in ('train_dataloader', 'val_dataloader', 'test_dataloader'):
        opts += [f'{loader}.num_workers=0',
                 f'{loader}.persistent_workers=False']
    return opts


def demo_configs() -> dict:
    """The demo models (name -> config path relative to the repository
    root), as ``make demo`` defines them."""
    return dict(DEMO_MODELS)
