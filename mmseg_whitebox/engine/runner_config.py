"""The config of a Runner that a tool or a library call runs: the file (or
model name) with ``--cfg-options``, mmseg's work-dir rule, the launcher,
the hook that makes every checkpoint load weights-only, the checkpoint
hook that writes them atomically, the logger hook whose test metrics
file only the main process writes, the hook that stops dataloader
workers when the run ends and, for a config that sets ``compile``, the
hook that compiles the segmentor; :func:`load_config` takes them from a
tool's common options; and the one Runner that tests a checkpoint
(:func:`build_test_runner`), for ``tools/test.py`` and the robustness
tools alike; the device set-up of a run (:func:`run_device`)."""
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

#: the hooks every run gets in ``custom_hooks`` where its config lacks
#: them: every checkpoint loads weights-only
#: (:class:`~mmseg_whitebox.engine.hooks.WeightsOnlyCheckpointHook`; a
#: config that inherits ``configs/_base_/default_runtime.py`` has it from
#: there, also for mmseg's own tools, which do not come here), and a run's
#: persistent dataloader workers are stopped when it ends
#: (:class:`~mmseg_whitebox.engine.hooks.ReleaseDataloaderWorkersHook`)
ADDED_HOOKS = ('WeightsOnlyCheckpointHook', 'ReleaseDataloaderWorkersHook')
#: compiles the segmentor's loss and inference when a config sets
#: ``compile``
#: (:class:`~mmseg_whitebox.engine.hooks.CompileHook`)
COMPILE_HOOK = 'CompileHook'
#: mmengine's default hooks that a project hook of the same arguments
#: replaces: (:class:`~mmseg_whitebox.engine.hooks.AtomicCheckpointHook`,
#: :class:`~mmseg_whitebox.engine.hooks.MainProcessLoggerHook`)
REPLACED_DEFAULT_HOOKS = {
    'checkpoint': ('CheckpointHook', 'AtomicCheckpointHook'),
    'logger': ('LoggerHook', 'MainProcessLoggerHook'),
}


#: how many Runner configs of each config name this process has made
_RUNS_OF: collections.Counter = collections.Counter()


def _name_each_run(cfg: Config, config: str) -> None:
    """mmengine names a run's logger, message hub and visualizer
    ``<config name>_<second it started>`` and gives a second Runner of the
    same config started within the same second the first one's (its log
    then goes to the first run's file). From its second run in a process
    on, a config's runs are named with their number
    (``<config name>-2_<second>``), unless the config names them."""
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

    The work dir is chosen as in mmseg: ``work_dir``, else the config's
    ``work_dir``, else ``./work_dirs/<config name>``. ``launcher`` is
    recorded; the device and the distributed set-up are made by the
    function that runs the config, within :func:`run_device` (training,
    testing, the noise sweep). The Runner formats the config's text once
    (:func:`~mmseg_whitebox.compat.format_config_text_once`);
    a config's second and later runs in a process get their own logger
    (:func:`_name_each_run`).
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
    """Replace mmengine's ``CheckpointHook`` and ``LoggerHook`` by the
    project's (:data:`REPLACED_DEFAULT_HOOKS`, same settings): a checkpoint
    is under its name only once complete and the previous one is removed
    only after that; a distributed test's metrics file is written once."""
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
    :func:`runner_config`) as ``tools/test.py`` does. The checkpoint and
    the work dir are checked once, here, before anything is built (a
    checkpoint URL is downloaded into torch's hub cache first, by every
    process: :func:`~mmseg_whitebox.utils.downloads.fetch_checkpoint`);
    ``prepare(cfg)``, if given, changes the config next (painting,
    test-time augmentation, a corruption transform); then the training
    settings are dropped and the test data's folder is checked."""
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
    """The device set-up of a training or test run of ``cfg`` (its
    ``launcher`` set), for the block that runs it: the device decided
    (:func:`~mmseg_whitebox.utils.device.resolve_device`: a
    ``ToolError`` before any work when it cannot be had), the GPUs
    hidden from this process for ``cpu``
    (:func:`~mmseg_whitebox.compat.cuda_hidden`), then
    :func:`~mmseg_whitebox.utils.distributed.setup_distributed`. Yields
    ``'cuda'`` or ``'cpu'``."""
    chosen = resolve_device(cfg.get('launcher', 'none'), device)
    with contextlib.ExitStack() as stack:
        if chosen == 'cpu':
            stack.enter_context(cuda_hidden())
        setup_distributed(cfg, chosen)
        yield chosen
