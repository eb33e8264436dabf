"""The options the tools share, each declared once: mmseg's
(``--work-dir``, ``--cfg-options``, ``--launcher``, ``--device``), the
project's vocabulary (``--out DIR``, ``--json FILE``, ``--shape(s)`` ...:
docs/tools.md), the parser every tool builds from its docstring, and the
flags of an options dataclass (:func:`add_dataclass_args`)."""
from __future__ import annotations

import argparse
import collections.abc
import dataclasses
import typing
from typing import Any, Iterable, Optional, Sequence, Tuple, Type, TypeVar

from mmengine.config import DictAction

from mmseg_whitebox.utils.amp import AMP_DTYPES
from mmseg_whitebox.utils.device import RUN_DEVICES
from mmseg_whitebox.utils.input_checks import check_device
from mmseg_whitebox.utils.tool_error import ToolError

#: the model sizes ``--arch`` names (ViT-Tiny, -Small, -Base, -Large)
ARCHS = ('t', 's', 'b', 'l')


class CfgOptionsAction(DictAction):
    """mmengine's ``DictAction`` that makes an item without ``=`` an
    argparse error (not mmengine's ``ValueError``)."""

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
    """``--device``: a device this machine lacks is an argparse error."""

    def __call__(self, parser: argparse.ArgumentParser,
                 namespace: argparse.Namespace, values: Any,
                 option_string: Optional[str] = None) -> None:
        try:
            check_device(values)
        except ToolError as exc:
            raise argparse.ArgumentError(self, str(exc)) from exc
        setattr(namespace, self.dest, values)


def add_device_arg(parser: argparse.ArgumentParser,
                   help: Optional[str] = None,
                   choices: Optional[Sequence[str]] = None) -> None:
    """``--device`` (``cpu``, ``cuda``, ``cuda:N``; ``choices``: those a
    tool takes); None by default
    (:func:`~mmseg_whitebox.utils.device.auto_device`)."""
    parser.add_argument(
        '--device', action=DeviceAction,
        choices=list(choices) if choices else None,
        help=help or 'cpu, cuda or cuda:N (default: cuda when torch sees a '
        'GPU, else cpu)')


def tool_parser(doc: str) -> argparse.ArgumentParser:
    """A tool's parser from its docstring ``doc``: the first paragraph the
    description, the rest the epilog, kept as written."""
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
    """``--allow-partial-checkpoint`` and ``--allow-nonfinite-weights``
    (:class:`~mmseg_whitebox.engine.hooks.CheckpointCheckHook`); ``verb``:
    what the tool does with the checkpoint."""
    parser.add_argument(
        '--allow-partial-checkpoint', action='store_true',
        help='load a checkpoint whose keys or shapes do not all match the '
        'model (the rest keep their initialisation) instead of refusing it')
    parser.add_argument(
        '--allow-nonfinite-weights', action='store_true',
        help=f'{verb} a checkpoint with NaN/Inf weights instead of refusing '
        'it')


def add_launcher_args(parser: argparse.ArgumentParser) -> None:
    """``--launcher``, ``--device`` and ``--local-rank``: the flags of a
    run the Runner may distribute."""
    parser.add_argument(
        '--launcher',
        choices=['none', 'pytorch', 'slurm', 'mpi'],
        default='none',
        help='job launcher for distributed runs (dist_*.sh use pytorch)')
    add_device_arg(
        parser, choices=RUN_DEVICES,
        help='where the run goes (default: cuda when available, else cpu; '
        'with a launcher and no visible GPU the run stops unless --device '
        'cpu asks for CPU processes, which use gloo)')
    # torch.distributed launchers pass --local-rank (or --local_rank)
    parser.add_argument('--local_rank', '--local-rank', type=int, default=0)


def add_common_args(parser: argparse.ArgumentParser) -> None:
    """``--work-dir``, ``--cfg-options`` and :func:`add_launcher_args`."""
    parser.add_argument(
        '--work-dir',
        help='folder for logs, checkpoints and results '
        '(default: ./work_dirs/<config name>)')
    add_cfg_options_arg(parser)
    add_launcher_args(parser)


#: the argparse settings a field's ``metadata`` may give besides ``help``
ARG_SETTINGS = ('type', 'nargs', 'choices', 'metavar')

T = TypeVar('T')


def _value_type(hint: Any) -> Tuple[Any, bool]:
    """``(type, is_sequence)`` of a field's type hint for argparse
    (``Optional[X]`` is ``X``; ``(None, False)``: none argparse
    converts to)."""
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
    """One flag (:func:`dataclass_flag`) per field of the options
    dataclass ``cls`` with ``field(metadata=dict(help=...))``, not in
    ``exclude``; a field of :data:`SHARED_FIELDS` gets its builder's flag.

    A ``bool`` field is a switch, a sequence of ``X`` takes ``nargs='+'``
    values of type ``X``, an ``int``, ``float`` or ``str`` one value;
    ``metadata`` may also set :data:`ARG_SETTINGS`. Defaults are the
    fields'; :func:`options_from_args` makes the dataclass back."""
    hints = typing.get_type_hints(cls)
    for field in dataclasses.fields(cls):
        meta = field.metadata
        if field.name in exclude or 'help' not in meta:
            continue
        default = (field.default_factory() if field.default is
                   dataclasses.MISSING else field.default)
        if field.name in SHARED_FIELDS:  # declared by the shared builder
            SHARED_FIELDS[field.name](
                parser, help=meta['help'], default=default,
                **{k: meta[k] for k in ('choices', ) if k in meta})
            continue
        kwargs = dict(dest=field.name, help=meta['help'])
        value_type, sequence = _value_type(hints[field.name])
        if value_type is bool and not sequence:
            kwargs['action'] = ('store_false' if field.default is True else
                                'store_true')
        else:
            kwargs['default'] = default
            if value_type is not None and value_type is not str:
                kwargs['type'] = value_type
            if sequence:
                kwargs['nargs'] = '+'
        kwargs.update({k: meta[k] for k in ARG_SETTINGS if k in meta})
        parser.add_argument(dataclass_flag(field), **kwargs)


def options_from_args(cls: Type[T], args: argparse.Namespace) -> T:
    """The options dataclass ``cls`` from parsed arguments (fields without
    a flag keep their defaults)."""
    return cls(**{f.name: getattr(args, f.name)
                  for f in dataclasses.fields(cls) if f.init
                  and hasattr(args, f.name)})


# ------------------------------------------------ the project's vocabulary
def add_out_arg(parser: argparse.ArgumentParser, help: str,
                default: Optional[str] = None,
                required: bool = False) -> None:
    """``--out DIR``: a tool's results folder (one file:
    :func:`add_out_file_arg`)."""
    parser.add_argument('--out', metavar='DIR', default=default,
                        required=required, help=help)


def add_out_file_arg(parser: argparse.ArgumentParser, help: str,
                     default: Optional[str] = None,
                     required: bool = False) -> None:
    """``--out-file FILE``: the one file a tool writes."""
    parser.add_argument('--out-file', metavar='FILE', default=default,
                        required=required, help=help)


def add_threads_arg(parser: argparse.ArgumentParser,
                    help: str = "CPU threads (default: torch's choice)"
                    ) -> None:
    """``--threads N``: torch's (or onnxruntime's) CPU threads."""
    parser.add_argument('--threads', type=int, metavar='N', help=help)


def add_arch_arg(parser: argparse.ArgumentParser, default: str = 's',
                 choices: Sequence[str] = ARCHS,
                 help: str = 'model size') -> None:
    """``--arch {t,s,b,l}``: a model size (ViT-Tiny ... -Large)."""
    parser.add_argument('--arch', default=default, choices=list(choices),
                        help=f'{help} (default: {default})')


def add_data_root_arg(parser: argparse.ArgumentParser, help: str,
                      default: Optional[str] = None,
                      required: bool = False) -> None:
    """``--data-root DIR``: a data folder."""
    parser.add_argument('--data-root', metavar='DIR', default=default,
                        required=required, help=help)


def add_num_images_arg(parser: argparse.ArgumentParser, default: int,
                       help: str) -> None:
    """``--num-images N``: how many images a tool uses."""
    parser.add_argument('--num-images', type=int, metavar='N',
                        default=default, help=f'{help} (default {default})')


def add_labels_arg(parser: argparse.ArgumentParser,
                   help: str = 'legend labels, one per folder') -> None:
    """``--labels A [B ...]``: the ``--label`` of each of several inputs."""
    parser.add_argument('--labels', nargs='+', metavar='LABEL', help=help)


def add_memory_limit_arg(parser: argparse.ArgumentParser,
                         help: str) -> None:
    """``--memory-limit-gb GB``."""
    parser.add_argument('--memory-limit-gb', type=float, metavar='GB',
                        help=help)


def add_models_arg(parser: argparse.ArgumentParser,
                   choices: Sequence[str], default: Sequence[str],
                   help: str) -> None:
    """``--models NAME [NAME ...]``: which models a tool runs, among
    ``choices``."""
    parser.add_argument('--models', nargs='+', choices=list(choices),
                        default=default, help=help)


def add_seed_arg(parser: argparse.ArgumentParser, help: str,
                 default: int = 0) -> None:
    """``--seed N``: the base seed (of random weights, inputs, draws)."""
    parser.add_argument('--seed', type=int, metavar='N', default=default,
                        help=help)


def add_sigmas_arg(parser: argparse.ArgumentParser, help: str,
                   default: Optional[Sequence[float]] = None) -> None:
    """``--sigmas S [S ...]``: noise standard deviations."""
    parser.add_argument('--sigmas', type=float, nargs='+', default=default,
                        help=help)


def add_title_arg(parser: argparse.ArgumentParser, help: str,
                  default: Optional[str] = None) -> None:
    """``--title TEXT``: one title (a plot's, a table's, an image's)."""
    parser.add_argument('--title', default=default, help=help)


def add_json_arg(parser: argparse.ArgumentParser, help: str) -> None:
    """``--json FILE``: also write the printed report as JSON."""
    parser.add_argument('--json', metavar='FILE', help=help)


#: options-dataclass fields declared by a shared builder
SHARED_FIELDS = dict(models=add_models_arg, seed=add_seed_arg,
                     sigmas=add_sigmas_arg, title=add_title_arg)


def add_amp_args(parser: argparse.ArgumentParser, what: str,
                 note: str = '') -> None:
    """``--amp`` and ``--amp-dtype`` (read both with :func:`amp_dtype`);
    ``what``: what runs under autocast, ``note``: more for the help."""
    parser.add_argument(
        '--amp', action='store_true',
        help=f'{what} under automatic mixed precision (float16 autocast '
        f'unless --amp-dtype says otherwise{note})')
    parser.add_argument(
        '--amp-dtype', choices=AMP_DTYPES,
        help='the autocast dtype of --amp (implies it): float16 (default) '
        'or bfloat16')


def add_compile_arg(parser: argparse.ArgumentParser, what: str) -> None:
    """``--compile``: ``what`` also compiled and timed beside eager."""
    parser.add_argument(
        '--compile', action='store_true',
        help=f'also time every {what} compiled (torch.compile, a graph per '
        'size), side by side with eager; the compilation is timed apart')


def amp_dtype(args: argparse.Namespace) -> Optional[str]:
    """The autocast dtype ``--amp`` / ``--amp-dtype`` ask for, or None."""
    if args.amp_dtype:
        return args.amp_dtype
    return AMP_DTYPES[0] if args.amp else None


def parse_shape(values: Sequence[Any], minimum: int = 1
                ) -> Tuple[int, int]:
    """``(H, W)`` from ``[H]`` (square), ``[H, W]``, ``'H'`` or ``'HxW'``
    (every ``--shape`` and ``--shapes`` entry); ``ValueError`` unless one
    or two whole numbers >= ``minimum``."""
    text = values if isinstance(values, str) else None
    if text is not None:
        values = text.lower().split('x')
    try:
        parts = [int(v) for v in values]
    except (TypeError, ValueError):
        parts = []
    if len(parts) == 1:
        parts = parts * 2
    if len(parts) != 2 or min(parts) < minimum:
        given = text if text is not None else ' '.join(map(str, values))
        raise ValueError(
            f'{given!r} is not a size: give H (square) or '
            f'{"HxW" if text is not None else "H W"}, each >= {minimum} '
            'pixels')
    return parts[0], parts[1]


class ShapeAction(argparse.Action):
    """``--shape H [W]`` read by :func:`parse_shape` into ``(H, W)``."""

    def __init__(self, *args: Any, minimum: int = 1, **kwargs: Any) -> None:
        self.minimum = minimum
        super().__init__(*args, **kwargs)

    def __call__(self, parser: argparse.ArgumentParser,
                 namespace: argparse.Namespace, values: Any,
                 option_string: Optional[str] = None) -> None:
        try:
            setattr(namespace, self.dest, parse_shape(values, self.minimum))
        except ValueError as exc:
            raise argparse.ArgumentError(self, str(exc)) from exc


class ShapeType:
    """The argparse ``type`` of a ``--shapes`` entry (:func:`parse_shape`)."""

    def __init__(self, minimum: int = 1) -> None:
        self.minimum = minimum
        self.__name__ = 'shape'  # argparse names the type in its errors

    def __call__(self, text: str) -> Tuple[int, int]:
        try:
            return parse_shape(text, self.minimum)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from exc


def add_shape_arg(parser: argparse.ArgumentParser, help: str,
                  default: Optional[Sequence[int]] = None,
                  required: bool = False, flag: str = '--shape',
                  minimum: int = 1) -> None:
    """``--shape H [W]`` (or ``flag``): one input size, ``(H, W)``."""
    parser.add_argument(
        flag, nargs='+', metavar=('H', 'W'), action=ShapeAction,
        minimum=minimum, required=required,
        default=None if default is None else parse_shape(default, minimum),
        help=help + ('' if default is None else
                     f' (default: {" ".join(map(str, default))})'))


def add_shapes_arg(parser: argparse.ArgumentParser, help: str,
                   default: Sequence[str] = (), flag: str = '--shapes',
                   minimum: int = 1, nargs: str = '+') -> None:
    """``--shapes S [S ...]``, each ``H`` or ``HxW``: ``[(H, W), ...]``."""
    parser.add_argument(
        flag, nargs=nargs, metavar='H[xW]', type=ShapeType(minimum),
        default=[parse_shape(s, minimum) for s in default],
        help=help + (f' (default: {" ".join(default)})' if default
                     else ''))


def add_timing_args(parser: argparse.ArgumentParser, repeats: int,
                    warmup: int) -> None:
    """``--repeats`` and ``--warmup`` (:func:`check_measurement_args`)."""
    parser.add_argument('--repeats', type=int, default=repeats,
                        help='timed calls per measurement, median reported '
                        f'(default: {repeats})')
    parser.add_argument('--warmup', type=int, default=warmup,
                        help=f'untimed calls first (default: {warmup})')


def add_measurement_args(parser: argparse.ArgumentParser, what: str,
                         repeats: int, warmup: int,
                         max_seconds: float) -> None:
    """Where and how the benchmark tools measure (``what``: the things
    timed); checked by :func:`check_measurement_args`."""
    add_device_arg(parser)
    add_threads_arg(parser)
    add_timing_args(parser, repeats, warmup)
    parser.add_argument(
        '--max-seconds', type=float, default=max_seconds,
        help=f'stop timing one of the {what} after this many seconds (at '
        f'least 3 calls; default: {max_seconds:g})')
    parser.add_argument('--no-backward', action='store_true',
                        help='skip the forward+backward measurements')
    add_amp_args(parser, 'run the models')
    add_memory_limit_arg(
        parser, 'skip runs predicted to need more (default: 80%% of the '
        'memory available at the start)')
    add_seed_arg(parser, 'seed of the random weights and inputs (default 0)')


def check_measurement_args(parser: argparse.ArgumentParser,
                           args: argparse.Namespace) -> None:
    """Exit through ``parser.error`` on impossible timing options."""
    if args.repeats < 1 or args.warmup < 0:
        parser.error('--repeats must be >= 1 and --warmup >= 0')
