"""One writer per output: an advisory lock that a second run on the same
output folder (or file) meets at once, instead of both writing into it.

The lock is a file, ``<folder>/.lock`` (``<file>.lock`` for an output
file), holding the owner's record: PID, host, start time and command
line. On POSIX the owner also holds ``fcntl.flock`` on it, which the
kernel drops when the process ends however it ends; so a lock file left
by a killed run (its record still there, its flock gone) is taken over by
the next run, with a note. Where flock is not available (some network
file systems, Windows) the record decides: a lock whose process is still
running on this host is respected, one whose process is gone is taken
over.

A second run refused the lock gets a :class:`~.tool_error.ToolError`
naming the running one (exit status 2, before it has written anything).
Only the first process of a distributed run (rank 0) locks: its other
processes share its lock.

The folder a run locks is also the run's output folder: a failure's
traceback is logged there (:func:`output_folder`).
"""
from __future__ import annotations

import errno
import json
import os
import os.path as osp
import socket
import sys
import time
import weakref
from dataclasses import asdict, dataclass
from typing import Dict, Optional

from .input_checks import check_writable_folder
from .tool_error import ToolError

try:
    import fcntl
except ImportError:  # Windows: the PID record alone decides
    fcntl = None

#: the lock file of a locked folder
LOCK_NAME = '.lock'
#: the suffix of the lock file of a locked output file
LOCK_SUFFIX = '.lock'
#: environment variables that give a process's rank in a distributed run
#: before torch.distributed is initialised (torchrun, MPI, Slurm)
RANK_VARIABLES = ('RANK', 'OMPI_COMM_WORLD_RANK', 'PMI_RANK', 'SLURM_PROCID')
#: the longest command line a message repeats (the lock file has it all)
COMMAND_CHARS = 100
#: tries to get a lock file that another process removes meanwhile
ATTEMPTS = 10


@dataclass
class LockRecord:
    """Who holds a lock: what is written into the lock file."""
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
        """The record in ``text``; None if it is empty or damaged (the
        writer was killed while writing it)."""
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

    def running(self) -> bool:
        """Whether the process may still run: it does on this host, or
        the record is another host's (which cannot be asked)."""
        if self.host != socket.gethostname():
            return True
        try:
            os.kill(self.pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:  # another user's process
            return True
        return True


class _Held:
    """A lock file this process holds: its open descriptor (which holds
    the flock) and how many :class:`RunLock` handles share it."""

    def __init__(self, path: str, fd: int) -> None:
        self.path, self.fd, self.count = path, fd, 0
        self.pid = os.getpid()


#: lock files held by this process (real path -> _Held)
_HELD: Dict[str, _Held] = {}
#: the folder the current run writes into (see :func:`output_folder`)
_OUTPUT_FOLDER: Optional[str] = None


class RunLock:
    """A handle on a held lock. :meth:`release` (or leaving its ``with``
    block, or the handle being garbage collected, or the process ending)
    gives it up; the lock file is removed when the last handle of this
    process goes. Handles of the same lock in one process share it."""

    def __init__(self, held: Optional[_Held]) -> None:
        self.path = held.path if held else None
        if held is not None:
            held.count += 1
            self._finalizer = weakref.finalize(self, _release, held)
        else:  # not locked here (a secondary rank)
            self._finalizer = None

    def release(self) -> None:
        if self._finalizer is not None:
            self._finalizer()

    def __enter__(self) -> 'RunLock':
        return self

    def __exit__(self, *exc_info) -> None:
        self.release()


def _release(held: _Held) -> None:
    """Drop one handle of ``held``; with the last, remove the lock file
    and close it (which drops the flock). A forked child (a dataloader
    worker) leaves its parent's lock alone."""
    if os.getpid() != held.pid:
        return
    held.count -= 1
    if held.count > 0:
        return
    _HELD.pop(osp.realpath(held.path), None)
    try:
        if osp.exists(held.path) and osp.samestat(os.stat(held.path),
                                                  os.fstat(held.fd)):
            os.remove(held.path)  # before the flock goes: nobody else has it
    except OSError:
        pass  # a lock file that cannot be removed is taken over next time
    finally:
        os.close(held.fd)


def secondary_rank() -> bool:
    """Whether this is a process of a distributed run other than the
    first (it leaves the locking to rank 0)."""
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


def _read(fd: int) -> Optional[LockRecord]:
    os.lseek(fd, 0, os.SEEK_SET)
    chunks = []
    while True:
        chunk = os.read(fd, 65536)
        if not chunk:
            break
        chunks.append(chunk)
    return LockRecord.parse(b''.join(chunks).decode('utf-8', 'replace'))


def _write(fd: int, record: LockRecord) -> None:
    data = json.dumps(asdict(record)).encode('utf-8')
    os.ftruncate(fd, 0)
    os.lseek(fd, 0, os.SEEK_SET)
    os.write(fd, data)
    os.fsync(fd)


def _refuse(label: str, path: str, record: Optional[LockRecord]) -> ToolError:
    who = f'by {record}' if record else 'by another run (no record yet)'
    return ToolError(
        f'{label} is in use {who}: one run writes there at a time. Wait '
        'for that run to end, stop it, or choose another output; if no such '
        f'run exists any more, delete the lock file {path!r}')


def _flock(fd: int) -> Optional[bool]:
    """Take the flock of ``fd`` without waiting: True if taken, False if
    another process holds it, None where flock cannot be used."""
    if fcntl is None:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except BlockingIOError:
        return False
    except OSError as exc:
        if exc.errno in (errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOTSUP,
                         errno.EINVAL, errno.ENOSYS):
            return None
        raise


def acquire(path: str, label: str) -> RunLock:
    """Lock the lock file ``path`` for this process (``label`` names the
    output in messages). Raises :class:`ToolError` when another running
    process holds it; takes over, with a note on stderr, a lock whose
    process has ended."""
    if secondary_rank():
        return RunLock(None)
    key = osp.realpath(path)
    held = _HELD.get(key)
    if held is not None and held.pid == os.getpid():
        return RunLock(held)
    for _ in range(ATTEMPTS):
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise ToolError(f'cannot create the lock file {path!r} of '
                            f'{label} ({exc.strerror}): choose a writable '
                            'output') from exc
        try:
            locked = _flock(fd)
            previous = _read(fd)
            if locked is False:
                raise _refuse(label, path, previous)
            if locked is None and previous is not None and \
                    not previous.is_this_process() and previous.running():
                raise _refuse(label, path, previous)
            try:  # still the file at ``path``, not one its owner removed?
                current = os.stat(path)
            except FileNotFoundError:
                current = None
            if current is None or not osp.samestat(current, os.fstat(fd)):
                os.close(fd)
                continue
            if previous is not None and not previous.is_this_process():
                print(f'note: taking over the lock {path!r} of {label}: it '
                      f'was held by {previous}, which no longer holds it '
                      '(the run was killed or crashed)', file=sys.stderr)
            _write(fd, LockRecord.of_this_process())
        except BaseException:
            try:
                os.close(fd)
            except OSError:
                pass
            raise
        held = _HELD[key] = _Held(path, fd)
        return RunLock(held)
    raise ToolError(f'could not lock {path!r} of {label}: another process '
                    'keeps removing it; is a run being started there?')


def note_output_folder(folder: str) -> None:
    """Record ``folder`` as where the current run writes (where
    :func:`~mmseg_whitebox.cli.run_tool` logs a failure's traceback)."""
    global _OUTPUT_FOLDER
    _OUTPUT_FOLDER = osp.abspath(folder)


def output_folder() -> Optional[str]:
    """The folder recorded by :func:`note_output_folder` (every locked
    folder is recorded), if any."""
    return _OUTPUT_FOLDER


def lock_folder(folder: str, option: str = '--out') -> RunLock:
    """Lock the output folder ``folder`` (given as ``option``), creating
    it; raises :class:`ToolError` if it cannot be written or another run
    writes there."""
    check_writable_folder(folder, option)
    note_output_folder(folder)
    return acquire(osp.join(folder, LOCK_NAME), f'{option} {folder!r}')


def lock_output_file(path: str, option: str = '--out') -> RunLock:
    """Lock the output file ``path`` (given as ``option``) through
    ``<path>.lock``; its folder must exist."""
    return acquire(path + LOCK_SUFFIX, f'{option} {path!r}')
