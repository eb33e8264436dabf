"""The two kinds of failure a tool reports: a user's mistake as one line,
anything else as a bug whose traceback is kept.

:func:`~mmseg_whitebox.cli.run_tool` hands every exception a tool raises
to :func:`report`:

* an error a user can cause is ``<tool>: error: <what and what to do>``,
  exit status 2. The project's own bad-input errors
  (:class:`~mmseg_whitebox.utils.tool_error.ToolError` and its kinds, the
  checkpoint and dataset checks) carry their message; the errors
  mmengine, mmseg, torch, OpenCV and safetensors raise on bad input (an
  unknown registry type, a misspelt config key, a CUDA device on a
  CPU-only machine, a truncated checkpoint, an unwritable folder, ...)
  are translated here, in one place, each only where the input is what
  went wrong (:func:`user_error_message`);
* a result that failed its own check
  (:class:`~mmseg_whitebox.utils.tool_error.CheckFailedError`) is
  ``<tool>: check failed: <message>``, exit status 1;
* anything else is a bug: ``<tool>: internal error: <Type>: <message>``,
  exit status 1, and the full traceback in a log file
  (:func:`write_error_log`: the run's output folder, else the system's
  temporary folder), whose path the line names.

``--debug`` on any tool's command line, or ``MMSEG_WHITEBOX_DEBUG=1`` in
the environment, also prints the traceback of every error, bad input
included.
"""
from __future__ import annotations

import difflib
import errno
import inspect
import json
import os
import re
import socket
import sys
import tempfile
import time
import traceback
from typing import Any, Callable, Iterable, List, Optional

from mmseg_whitebox.compat import UnsafeCheckpointError
from mmseg_whitebox.utils.run_lock import output_folder
from mmseg_whitebox.utils.tool_error import (BAD_INPUT, INTERNAL_ERROR,
                                             CheckFailedError, ToolError)

#: the environment variable that shows tracebacks for every error
DEBUG_ENV = 'MMSEG_WHITEBOX_DEBUG'
#: the command-line flag every tool accepts for the same
DEBUG_FLAG = '--debug'
#: how many close matches a message suggests
SUGGESTIONS = 3
#: the longest exception message an internal error's line repeats
SUMMARY_CHARS = 400
#: local variables that name the file a reading function reads (mmcv's
#: ``imread(img_or_path)``, mmseg's loaders' ``filename``, ...)
READ_PATH_NAMES = ('filename', 'path', 'f', 'file', 'src', 'img_or_path',
                   'img_path', 'file_path')
#: local variables that name the file a writing function writes (mmcv's
#: ``imwrite(img, file_path)``, ...)
WRITTEN_PATH_NAMES = ('file_path', 'out_file', 'filename', 'path')
#: the innermost frames searched for the file an OpenCV call read or
#: wrote (the function that called OpenCV and its callers in mmcv): a
#: path further out is not what OpenCV failed on
OPENCV_FRAMES = 3
#: the most error logs one folder gets in one second (distributed ranks)
LOG_NAMES = 64
#: the hint that ends a user error's line
DEBUG_HINT = '(--debug shows the traceback)'


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


# -- reporting ---------------------------------------------------------------

def report(prog: str, exc: BaseException) -> int:
    """Report the failure ``exc`` of the tool ``prog`` on stderr (see the
    module docstring); its exit status."""
    if isinstance(exc, CheckFailedError):
        print(f'{prog}: check failed: {_one_line(str(exc))}',
              file=sys.stderr)
        return INTERNAL_ERROR
    try:
        message = user_error_message(exc)
    except Exception:  # noqa: BLE001 (a translation's own bug: not the user's)
        message = None
    debug = debug_mode()
    if debug:
        traceback.print_exception(type(exc), exc, exc.__traceback__)
    if message is not None:
        hint = '' if debug else f' {DEBUG_HINT}'
        print(f'{prog}: error: {message}{hint}', file=sys.stderr)
        return BAD_INPUT
    log = write_error_log(prog, exc)
    text = _one_line(str(exc))
    if len(text) > SUMMARY_CHARS:
        text = text[:SUMMARY_CHARS] + '...'
    summary = f'{prog}: internal error: {type(exc).__name__}' + (
        f': {text}' if text else '')
    if log is None:  # nowhere to write: the traceback goes to stderr
        if not debug:
            traceback.print_exception(type(exc), exc, exc.__traceback__)
        where = 'the traceback is above'
    else:
        where = f'the full traceback is in {log}' + (
            '' if debug else ' (--debug prints it here)')
    print(f'{summary} -- this is a bug, not a problem with your input; '
          f'{where}', file=sys.stderr)
    return INTERNAL_ERROR


def _one_line(text: str) -> str:
    return ' '.join(text.split())


def write_error_log(prog: str, exc: BaseException) -> Optional[str]:
    """Write the traceback of ``exc`` (with its causes), the command line
    and the versions that ran it to ``error-<time>.log`` in the run's
    output folder (:func:`~mmseg_whitebox.utils.run_lock.output_folder`),
    else in the system's temporary folder; its path, or None if neither
    can be written."""
    stamp = time.strftime('%Y%m%d-%H%M%S')
    name = os.path.splitext(prog)[0] or 'tool'
    places = [(output_folder(), f'error-{stamp}'),
              (tempfile.gettempdir(), f'mmseg_whitebox-{name}-error-{stamp}')]
    text = _error_log_text(prog, exc)
    for folder, stem in places:
        if not folder or not os.path.isdir(folder):
            continue
        for number in range(1, LOG_NAMES + 1):  # several in one second
            path = os.path.join(folder, f'{stem}.log' if number == 1 else
                                f'{stem}-{number}.log')
            try:
                with open(path, 'x', encoding='utf-8') as f:
                    f.write(text)
                return path
            except FileExistsError:
                continue
            except OSError:
                break
    return None


def _error_log_text(prog: str, exc: BaseException) -> str:
    """What an error log holds: when, where, what ran, and the
    traceback."""
    versions = []
    for module in ('torch', 'mmengine', 'mmseg', 'mmcv', 'mmseg_whitebox'):
        version = getattr(sys.modules.get(module), '__version__', None)
        if version:
            versions.append(f'{module} {version}')
    lines = [
        f'{prog} failed: {type(exc).__name__}',
        f'time: {time.strftime("%Y-%m-%d %H:%M:%S %z")}',
        f'host: {socket.gethostname()}, PID {os.getpid()}',
        f'working directory: {os.getcwd()}',
        f'command: {" ".join([sys.executable] + sys.argv)}',
        f'python {sys.version.split()[0]}; ' + ', '.join(versions), '']
    return '\n'.join(lines) + ''.join(traceback.format_exception(
        type(exc), exc, exc.__traceback__))


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
           accept: Callable[[Any], bool], depth: Optional[int] = None) -> Any:
    """The innermost value of a local variable named in ``names`` that
    ``accept`` accepts, in the frames of ``exc``'s traceback (the
    innermost ``depth`` of them, or all)."""
    frames = list(reversed(_frames(exc)))
    for frame in frames[:depth]:
        for name in names:
            value = frame.f_locals.get(name)
            if value is not None and accept(value):
                return value
    return None


def _file_of(exc: BaseException,
             depth: Optional[int] = None) -> Optional[str]:
    """The file a reading function was reading when ``exc`` was raised
    (looked for in the innermost ``depth`` frames, or all)."""
    def is_path(value: Any) -> bool:
        return isinstance(value, (str, os.PathLike)) and os.path.isfile(
            value)
    path = _local(exc, READ_PATH_NAMES, is_path, depth)
    if path is None:
        handle = _local(exc, ('fp', 'f', 'file'),
                        lambda v: isinstance(getattr(v, 'name', None), str),
                        depth)
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
    """The project's bad-input errors (the checkpoint, dataset and
    corruption checks' are ToolErrors too): their message is the one
    line."""
    if not isinstance(exc, (ToolError, UnsafeCheckpointError)):
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


def _config_build(exc: BaseException) -> Optional[tuple]:
    """``(class built, settings)`` when ``exc`` was raised while a class
    was built from a config: in the innermost frame of mmengine's
    ``build_from_cfg`` (``obj_cls(**args)``) or ``Runner.build_dataloader``
    (``DataLoader(**dataloader_cfg)``), or in an ``__init__`` of the
    class being built that the call went on to (settings passed on
    through ``**kwargs``); else None (a call elsewhere, a bug)."""
    frames = _frames(exc)
    for i in range(len(frames) - 1, -1, -1):
        frame = frames[i]
        module = frame.f_globals.get('__name__', '')
        if not module.startswith('mmengine'):
            continue
        local = frame.f_locals
        if frame.f_code.co_name == 'build_dataloader' and isinstance(
                local.get('dataloader_cfg'), dict):
            from torch.utils.data import DataLoader
            cls, settings = DataLoader, local['dataloader_cfg']
        elif isinstance(local.get('obj_cls'), type) and isinstance(
                local.get('args'), dict):
            cls, settings = local['obj_cls'], local['args']
        else:
            continue
        inner = frames[i + 1:]
        if all(_constructing(f, cls) for f in inner):
            return cls, settings
        return None  # raised further in: not by the build call itself
    return None


def _constructing(frame: Any, cls: type) -> bool:
    """Whether ``frame`` is part of constructing a ``cls``: an ``__init__``
    of it (or of a base class, through ``super()``), or mmengine's
    ``ManagerMixin.get_instance`` that calls it."""
    name = frame.f_code.co_name
    if name == '__init__':
        return isinstance(frame.f_locals.get('self'), cls)
    return name == 'get_instance' and frame.f_locals.get('cls') is cls


def _bad_setting(exc: BaseException) -> Optional[str]:
    """``X.__init__() got an unexpected keyword argument 'num_clases'``
    (a misspelt or unknown config key) and missing required settings,
    when the call that failed is the build of ``X`` from a config with
    that key (:func:`_config_build`): the same error from a call in the
    project's or a library's own code is a bug."""
    if not isinstance(exc, TypeError):
        return None
    text = str(exc)
    unexpected = re.search(r"(\w+)\.__init__\(\) got an unexpected keyword "
                           r"argument '(\w+)'", text)
    missing = re.search(r"(\w+)\.__init__\(\) missing \d+ required "
                        r"positional arguments?: (.+)$", text)
    match = unexpected or missing
    built = _config_build(exc) if match else None
    if built is None:
        return None
    cls, settings = built
    if match.group(1) not in {k.__name__ for k in inspect.getmro(cls)}:
        return None  # another class's constructor failed
    name = cls.__name__
    if unexpected:
        key = unexpected.group(2)
        if key not in settings:
            return None  # not a key of the config
        hint = _suggest(key, _init_parameters(cls))
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
        return _opencv(exc, first)
    return None


def _opencv(exc: BaseException, first: str) -> Optional[str]:
    """An OpenCV error while reading or writing a file: the file, the
    operation and OpenCV's reason. One with no file involved (an image
    already in memory) is not the input's fault: None."""
    text = str(exc)
    operation = re.search(r"in function '(\w+)'", text)
    operation = operation.group(1).rstrip('_') if operation else 'process'
    reason = re.search(r'error: \([^)]*\) (.*?)(?: in function|$)', text)
    reason = reason.group(1).strip() if reason else first
    if 'could not find a writer' in text or \
            'could not find encoder' in text:
        path = _local(exc, WRITTEN_PATH_NAMES,
                      lambda v: isinstance(v, (str, os.PathLike)),
                      OPENCV_FRAMES)
        where = f'{os.fspath(path)!r}' if path else 'the output'
        return (f'OpenCV cannot write {where} ({operation}: {reason}): '
                'name the output .png or .jpg')
    path = _file_of(exc, OPENCV_FRAMES)
    if path is None:
        return None
    return (f'OpenCV could not {operation} {path!r}: {reason}. Check that '
            'the file is a complete image of a common format (PNG, JPEG)')


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

