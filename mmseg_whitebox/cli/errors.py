"""The two kinds of failure a tool reports: a user's mistake as one line,
anything else as a bug whose traceback is kept.

:func:`~mmseg_whitebox.cli.run_tool` hands every exception a tool raises
to :func:`report`, which tells them apart by their type alone:

* a :class:`~mmseg_whitebox.utils.tool_error.ToolError` (its
  ``InputError`` kind included) is bad input, raised by the code that
  read or checked that input (a config, a checkpoint, an image, a
  folder, a device, a JSON file): ``<tool>: error: <what and what to
  do>``, exit status 2. So is an ``OSError`` that says the user's place
  cannot take the output (:func:`user_os_error`);
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

Where ``MMSEG_WHITEBOX_ERROR_FILE`` names a file, the line of a user's
mistake (exit status 2, argparse's too) is also appended to it
(:func:`record_error_line`): the launch scripts (``tools/dist_*.sh``) read
it after torchrun ends, to repeat the ranks' line last, below torchrun's
report, and exit 2.
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

#: the environment variable that shows tracebacks for every error
DEBUG_ENV = 'MMSEG_WHITEBOX_DEBUG'
#: the command-line flag every tool accepts for the same
DEBUG_FLAG = '--debug'
#: the environment variable naming the file a user error's line is added to
ERROR_FILE_ENV = 'MMSEG_WHITEBOX_ERROR_FILE'
#: the longest exception message an internal error's line repeats
SUMMARY_CHARS = 400
#: the most error logs one folder gets in one second (distributed ranks)
LOG_NAMES = 64
#: the hint that ends a user error's line
DEBUG_HINT = '(--debug shows the traceback)'
#: OSErrors that a full disk or quota causes, wherever the write was
FULL_DISK = (errno.ENOSPC, errno.EDQUOT)
#: OSErrors that a place the user chose (the run's output folder) causes
#: when it is not writable
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
    """Report the failure ``exc`` of the tool ``prog`` on stderr (see the
    module docstring); its exit status."""
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
    """Append ``line`` (a user error's) to the file that the environment
    variable :data:`ERROR_FILE_ENV` names, if it is set: one short append
    per process, so the lines of several ranks do not mix."""
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
    """Inside the block, argparse's usage errors (exit status 2) are
    recorded as :func:`record_error_line` records the others, when
    :data:`ERROR_FILE_ENV` is set
    (:func:`~mmseg_whitebox.compat.parser_errors_reported_to`)."""
    if not os.environ.get(ERROR_FILE_ENV):
        yield
        return
    with parser_errors_reported_to(record_error_line):
        yield


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


# -- what a user can cause ---------------------------------------------------

def user_error_message(exc: BaseException) -> Optional[str]:
    """The one-line message for ``exc`` if it is a user's mistake (by its
    type, see the module docstring), else None."""
    if isinstance(exc, ToolError):
        text = str(exc)
        marker = f'{type(exc).__name__}: '  # re-raised from a DataLoader worker
        if 'Original Traceback' in text and marker in text:
            text = text.rsplit(marker, 1)[1]
        return _one_line(text)
    if isinstance(exc, OSError) and user_os_error(exc):
        path = exc.filename or 'the output'
        return (f'cannot write {path!r}: {exc.strerror}. Choose another '
                'location, fix its permissions or free disk space')
    return None


def user_os_error(exc: OSError) -> bool:
    """Whether ``exc`` is the user's place, not the code: a full disk or
    quota (:data:`FULL_DISK`) anywhere, or a read-only or forbidden file
    (:data:`NOT_WRITABLE`) inside the run's output folder
    (:func:`~mmseg_whitebox.utils.run_lock.output_folder`, the folder the
    user named). The same error on any other path is a bug."""
    if exc.errno in FULL_DISK:
        return True
    folder, path = output_folder(), exc.filename
    if exc.errno not in NOT_WRITABLE or not folder or \
            not isinstance(path, (str, os.PathLike)):
        return False
    path = osp.abspath(os.fspath(path))
    return osp.commonpath([folder, path]) == folder
