"""The options the tools share, declared once: mmseg's ``--work-dir``,
``--cfg-options``, ``--launcher`` and the checkpoint checks' ``--allow-*``
flags, and the parser every tool builds from its docstring."""
from __future__ import annotations

import argparse
from typing import Any, Optional

from mmengine.config import DictAction

from mmseg_whitebox.engine.hooks import CheckpointCheckHook


class CfgOptionsAction(DictAction):
    """mmengine's ``DictAction`` that refuses an item without ``=`` as an
    argparse error (mmengine raises ``ValueError: not enough values to
    unpack``)."""

    def __call__(self, parser: argparse.ArgumentParser,
                 namespace: argparse.Namespace, values: Any,
                 option_string: Optional[str] = None) -> None:
        for item in values:
            key = item.split('=', 1)[0]
            if '=' not in item or not key.strip():
                raise argparse.ArgumentError(
                    self, f'{item!r} is not KEY=VALUE: write e.g. '
                    'model.decode_head.num_classes=19 (lists as '
                    'key="[a,b]", no spaces around =)')
        super().__call__(parser, namespace, values, option_string)


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
    return CheckpointCheckHook.from_options(args)


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
