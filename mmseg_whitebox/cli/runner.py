"""How every script in ``tools/`` runs: failures reported as
:mod:`.errors` says, Ctrl-C in a tool that saves as it goes, and the end
of a distributed run's process group."""
from __future__ import annotations

import atexit
import contextlib
import gc
import os
import os.path as osp
import sys
from typing import Any, Callable, Iterator, NoReturn, Optional

from .errors import recorded_parser_errors, report, take_debug_flag

#: exit status of a tool stopped with Ctrl-C (128 + SIGINT, as shells say)
INTERRUPTED = 130


def run_tool(main: Callable[..., Any], argv: Optional[list] = None) -> Any:
    """Run a tool's ``main(argv)``, its failure reported by
    :func:`~.errors.report` (a user's mistake: one line, exit status 2; a
    bug: exit status 1, traceback logged). Every script in ``tools/`` ends
    with ``run_tool(main)``.

    A process group the tool started is destroyed before the process
    exits, and a distributed worker then leaves through
    :func:`exit_distributed_worker`: gloo's threads may still be releasing
    tensors, and one waiting for the GIL while the interpreter finalises
    aborts the rank (SIGABRT; pytorch/pytorch#190489).

    The imports (torch, mmengine, mmseg) live as long as the process, so
    they are frozen out of the garbage collector's walks (``gc.freeze``;
    docs/benchmarks.md, "Tool start")."""
    gc.freeze()
    argv = take_debug_flag(argv)
    try:
        with recorded_parser_errors():
            result, status = main(argv), 0
    except Exception as exc:  # noqa: BLE001 (every failure is reported)
        prog = osp.basename(sys.argv[0]) if sys.argv and sys.argv[0] else ''
        result, status = None, report(prog, exc)
    finally:
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
    """Ctrl-C in the block: call ``on_interrupt`` (e.g. plot what is
    finished), say where the finished ``what`` are and how to continue,
    and exit with :data:`INTERRUPTED` instead of a traceback."""
    try:
        yield
    except KeyboardInterrupt as exc:
        on_interrupt()
        print(f'\ninterrupted: finished {what} are saved in {out_dir}; '
              'rerun with --resume to continue', file=sys.stderr)
        raise SystemExit(INTERRUPTED) from exc


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
    """Exit with ``status`` after the exit handlers and a flush, without
    the interpreter's finalisation (see :func:`run_tool`)."""
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (AttributeError, OSError, ValueError):
            pass  # closed or replaced streams: nothing left to flush
    os._exit(status)
