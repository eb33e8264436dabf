"""One writer per output: a lock that a second run on the same output
folder (or file) meets at once, instead of both writing into it.

The lock is :class:`filelock.FileLock` on ``<folder>/.lock``
(``<file>.lock`` for a file): an OS lock the system drops when the
process ends, however it ends, so a killed run never blocks the next one.
Beside it, ``<lock>.owner`` records who holds it, for the
:class:`~.tool_error.ToolError` a second run gets and the note of a run
that takes over a killed one's. Only rank 0 of a distributed run locks.
A locked folder is also where a failure's traceback is logged
(:func:`output_folder`).
"""
from __future__ import annotations

import atexit
import errno
import json
import os
import os.path as osp
import socket
import sys
import time
import weakref
from dataclasses import asdict, dataclass
from typing import Optional

from filelock import FileLock, Timeout

from .atomic import write_json
from .input_checks import check_writable_folder
from .tool_error import ToolError

#: the lock file of a locked folder
LOCK_NAME = '.lock'
#: the suffix of the lock file of a locked output file
LOCK_SUFFIX = '.lock'
#: the suffix of the owner's record beside a lock file
OWNER_SUFFIX = '.owner'
#: environment variables that give a process's rank in a distributed run
#: before torch.distributed is initialised (torchrun, MPI, Slurm)
RANK_VARIABLES = ('RANK', 'OMPI_COMM_WORLD_RANK', 'PMI_RANK', 'SLURM_PROCID')
#: the longest command line a message repeats (the record has it all)
COMMAND_CHARS = 100
#: errors creating a lock file that are the output path's, not a bug
USER_ERRNOS = tuple(getattr(errno, name) for name in (
    'EACCES', 'EPERM', 'EROFS', 'ENOSPC', 'EDQUOT', 'ENOENT', 'ENOTDIR')
    if hasattr(errno, name))


@dataclass
class LockRecord:
    """Who holds a lock: what is written beside the lock file."""
    pid: int
    host: str
    started: str
    command: str

    @classmethod
    def of_this_process(cls) -> 'LockRecord':
        return cls(pid=os.getpid(), host=socket.gethostname(),
                   started=time.strftime('%Y-%m-%d %H:%M:%S %z'),
                   command=' '.join([osp.basename(sys.executable)] +
                                    sys.argv))

    @classmethod
    def parse(cls, text: str) -> Optional['LockRecord']:
        """The record in ``text``; None if it is empty or damaged."""
        try:
            data = json.loads(text)
            return cls(pid=int(data['pid']), host=str(data['host']),
                       started=str(data['started']),
                       command=str(data['command']))
        except (ValueError, KeyError, TypeError):
            return None

    def __str__(self) -> str:
        command = self.command
        if len(command) > COMMAND_CHARS:
            command = command[:COMMAND_CHARS] + '...'
        return (f'PID {self.pid} on {self.host}, started {self.started} '
                f'({command})')

    def is_this_process(self) -> bool:
        return self.pid == os.getpid() and self.host == socket.gethostname()


def owner_path(lock_path: str) -> str:
    """The file beside ``lock_path`` that names its holder."""
    return lock_path + OWNER_SUFFIX


def read_owner(lock_path: str) -> Optional[LockRecord]:
    """The record beside ``lock_path``; None if there is none (or it is
    unreadable: its writer was killed while writing, or it is gone)."""
    try:
        with open(owner_path(lock_path), encoding='utf-8',
                  errors='replace') as f:
            return LockRecord.parse(f.read())
    except OSError:
        return None


#: the folder the current run writes into (see :func:`output_folder`)
_OUTPUT_FOLDER: Optional[str] = None
#: the handles of locks held in this process
_HANDLES: 'weakref.WeakSet[RunLock]' = weakref.WeakSet()


class RunLock:
    """A handle on a held lock, given up by :meth:`release`, its ``with``
    block's end, garbage collection or the process's end. Handles of one
    lock in a process share one :class:`FileLock`: the lock is released
    and its files removed when the last handle goes."""

    def __init__(self, lock: Optional[FileLock]) -> None:
        self.path = lock.lock_file if lock else None
        self.owner_path = owner_path(lock.lock_file) if lock else None
        self._finalizer = None  # not locked here (a secondary rank)
        if lock is not None:
            self._finalizer = weakref.finalize(self, _release, lock)
            _HANDLES.add(self)

    def release(self) -> None:
        if self._finalizer is not None:
            self._finalizer()

    def __enter__(self) -> 'RunLock':
        return self

    def __exit__(self, *exc_info) -> None:
        self.release()


def _release(lock: FileLock) -> None:
    """Drop one hold of ``lock``; with the last, remove the owner record
    and the lock file, then release the lock. A forked child holds nothing
    (counter 0) and leaves its parent's files alone."""
    try:
        if lock.lock_counter == 1:
            # removed while still held: a run that locks the file just
            # after finds it unlinked (filelock checks) and is refused
            for path in (owner_path(lock.lock_file), lock.lock_file):
                try:
                    os.remove(path)
                except OSError:
                    pass  # e.g. Windows keeps a locked file: reused next time
    finally:
        lock.release()


@atexit.register
def _release_all() -> None:
    """Give up every handle at exit, before filelock's own exit handler
    (registered earlier, so run later) releases the locks."""
    for handle in list(_HANDLES):
        handle.release()


def secondary_rank() -> bool:
    """Whether this is a distributed run's process other than rank 0."""
    try:
        import torch.distributed as dist
        if dist.is_available() and dist.is_initialized():
            return dist.get_rank() != 0
    except ImportError:
        pass
    for name in RANK_VARIABLES:
        value = os.environ.get(name, '').strip()
        if value.isdigit():
            return int(value) != 0
    return False


def _refuse(label: str, path: str, record: Optional[LockRecord]) -> ToolError:
    who = f'by {record}' if record else 'by another run (no record yet)'
    return ToolError(
        f'{label} is in use {who}: one run writes there at a time. Wait '
        'for that run to end, stop it, or choose another output (the lock '
        f'is {path!r})')


def acquire(path: str, label: str) -> RunLock:
    """Lock the lock file ``path`` without waiting (``label`` names the
    output in messages). Raises :class:`ToolError` when another process
    holds it; notes on stderr a dead holder's record it replaces."""
    if secondary_rank():
        return RunLock(None)
    # one instance per file in this process, released by any thread
    lock = FileLock(path, thread_local=False, is_singleton=True)
    try:
        lock.acquire(timeout=0)
    except Timeout:
        raise _refuse(label, path, read_owner(path)) from None
    except OSError as exc:
        if exc.errno not in USER_ERRNOS:
            raise
        raise ToolError(f'cannot create the lock file {path!r} of '
                        f'{label} ({exc.strerror}): choose a writable '
                        'output') from exc
    if lock.lock_counter > 1:  # held by this process already
        return RunLock(lock)
    try:
        previous = read_owner(path)
        if previous is not None and not previous.is_this_process():
            print(f'note: taking over the lock {path!r} of {label}: it '
                  f'was held by {previous}, which no longer holds it '
                  '(the run was killed or crashed)', file=sys.stderr)
        write_json(owner_path(path), asdict(LockRecord.of_this_process()))
    except BaseException:
        lock.release()
        raise
    return RunLock(lock)


def note_output_folder(folder: str) -> None:
    """Record ``folder`` as where the current run writes."""
    global _OUTPUT_FOLDER
    _OUTPUT_FOLDER = osp.abspath(folder)


def output_folder() -> Optional[str]:
    """The folder recorded by :func:`note_output_folder`, if any."""
    return _OUTPUT_FOLDER


def lock_folder(folder: str, option: str = '--out') -> RunLock:
    """Lock the output folder ``folder`` (given as ``option``), creating
    it; a :class:`ToolError` if it cannot be written or is locked."""
    check_writable_folder(folder, option)
    note_output_folder(folder)
    return acquire(osp.join(folder, LOCK_NAME), f'{option} {folder!r}')


def lock_output_file(path: str, option: str = '--out') -> RunLock:
    """Lock the output file ``path`` (given as ``option``) through
    ``<path>.lock``; its folder must exist."""
    return acquire(path + LOCK_SUFFIX, f'{option} {path!r}')
