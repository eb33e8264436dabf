"""Runs the tools for the tests from one pre-imported interpreter.

Every tool run starts a Python that spends about 7 CPU seconds importing
torch, mmengine, mmseg and this package before it reads its first
argument, and the suite starts about 250 of them: half of its CPU time.
This server imports them (and what a run imports next,
:data:`RUN_IMPORTS`) once and forks a child per run. The child is a
tool run as ``python TOOL ARGS`` would run it: its own process (group),
``sys.argv`` and ``sys.path[0]`` as for a script, the caller's working
directory and environment, stdin on ``/dev/null``, stdout and stderr on
files the caller reads, the exit status of ``sys.exit`` (1 and the
traceback on stderr for an uncaught exception), then the interpreter's
exit steps (threads joined, ``atexit``).

The server itself computes nothing (no torch thread pool exists when it
forks). ``_helpers.run_tool`` uses it for a plain ``TOOL.py`` run in the
caller's environment; a run with extra environment variables (read when
an interpreter starts, e.g. ``PYTHONPATH``) starts a fresh interpreter.
Tests of what happens *at* import (``test_import_order``, ``test_compat``,
``test_wheel``) start their own interpreters.

Protocol, one JSON object per line: a request ``{"args", "cwd", "env",
"stdout", "stderr", "timeout"}`` on stdin; the answer ``{"returncode",
"timed_out"}`` on stdout.
"""
import importlib
import json
import os
import signal
import sys
import time

import mmseg_whitebox  # noqa: F401  (compat + registration first)
import mmseg.apis  # noqa: F401,E402
import mmseg_whitebox.apis  # noqa: F401,E402

#: what a tool run imports once it has read its arguments (the CLI,
#: mmseg's registries, the Runner's visualizer figure and environment
#: report, IoUMetric's table): imported by :func:`serve` too, a
#: 2-iteration training run took 2.39 s after the imports above and
#: 1.46 s after these
RUN_IMPORTS = ('mmseg_whitebox.cli', 'mmseg.datasets', 'mmseg.engine',
               'mmseg.evaluation', 'matplotlib.figure',
               'matplotlib.backends.backend_agg', 'prettytable',
               'torch.utils.cpp_extension')


def _redirect(fd: int, path: str, flags: int) -> None:
    target = os.open(path, flags, 0o644)
    os.dup2(target, fd)
    os.close(target)


def run_child(request: dict, channels: tuple) -> None:
    """In the forked child: become ``python TOOL ARGS``; never returns."""
    import atexit
    import io
    import runpy
    import tempfile
    import threading
    import traceback
    code = 1
    try:
        for fd in channels:
            os.close(fd)
        os.setpgid(0, 0)
        os.chdir(request['cwd'])
        os.environ.clear()
        os.environ.update(request['env'])
        tempfile.tempdir = None  # TMPDIR as this run's environment says
        _redirect(0, os.devnull, os.O_RDONLY)
        _redirect(1, request['stdout'], os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        _redirect(2, request['stderr'], os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        unbuffered = bool(request['env'].get('PYTHONUNBUFFERED'))
        for name, fd in (('stdout', 1), ('stderr', 2)):
            stream = io.TextIOWrapper(
                io.FileIO(fd, 'w', closefd=False),
                encoding=sys.__stderr__.encoding, errors='backslashreplace'
                if name == 'stderr' else sys.__stdout__.errors,
                line_buffering=False, write_through=unbuffered
                or name == 'stderr')
            setattr(sys, name, stream)
            setattr(sys, f'__{name}__', stream)
        sys.stdin = sys.__stdin__ = open(0, closefd=False)
        script = request['args'][0]
        sys.argv = list(request['args'])
        sys.path[0] = os.path.dirname(os.path.abspath(script))
        try:
            runpy.run_path(script, run_name='__main__')
            code = 0
        except SystemExit as stop:
            if stop.code is None:
                code = 0
            elif isinstance(stop.code, int):
                code = stop.code
            else:
                print(stop.code, file=sys.stderr)
                code = 1
        except BaseException:  # noqa: B902  (as the interpreter reports)
            traceback.print_exc()
            code = 1
        threading._shutdown()  # type: ignore[attr-defined]
        atexit._run_exitfuncs()
        sys.stdout.flush()
        sys.stderr.flush()
    finally:
        os._exit(code)


def wait(pid: int, timeout: float) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return {'returncode': os.waitstatus_to_exitcode(status),
                    'timed_out': False}
        if time.monotonic() > deadline:
            try:
                os.killpg(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            os.waitpid(pid, 0)
            return {'returncode': -signal.SIGKILL, 'timed_out': True}
        time.sleep(0.02)


def serve() -> None:
    # the protocol moves off fds 0 and 1, which the children take over
    requests = os.fdopen(os.dup(0), 'r')
    answers = os.fdopen(os.dup(1), 'w')
    _redirect(0, os.devnull, os.O_RDONLY)
    os.dup2(2, 1)
    # after the move: an import may print (onedl's mmseg.datasets does)
    for module in RUN_IMPORTS:
        importlib.import_module(module)
    channels = (requests.fileno(), answers.fileno())
    for line in requests:
        request = json.loads(line)
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            run_child(request, channels)
        # the child is its own group before the parent can kill it
        try:
            os.setpgid(pid, pid)
        except (PermissionError, ProcessLookupError):
            pass
        answers.write(json.dumps(wait(pid, request['timeout'])) + '\n')
        answers.flush()


if __name__ == '__main__':
    serve()
