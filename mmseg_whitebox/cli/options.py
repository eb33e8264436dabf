"""The options the tools share, declared once: mmseg's ``--work-dir``,
``--cfg-options``, ``--launcher``, ``--device`` (checked against this
machine as it is parsed) and the checkpoint checks' ``--allow-*`` flags, the parser every tool builds from its docstring, and the flags of
a package function's options dataclass (:func:`add_dataclass_args`), so
that an option is declared in one place: its field."""
from __future__ import annotations

import argparse
import collections.abc
import dataclasses
import typing
from typing import Any, Iterable, Optional, Tuple, Type, TypeVar

from mmengine.config import DictAction

from mmseg_whitebox.utils.input_checks import check_device
from mmseg_whitebox.utils.tool_error import ToolError


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


class DeviceAction(argparse.Action):
    """``--device``: a device this machine has
    (:func:`~mmseg_whitebox.utils.input_checks.check_device`), refused as
    an argparse error when it is given; a tool's default is its own
    (e.g. ``cuda`` for a GPU report, checked where the tool needs it)."""

    def __call__(self, parser: argparse.ArgumentParser,
                 namespace: argparse.Namespace, values: Any,
                 option_string: Optional[str] = None) -> None:
        try:
            check_device(values)
        except ToolError as exc:
            raise argparse.ArgumentError(self, str(exc)) from exc
        setattr(namespace, self.dest, values)


def add_device_arg(parser: argparse.ArgumentParser,
                   default: Optional[str] = None,
                   help: str = 'cpu, cuda or cuda:N') -> None:
    """The ``--device`` option of every tool that has one
    (:class:`DeviceAction`)."""
    parser.add_argument('--device', default=default, action=DeviceAction,
                        help=help)


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
    :class:`~mmseg_whitebox.engine.hooks.CheckpointCheckHook`); ``verb``:
    what the tool does with it."""
    parser.add_argument(
        '--allow-partial-checkpoint', action='store_true',
        help='load a checkpoint whose keys or shapes do not all match the '
        'model (the rest keep their initialisation) instead of refusing it')
    parser.add_argument(
        '--allow-nonfinite-weights', action='store_true',
        help=f'{verb} a checkpoint with NaN/Inf weights instead of refusing '
        'it')


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


#: the argparse settings a field's ``metadata`` may give besides ``help``
ARG_SETTINGS = ('type', 'nargs', 'choices', 'metavar')

T = TypeVar('T')


def _value_type(hint: Any) -> Tuple[Any, bool]:
    """``(type, is_sequence)`` of a field's type hint for argparse:
    ``Optional[X]`` is ``X``; ``Sequence[X]``, ``List[X]`` and
    ``Tuple[X, ...]`` are ``(X, True)``; a type argparse cannot convert
    to (a dict, a union) is ``(None, False)``."""
    args = [a for a in typing.get_args(hint) if a is not type(None)]
    if typing.get_origin(hint) is typing.Union:
        if len(args) != 1:
            return None, False
        hint, args = args[0], list(typing.get_args(args[0]))
    origin = typing.get_origin(hint)
    if origin in (list, tuple, collections.abc.Sequence) and args:
        item, _ = _value_type(args[0])
        return item, True
    return (hint, False) if hint in (bool, int, float, str) else (None,
                                                                  False)


def dataclass_flag(field: dataclasses.Field) -> str:
    """The command-line flag of an options field: ``--name-with-dashes``,
    ``--no-name`` for a switch that is on by default."""
    name = field.name.replace('_', '-')
    return f'--no-{name}' if field.default is True else f'--{name}'


def add_dataclass_args(parser: argparse.ArgumentParser, cls: type,
                       exclude: Iterable[str] = ()) -> None:
    """One flag per field of the options dataclass ``cls`` that carries its
    help, ``field(metadata=dict(help=...))``; a field without help (a
    library-only setting, or a flag the tools share, e.g. those of
    :func:`add_common_args`) and those in ``exclude`` get none.

    The flag is :func:`dataclass_flag`: a ``bool`` field is a switch
    (``--name`` sets True; ``--no-name`` sets False where the default is
    True), a sequence of ``X`` takes ``nargs='+'`` values of type ``X``,
    an ``int``, ``float`` or ``str`` one value of that type; ``metadata``
    may also set ``type``, ``nargs``, ``choices`` and ``metavar``. The
    default is the field's; :func:`options_from_args` makes the dataclass
    back from the parsed arguments."""
    hints = typing.get_type_hints(cls)
    for field in dataclasses.fields(cls):
        meta = field.metadata
        if field.name in exclude or 'help' not in meta:
            continue
        kwargs = dict(dest=field.name, help=meta['help'])
        value_type, sequence = _value_type(hints[field.name])
        if value_type is bool and not sequence:
            kwargs['action'] = ('store_false' if field.default is True else
                                'store_true')
        else:
            kwargs['default'] = (field.default_factory()
                                 if field.default is dataclasses.MISSING
                                 else field.default)
            if value_type is not None and value_type is not str:
                kwargs['type'] = value_type
            if sequence:
                kwargs['nargs'] = '+'
        kwargs.update({k: meta[k] for k in ARG_SETTINGS if k in meta})
        parser.add_argument(dataclass_flag(field), **kwargs)


def options_from_args(cls: Type[T], args: argparse.Namespace) -> T:
    """The options dataclass ``cls`` from parsed arguments: every field the
    parser has a value for (those of :func:`add_dataclass_args` and the
    shared flags of the same name); the rest keep their defaults."""
    return cls(**{f.name: getattr(args, f.name)
                  for f in dataclasses.fields(cls) if f.init
                  and hasattr(args, f.name)})
