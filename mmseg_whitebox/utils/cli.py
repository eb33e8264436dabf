"""Argument and config handling shared by the scripts in ``tools/``.

They accept the same options as mmseg's own ``tools/train.py`` and
``tools/test.py``; the logic lives here once so every tool resolves configs,
work dirs and launchers the same way.
"""
from __future__ import annotations

import argparse
import atexit
import contextlib
import os
import os.path as osp
import sys
from typing import (Any, Callable, Iterable, Iterator, NoReturn, Optional,
                    Tuple)

from mmengine.config import Config

from .checkpoint_checks import CheckpointCheckHook, check_checkpoint_file
from .distributed import setup_distributed
from .errors import report, take_debug_flag
from .input_checks import (CfgOptionsAction, check_config_file,
                           check_config_values)
from .model_index import config_path
from .tool_error import BAD_INPUT, ToolError

HOOK_TYPE = 'WeightsOnlyCheckpointHook'

#: exit status of a tool stopped with Ctrl-C (128 + SIGINT, as shells say)
INTERRUPTED = 130


def run_tool(main: Callable[..., Any], argv: Optional[list] = None) -> Any:
    """Run a tool's ``main(argv)``; a :class:`ToolError`, or another error a
    user can cause (:mod:`mmseg_whitebox.utils.errors`), becomes one clear
    message on stderr and exit status 2 (with the traceback too under
    ``--debug``). Every script in ``tools/`` ends with ``run_tool(main)``.

    A process group the tool started (``--launcher pytorch``) is destroyed
    before the process exits. A worker of a distributed run then leaves
    through :func:`exit_distributed_worker`, without the interpreter's
    final teardown: gloo's worker threads can still be releasing tensors
    at that point, and one that waits for the GIL while the interpreter
    finalises aborts the whole rank (SIGABRT, "terminate called without
    an active exception"; pytorch/pytorch#190489)."""
    argv = take_debug_flag(argv)
    try:
        result, status = main(argv), 0
    except Exception as exc:  # bad input: one line; a bug: re-raised
        prog = osp.basename(sys.argv[0]) if sys.argv and sys.argv[0] else ''
        if not report(prog, exc):
            raise
        result, status = None, BAD_INPUT
    finally:
        # also when another exception propagates (its traceback follows)
        world_size = end_process_group()
    if world_size > 1:
        exit_distributed_worker(status)
    if status:
        sys.exit(status)
    return result


@contextlib.contextmanager
def resumable(out_dir: str, what: str,
              on_interrupt: Callable[[], Any] = lambda: None
              ) -> Iterator[None]:
    """Ctrl-C in the block of a tool that saves as it goes: call
    ``on_interrupt`` (e.g. plot what is finished), say where the finished
    ``what`` are and how to continue, and exit with :data:`INTERRUPTED`
    instead of a traceback."""
    try:
        yield
    except KeyboardInterrupt:
        on_interrupt()
        print(f'\ninterrupted: finished {what} are saved in {out_dir}; '
              'rerun with --resume to continue', file=sys.stderr)
        raise SystemExit(INTERRUPTED) from None


def end_process_group() -> int:
    """Destroy the default process group, if one was initialised; its
    world size (0 if there was none)."""
    import torch.distributed as dist
    if not (dist.is_available() and dist.is_initialized()):
        return 0
    world_size = dist.get_world_size()
    dist.destroy_process_group()
    return world_size


def exit_distributed_worker(status: int) -> NoReturn:
    """End a distributed worker with ``status`` as a normal exit would --
    exit handlers run (logging's included), stdout and stderr flushed --
    but without the interpreter's finalisation (see :func:`run_tool`)."""
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (AttributeError, OSError, ValueError):
            pass  # closed or replaced streams: nothing left to flush
    os._exit(status)


def tool_parser(doc: str) -> argparse.ArgumentParser:
    """The argument parser of a tool whose module docstring ``doc`` is its
    help: the first paragraph as the description, the rest (usage
    examples, outputs) as the epilog, kept as written."""
    return argparse.ArgumentParser(
        description=doc.split('\n\n')[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=doc.split('\n\n', 1)[1] if '\n\n' in doc else None)


def add_cfg_options_arg(parser: argparse.ArgumentParser) -> None:
    """``--cfg-options key=value ...`` (read by :func:`read_config`)."""
    parser.add_argument(
        '--cfg-options',
        nargs='+',
        action=CfgOptionsAction,
        help='override config settings, key=value pairs merged into the '
        'config, e.g. train_cfg.max_iters=100 model.decode_head.num_classes'
        '=19; lists as key="[a,b]" or key=a,b (quotes needed, no spaces)')


def add_checkpoint_check_args(parser: argparse.ArgumentParser,
                              verb: str = 'evaluate') -> None:
    """``--allow-partial-checkpoint`` and ``--allow-nonfinite-weights``: the
    checkpoint problems a tool refuses unless told (see
    :func:`checkpoint_check_hook`); ``verb``: what the tool does with it."""
    parser.add_argument(
        '--allow-partial-checkpoint', action='store_true',
        help='load a checkpoint whose keys or shapes do not all match the '
        'model (the rest keep their initialisation) instead of refusing it')
    parser.add_argument(
        '--allow-nonfinite-weights', action='store_true',
        help=f'{verb} a checkpoint with NaN/Inf weights instead of refusing '
        'it')


def checkpoint_check_hook(args: argparse.Namespace) -> Any:
    """The Runner hook that checks the loaded checkpoint as the options of
    :func:`add_checkpoint_check_args` say."""
    return CheckpointCheckHook(
        args.allow_partial_checkpoint, args.allow_nonfinite_weights,
        '--allow-partial-checkpoint', '--allow-nonfinite-weights')


def add_common_args(parser: argparse.ArgumentParser) -> None:
    """``--work-dir``, ``--cfg-options``, ``--launcher``, ``--local-rank``."""
    parser.add_argument(
        '--work-dir',
        help='folder for logs, checkpoints and results '
        '(default: ./work_dirs/<config name>)')
    add_cfg_options_arg(parser)
    parser.add_argument(
        '--launcher',
        choices=['none', 'pytorch', 'slurm', 'mpi'],
        default='none',
        help='job launcher for distributed runs (dist_*.sh use pytorch)')
    # torch.distributed launchers pass --local-rank (or --local_rank)
    parser.add_argument('--local_rank', '--local-rank', type=int, default=0)


def load_config(args: argparse.Namespace) -> Config:
    """Read the config named by ``args.config`` and apply the common options.

    The work dir is chosen as in mmseg: ``--work-dir``, else the config's
    ``work_dir``, else ``./work_dirs/<config name>``. With a launcher other
    than ``none`` the distributed set-up is prepared for this machine (see
    :func:`mmseg_whitebox.utils.distributed.setup_distributed`).
    """
    if 'LOCAL_RANK' not in os.environ:
        os.environ['LOCAL_RANK'] = str(getattr(args, 'local_rank', 0))
    cfg = read_config(args.config, args.cfg_options)
    cfg.launcher = args.launcher
    if args.work_dir is not None:
        cfg.work_dir = args.work_dir
    elif cfg.get('work_dir', None) is None:
        cfg.work_dir = osp.join('./work_dirs',
                                osp.splitext(osp.basename(args.config))[0])
    ensure_weights_only_checkpoints(cfg)
    # after the config is complete: gloo and CPU processes without CUDA
    setup_distributed(cfg)
    return cfg


def read_config(path: str, cfg_options: Optional[dict] = None) -> Config:
    """The config file ``path`` with ``--cfg-options`` merged in; ``path``
    may also name one of this project's configs (a model name, see
    :func:`mmseg_whitebox.apis.config_path`). A missing, empty or
    unparseable file and impossible settings are a :class:`ToolError`
    (:mod:`~mmseg_whitebox.utils.input_checks`). (:func:`load_config` adds
    what running a Runner needs: work dir, launcher, checkpoint hook.)"""
    if not osp.exists(path):
        try:
            path = config_path(path)
        except FileNotFoundError as exc:
            raise ToolError(f'config file {path!r} does not exist '
                            f'({exc})') from None
    check_config_file(path)
    cfg = Config.fromfile(path)
    if cfg_options:
        cfg.merge_from_dict(cfg_options)
    check_config_values(cfg)
    return cfg


def ensure_weights_only_checkpoints(cfg: Config) -> None:
    """Add :class:`WeightsOnlyCheckpointHook` to configs that lack it (e.g.
    mmseg's own configs), so every checkpoint a tool writes loads
    weights-only."""
    hooks = list(cfg.get('custom_hooks', None) or [])
    if not any(h.get('type') in (HOOK_TYPE, f'mmseg.{HOOK_TYPE}')
               for h in hooks):
        hooks.append(dict(type=HOOK_TYPE))
        cfg.custom_hooks = hooks


def dataset_configs(dataset: Any,
                    key: str = 'dataset') -> Iterable[Tuple[str, Any]]:
    """``(key, config)`` of every dataset config in ``dataset`` (at
    ``key``): the wrappers (ConcatDataset, RepeatDataset, ...) and the real
    datasets they wrap, e.g. ``('dataset.datasets.1', ...)``."""
    stack = [(key, dataset)]
    while stack:
        key, ds = stack.pop()
        yield key, ds
        if 'datasets' in ds:
            stack.extend((f'{key}.datasets.{i}', d)
                         for i, d in enumerate(ds['datasets']))
        elif 'dataset' in ds:
            stack.append((f'{key}.dataset', ds['dataset']))


def _dataloader_roots(cfg: Config, names: Iterable[str]):
    """``(data_root key, data_root)`` of the real datasets of loaders."""
    for name in names:
        loader = cfg.get(name, None)
        if not loader:
            continue
        for key, ds in dataset_configs(loader.get('dataset', {}),
                                       f'{name}.dataset'):
            wrapper = 'datasets' in ds or 'dataset' in ds
            if not wrapper and ds.get('data_root'):
                yield f'{key}.data_root', ds['data_root']


def check_data_roots(cfg: Config, loaders: Iterable[str]) -> None:
    """Fail early, with advice, when a dataset folder is missing."""
    for key, root in _dataloader_roots(cfg, loaders):
        if osp.isdir(root):
            continue
        hint = ('download and convert the dataset as described in the '
                'README ("Training on real ADE20K") or set '
                f'--cfg-options {key}=...')
        if 'synthetic' in root:
            parent = osp.dirname(osp.normpath(root))
            variant = ' --variant context' if 'context' in root else ''
            hint = ('generate it with `python tools/dataset_converters/'
                    f'synthetic_ade20k.py {parent}{variant}`')
        raise ToolError(f'{key.split(".")[0]}: dataset folder {root!r} does '
                        f'not exist; {hint}')


def drop_training(cfg: Config) -> None:
    """Remove the training settings of a config that is only tested.

    mmseg's visualization hook asks the runner for its iteration, and
    mmengine answers by building the training loop, dataset included: a
    test would fail on a training folder it never reads."""
    for key in ('train_dataloader', 'train_cfg', 'optim_wrapper',
                'param_scheduler'):
        cfg[key] = None


def check_checkpoint(path: Optional[str]) -> None:
    """A local checkpoint exists and is a complete torch file (empty,
    truncated and text files are named as such, before a model is
    built)."""
    if path and '://' not in path and not osp.isfile(path):
        raise ToolError(f'checkpoint {path!r} does not exist')
    if path:
        check_checkpoint_file(path)
