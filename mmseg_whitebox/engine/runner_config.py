"""The config of a Runner that a tool or a library call runs
(:func:`runner_config`, :func:`load_config`: the config, mmseg's work-dir
rule, the launcher and the project's hooks), the Runner that tests a
checkpoint (:func:`build_test_runner`) and a run's device set-up
(:func:`run_device`)."""
from __future__ import annotations

import argparse
import collections
import contextlib
import os
import os.path as osp
from typing import Any, Callable, Iterator, Optional

from mmengine.config import Config

from mmseg_whitebox.compat import cuda_hidden, format_config_text_once
from mmseg_whitebox.utils.checkpoint_checks import check_checkpoint
from mmseg_whitebox.utils.device import resolve_device
from mmseg_whitebox.utils.distributed import setup_distributed
from mmseg_whitebox.utils.downloads import fetch_checkpoint
from mmseg_whitebox.utils.input_checks import check_writable_folder

from .config import read_config
from .config_checks import check_data_roots

#: the hooks every run gets in ``custom_hooks`` where its config lacks them
#: (``configs/_base_/default_runtime.py`` also lists the first, for mmseg's
#: own tools, which do not come here)
ADDED_HOOKS = ('WeightsOnlyCheckpointHook', 'ReleaseDataloaderWorkersHook')
#: added when a config sets ``compile``
COMPILE_HOOK = 'CompileHook'
#: mmengine's default hooks -> the project hook (same arguments) replacing it
REPLACED_DEFAULT_HOOKS = {
    'checkpoint': ('CheckpointHook', 'AtomicCheckpointHook'),
    'logger': ('LoggerHook', 'MainProcessLoggerHook'),
}


_RUNS_OF: collections.Counter = collections.Counter()


def _name_each_run(cfg: Config, config: str) -> None:
    """Name a config's second and later runs in this process
    ``<config name>-<n>`` (unless the config names them): mmengine names
    a run ``<config name>_<second>``, so a second run started within the
    same second would share the first one's logger and log file."""
    if cfg.get('experiment_name', None) is not None:
        return
    name = osp.splitext(osp.basename(cfg.filename or config))[0]
    _RUNS_OF[name] += 1
    if _RUNS_OF[name] > 1:
        cfg.experiment_name = f'{name}-{_RUNS_OF[name]}'


def runner_config(config: str, cfg_options: Optional[dict] = None,
                  work_dir: Optional[str] = None,
                  launcher: str = 'none') -> Config:
    """Read ``config`` (a file or a model name) for a Runner.

    The work dir is chosen as in mmseg: ``work_dir``, else the config's,
    else ``./work_dirs/<config name>``. ``launcher`` is only recorded: the
    device and distributed set-up are :func:`run_device`'s.
    """
    format_config_text_once()
    cfg = read_config(config, cfg_options)
    cfg.launcher = launcher
    if work_dir is not None:
        cfg.work_dir = work_dir
    elif cfg.get('work_dir', None) is None:
        cfg.work_dir = osp.join('./work_dirs',
                                osp.splitext(osp.basename(config))[0])
    _name_each_run(cfg, config)
    for hook in ADDED_HOOKS:
        ensure_custom_hook(cfg, hook)
    if cfg.get('compile', None):
        ensure_custom_hook(cfg, COMPILE_HOOK)
    replace_default_hooks(cfg)
    return cfg


def load_config(args: argparse.Namespace) -> Config:
    """The Runner config of ``args.config`` with a tool's common options
    (``--cfg-options``, ``--work-dir``, ``--launcher``, ``--local-rank``)
    applied."""
    if 'LOCAL_RANK' not in os.environ:
        os.environ['LOCAL_RANK'] = str(getattr(args, 'local_rank', 0))
    return runner_config(args.config, args.cfg_options, args.work_dir,
                         args.launcher)


def ensure_custom_hook(cfg: Config, hook_type: str) -> None:
    """Add ``dict(type=hook_type)`` to the config's ``custom_hooks``
    unless it is there (with or without the ``mmseg.`` scope)."""
    hooks = list(cfg.get('custom_hooks', None) or [])
    if not any(h.get('type') in (hook_type, f'mmseg.{hook_type}')
               for h in hooks):
        hooks.append(dict(type=hook_type))
        cfg.custom_hooks = hooks


def replace_default_hooks(cfg: Config) -> None:
    """Replace mmengine's default hooks by the project's
    (:data:`REPLACED_DEFAULT_HOOKS`), keeping their settings."""
    hooks = cfg.get('default_hooks', None) or {}
    for key, (plain, replacement) in REPLACED_DEFAULT_HOOKS.items():
        hook = hooks.get(key, None)
        if isinstance(hook, dict) and \
                hook.get('type') in (plain, f'mmengine.{plain}'):
            hook['type'] = replacement


def drop_training(cfg: Config) -> None:
    """Remove the training settings of a config that is only tested.

    mmseg's visualization hook asks the runner for its iteration, and
    mmengine answers by building the training loop, dataset included: a
    test would fail on a training folder it never reads."""
    for key in ('train_dataloader', 'train_cfg', 'optim_wrapper',
                'param_scheduler'):
        cfg[key] = None


def build_test_runner(cfg: Config, checkpoint: str,
                      prepare: Optional[Callable[[Config], None]] = None
                      ) -> Any:
    """The Runner that tests ``checkpoint`` with ``cfg`` (a
    :func:`runner_config`) as ``tools/test.py`` does: the checkpoint (a
    URL fetched first) and the work dir checked before anything is built,
    then ``prepare(cfg)`` if given (painting, TTA, a corruption), the
    training settings dropped and the test data's folder checked."""
    from mmengine.runner import Runner
    check_checkpoint(checkpoint)
    check_writable_folder(cfg.work_dir, '--work-dir')
    fetched = fetch_checkpoint(checkpoint, 'checkpoint')
    if fetched != checkpoint:  # a URL's file, now in the hub cache
        check_checkpoint(fetched)
    cfg.load_from = checkpoint
    if prepare is not None:
        prepare(cfg)
    drop_training(cfg)
    check_data_roots(cfg, ('test_dataloader', ))
    return Runner.from_cfg(cfg)


@contextlib.contextmanager
def run_device(cfg: Any, device: Optional[str] = None) -> Iterator[str]:
    """For the block that runs ``cfg`` (its ``launcher`` set): the device
    decided (:func:`~mmseg_whitebox.utils.device.resolve_device`), the
    GPUs hidden for ``cpu``, then
    :func:`~mmseg_whitebox.utils.distributed.setup_distributed`. Yields
    ``'cuda'`` or ``'cpu'``."""
    chosen = resolve_device(cfg.get('launcher', 'none'), device)
    with contextlib.ExitStack() as stack:
        if chosen == 'cpu':
            stack.enter_context(cuda_hidden())
        setup_distributed(cfg, chosen)
        yield chosen
