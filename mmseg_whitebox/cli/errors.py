"""How a tool reports a failure, told apart by the exception's type:

* a :class:`~mmseg_whitebox.utils.tool_error.ToolError` (bad input), or
  an ``OSError`` that says the user's place cannot take the output
  (:func:`user_os_error`): ``<tool>: error: <message>``, exit status 2;
* a :class:`~mmseg_whitebox.utils.tool_error.CheckFailedError`:
  ``<tool>: check failed: <message>``, exit status 1;
* anything else is a bug: ``<tool>: internal error: <Type>: <message>``,
  exit status 1, the traceback in a log file (:func:`write_error_log`).

``--debug`` or ``MMSEG_WHITEBOX_DEBUG=1`` also prints every traceback.
Where ``MMSEG_WHITEBOX_ERROR_FILE`` names a file, a user error's line
(argparse's too) is appended to it: ``tools/dist_*.sh`` repeat it after
torchrun's report.
"""
from __future__ import annotations

import contextlib
import errno
import os
import os.path as osp
import socket
import sys
import tempfile
import time
import traceback
from typing import Iterator, List, Optional

from mmseg_whitebox.compat import parser_errors_reported_to
from mmseg_whitebox.utils.run_lock import output_folder
from mmseg_whitebox.utils.tool_error import (BAD_INPUT, INTERNAL_ERROR,
                                             CheckFailedError, ToolError)

DEBUG_ENV = 'MMSEG_WHITEBOX_DEBUG'
DEBUG_FLAG = '--debug'
ERROR_FILE_ENV = 'MMSEG_WHITEBOX_ERROR_FILE'
#: the longest exception message an internal error's line repeats
SUMMARY_CHARS = 400
#: the most error logs one folder gets in one second (distributed ranks)
LOG_NAMES = 64
DEBUG_HINT = '(--debug shows the traceback)'
#: a full disk or quota: the user's to fix, wherever the write was
FULL_DISK = (errno.ENOSPC, errno.EDQUOT)
#: the user's to fix inside the run's output folder only
NOT_WRITABLE = (errno.EACCES, errno.EROFS)


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
    """Report ``exc`` of the tool ``prog`` on stderr; the exit status."""
    if isinstance(exc, CheckFailedError):
        print(f'{prog}: check failed: {_one_line(str(exc))}',
              file=sys.stderr)
        return INTERNAL_ERROR
    message = user_error_message(exc)
    debug = debug_mode()
    if debug:
        traceback.print_exception(type(exc), exc, exc.__traceback__)
    if message is not None:
        hint = '' if debug else f' {DEBUG_HINT}'
        line = f'{prog}: error: {message}{hint}'
        print(line, file=sys.stderr)
        record_error_line(line)
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


def record_error_line(line: str) -> None:
    """Append ``line`` to the file :data:`ERROR_FILE_ENV` names, if set
    (one short append per process: the ranks' lines do not mix)."""
    path = os.environ.get(ERROR_FILE_ENV)
    if not path:
        return
    try:
        with open(path, 'a', encoding='utf-8') as f:
            f.write(_one_line(line) + '\n')
    except OSError:
        pass  # the line is on stderr anyway


@contextlib.contextmanager
def recorded_parser_errors() -> Iterator[None]:
    """Within the block, argparse's usage errors also go to
    :func:`record_error_line` (when :data:`ERROR_FILE_ENV` is set)."""
    if not os.environ.get(ERROR_FILE_ENV):
        yield
        return
    with parser_errors_reported_to(record_error_line):
        yield


def _one_line(text: str) -> str:
    return ' '.join(text.split())


def write_error_log(prog: str, exc: BaseException) -> Optional[str]:
    """Write the traceback of ``exc``, the command line and the versions
    to ``error-<time>.log`` in the run's output folder, else the system's
    temporary folder; its path, or None if neither can be written."""
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


# -- what a user can cause ---------------------------------------------------

def user_error_message(exc: BaseException) -> Optional[str]:
    """The one-line message for ``exc`` if it is a user's mistake, else
    None."""
    if isinstance(exc, ToolError):
        text = str(exc)
        # re-raised from a DataLoader worker: the original message
        marker = f'{type(exc).__name__}: '
        if 'Original Traceback' in text and marker in text:
            text = text.rsplit(marker, 1)[1]
        return _one_line(text)
    if isinstance(exc, OSError) and user_os_error(exc):
        path = exc.filename or 'the output'
        return (f'cannot write {path!r}: {exc.strerror}. Choose another '
                'location, fix its permissions or free disk space')
    return None


def user_os_error(exc: OSError) -> bool:
    """Whether ``exc`` is the user's place, not the code: a full disk
    anywhere, or a read-only or forbidden file inside the run's output
    folder (the same error elsewhere is a bug)."""
    if exc.errno in FULL_DISK:
        return True
    folder, path = output_folder(), exc.filename
    if exc.errno not in NOT_WRITABLE or not folder or \
            not isinstance(path, (str, os.PathLike)):
        return False
    path = osp.abspath(os.fspath(path))
    return osp.commonpath([folder, path]) == folder
