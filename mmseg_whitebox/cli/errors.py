"""Errors a user can cause, as one line: what was wrong and what to do.

:func:`~mmseg_whitebox.cli.run_tool` hands every exception a tool
raises to :func:`user_error_message`. The project's own bad-input errors
(:class:`~mmseg_whitebox.cli.ToolError`, the checkpoint and dataset
checks, :class:`BadFileError`) carry their message; the errors mmengine,
mmseg, torch, OpenCV and safetensors raise on bad input (an unknown
registry type, a misspelt config key, a CUDA device on a CPU-only machine,
a truncated checkpoint, an unwritable folder, ...) are translated here,
in one place. Anything else is a bug and keeps its traceback.

``--debug`` on any tool's command line, or ``MMSEG_WHITEBOX_DEBUG=1`` in
the environment, prints the traceback of every error, bad input included.
"""
from __future__ import annotations

import difflib
import errno
import inspect
import json
import os
import re
import sys
import traceback
from typing import Any, Callable, Iterable, List, Optional

from mmseg_whitebox.utils.tool_error import ToolError

#: the environment variable that shows tracebacks for every error
DEBUG_ENV = 'MMSEG_WHITEBOX_DEBUG'
#: the command-line flag every tool accepts for the same
DEBUG_FLAG = '--debug'
#: how many close matches a message suggests
SUGGESTIONS = 3


# -- debug mode --------------------------------------------------------------

def take_debug_flag(argv: Optional[List[str]]) -> Optional[List[str]]:
    """``argv`` (``sys.argv[1:]`` when None, edited in place) without
    ``--debug``; the flag sets :data:`DEBUG_ENV`, so that worker processes
    see it too."""
    args = sys.argv[1:] if argv is None else list(argv)
    end = args.index('--') if '--' in args else len(args)
    if DEBUG_FLAG not in args[:end]:
        return argv
    os.environ[DEBUG_ENV] = '1'
    kept = [a for i, a in enumerate(args) if i >= end or a != DEBUG_FLAG]
    if argv is None:
        sys.argv[1:] = kept
        return None
    return kept


def debug_mode() -> bool:
    """Whether tracebacks are wanted for every error."""
    return os.environ.get(DEBUG_ENV, '').strip().lower() not in (
        '', '0', 'false', 'no', 'off')


def report(prog: str, exc: BaseException) -> bool:
    """Print ``<prog>: error: <one line>`` for an error a user caused
    (after its traceback in debug mode); False, printing nothing, for any
    other error (a bug: the caller re-raises it)."""
    message = user_error_message(exc)
    if message is None:
        return False
    if debug_mode():
        traceback.print_exception(type(exc), exc, exc.__traceback__)
    print(f'{prog}: error: {message}', file=sys.stderr)
    return True


# -- the translation ---------------------------------------------------------

def user_error_message(exc: BaseException) -> Optional[str]:
    """The one-line message for ``exc`` if a user can cause it, else
    None."""
    for translate in TRANSLATIONS:
        message = translate(exc)
        if message:
            return ' '.join(message.split())  # one line
    return None


def _frames(exc: BaseException) -> List[Any]:
    """The frames of ``exc``'s traceback, outermost first."""
    frames, tb = [], exc.__traceback__
    while tb is not None:
        frames.append(tb.tb_frame)
        tb = tb.tb_next
    return frames


def _local(exc: BaseException, names: Iterable[str],
           accept: Callable[[Any], bool]) -> Any:
    """The innermost value of a local variable named in ``names`` that
    ``accept`` accepts, in the frames of ``exc``'s traceback."""
    for frame in reversed(_frames(exc)):
        for name in names:
            value = frame.f_locals.get(name)
            if value is not None and accept(value):
                return value
    return None


def _file_of(exc: BaseException) -> Optional[str]:
    """The file a reading function was reading when ``exc`` was raised."""
    def is_path(value: Any) -> bool:
        return isinstance(value, (str, os.PathLike)) and os.path.isfile(
            value)
    path = _local(exc, ('filename', 'path', 'f', 'file', 'src'), is_path)
    if path is None:
        handle = _local(exc, ('fp', 'f', 'file'),
                        lambda v: isinstance(getattr(v, 'name', None), str))
        path = getattr(handle, 'name', None)
    return None if path is None else os.fspath(path)


def _suggest(word: str, choices: Iterable[str]) -> str:
    """``; did you mean 'x' or 'y'?`` for the close matches, or ''."""
    choices = sorted(set(choices))
    close = difflib.get_close_matches(word, choices,
                                      SUGGESTIONS, 0.75)
    if not close:
        lower = {c.lower(): c for c in choices}
        close = [lower[word.lower()]] if word.lower() in lower else []
    if not close:
        return ''
    return '; did you mean ' + ' or '.join(repr(c) for c in close) + '?'


def _own_errors(exc: BaseException) -> Optional[str]:
    """The project's bad-input errors: their message is the one line."""
    kinds = [ToolError]
    for module, name in (
            ('mmseg_whitebox.utils.checkpoint_checks', 'CheckpointError'),
            ('mmseg_whitebox.datasets.checks', 'DatasetCheckError'),
            ('mmseg_whitebox.compat', 'UnsafeCheckpointError'),
            ('mmseg_whitebox.robustness.corruptions.library',
             'CorruptionError')):
        if module in sys.modules:  # raised only once imported
            kinds.append(getattr(sys.modules[module], name))
    if not isinstance(exc, tuple(kinds)):
        return None
    text = str(exc)
    marker = f'{type(exc).__name__}: '  # re-raised from a DataLoader worker
    if 'Original Traceback' in text and marker in text:
        text = text.rsplit(marker, 1)[1]
    return text.strip()


def _registry_names(registry: Any) -> List[str]:
    """Every name ``registry`` resolves: its own, its parent's and its
    children's (other scopes)."""
    names: List[str] = []
    seen = set()
    stack = [registry, getattr(registry, 'parent', None)]
    while stack:
        reg = stack.pop()
        if reg is None or id(reg) in seen:
            continue
        seen.add(id(reg))
        names += list(getattr(reg, 'module_dict', {}))
        stack += list(getattr(reg, 'children', {}).values())
    return names


def _unknown_type(exc: BaseException) -> Optional[str]:
    """mmengine: ``X is not in the mmseg::model registry``."""
    if not isinstance(exc, KeyError):
        return None
    text = exc.args[0] if exc.args and isinstance(exc.args[0], str) else ''
    match = re.match(r'(\S+) is not in the (\S+) registry', text)
    if not match:
        return None
    name, where = match.groups()
    from mmengine.registry import Registry
    registry = _local(exc, ('registry', 'self'),
                      lambda v: isinstance(v, Registry))
    hint = _suggest(name, _registry_names(registry)) if registry else ''
    return (f'unknown type {name!r}: nothing of that name is registered in '
            f'{where}{hint} Fix the type in the config or in --cfg-options '
            '(names are case-sensitive; a module of your own must be '
            'imported, e.g. with custom_imports)')


def _init_parameters(cls: type) -> List[str]:
    """The keyword arguments ``cls(...)`` takes along its base classes
    (those passed on through ``**kwargs``)."""
    names: List[str] = []
    for klass in inspect.getmro(cls):
        init = klass.__dict__.get('__init__')
        if init is None:
            continue
        try:
            params = inspect.signature(init).parameters.values()
        except (TypeError, ValueError):
            continue
        names += [p.name for p in params if p.name != 'self' and p.kind in (
            p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
    return names


def _bad_setting(exc: BaseException) -> Optional[str]:
    """``X.__init__() got an unexpected keyword argument 'num_clases'``
    (a misspelt or unknown config key) and missing required settings."""
    if not isinstance(exc, TypeError):
        return None
    text = str(exc)
    unexpected = re.search(r"(\w+)\.__init__\(\) got an unexpected keyword "
                           r"argument '(\w+)'", text)
    missing = re.search(r"(\w+)\.__init__\(\) missing \d+ required "
                        r"positional arguments?: (.+)$", text)
    if not (unexpected or missing):
        return None
    built = _local(exc, ('obj_cls', 'self'), lambda v: True)
    cls = built if isinstance(built, type) else type(built)
    if built is None or cls.__name__ in ('Registry', 'ConfigDict'):
        cls = None
    name = cls.__name__ if cls else (unexpected or missing).group(1)
    if unexpected:
        key = unexpected.group(2)
        hint = _suggest(key, _init_parameters(cls)) if cls else ''
        return (f'{name} does not take the setting {key!r}{hint} Fix or '
                'remove that key in the config or in --cfg-options')
    return (f'{name} needs the setting(s) {missing.group(2)}, which the '
            'config does not give: add them (in the config or with '
            '--cfg-options)')


def _config_syntax(exc: BaseException) -> Optional[str]:
    """A syntax error in a config mmengine reads (an ``_base_`` file: the
    tools parse the named config themselves)."""
    if not isinstance(exc, SyntaxError) or not any(
            'mmengine' in f.f_code.co_filename and 'config' in
            f.f_code.co_filename for f in _frames(exc)):
        return None
    path = _file_of(exc)
    path = os.path.normpath(path) if path else 'a config file'
    return (f'config {path!r} is not valid Python: {exc.msg} at line '
            f'{exc.lineno}; fix that line')


def _device(exc: BaseException) -> Optional[str]:
    """A CUDA device asked for where torch has none, or a device name torch
    does not know."""
    text = str(exc)
    no_cuda = ('Torch not compiled with CUDA enabled', 'Found no NVIDIA '
               'driver', 'No CUDA GPUs are available',
               'invalid device ordinal')
    if isinstance(exc, (AssertionError, RuntimeError)) and any(
            s in text for s in no_cuda):
        import torch
        have = (f'{torch.cuda.device_count()} CUDA device(s)'
                if torch.cuda.is_available() else 'no CUDA device')
        reason = text.strip().splitlines()[0]
        return (f'the requested CUDA device is not available ({reason}; '
                f'this machine has {have}): run on the '
                'CPU (--device cpu, or leave --device out) or on a machine '
                'with that GPU')
    if isinstance(exc, RuntimeError) and 'device type at start of device ' \
            'string' in text:
        return (f'unknown device {text.rsplit(":", 1)[-1].strip()!r}: use '
                'cpu, cuda or cuda:N')
    return None


def _files(exc: BaseException) -> Optional[str]:
    """Files that are truncated, of another format, or cannot be written
    or read."""
    text = str(exc).strip()
    first = (text.splitlines() or [''])[0]
    if isinstance(exc, RuntimeError) and 'PytorchStreamReader failed' in \
            text:
        path = _file_of(exc) or 'a checkpoint'
        return (f'{path!r} is a damaged or truncated PyTorch file '
                f'({first.split(".")[0]}): it was not written completely '
                '(a crash, a full disk or an interrupted copy). Use another '
                'copy, or an earlier checkpoint')
    if type(exc).__name__ == 'SafetensorError':
        path = _file_of(exc) or 'a .safetensors file'
        return (f'{path!r} is not a complete safetensors file ({first}): it '
                'is truncated or of another format. Download it again')
    if isinstance(exc, json.JSONDecodeError):
        path = _file_of(exc) or 'a JSON file'
        return (f'{path!r} is not valid JSON ({exc.msg} at line {exc.lineno}'
                f'): it is truncated or damaged. Restore or delete it')
    if isinstance(exc, OSError) and exc.errno in (
            errno.EACCES, errno.EPERM, errno.EROFS, errno.ENOSPC,
            errno.EDQUOT):
        path = exc.filename or 'a file'
        return (f'cannot use {path!r}: {exc.strerror}. Choose another '
                'location, fix its permissions or free disk space')
    if isinstance(exc, (IsADirectoryError, NotADirectoryError)):
        return (f'{exc.filename!r}: {exc.strerror}; give a file where a '
                'file is expected and a folder where a folder is')
    if type(exc).__name__ == 'error' and type(exc).__module__ == 'cv2':
        if 'could not find a writer' in text:
            return ('OpenCV cannot write images of that file type: name the '
                    'output .png or .jpg')
        return f'OpenCV could not process an image ({first})'
    return None


def _sizes(exc: BaseException) -> Optional[str]:
    """Negative or impossible sizes that reached torch."""
    text = str(exc)
    if isinstance(exc, RuntimeError) and 'negative dimension' in text:
        return (f'a size in the config is negative ({text.strip()}): check '
                'num_classes, channels and embed_dims (they must be >= 1)')
    return None


#: the translations, tried in order
TRANSLATIONS: List[Callable[[BaseException], Optional[str]]] = [
    _own_errors, _unknown_type, _bad_setting, _config_syntax, _device,
    _files, _sizes]

