"""A one-node Slurm cluster on localhost for the tests (tests/test_slurm.py).

:class:`SlurmCluster` writes a minimal ``slurm.conf`` and a munge key into
a folder of its own, starts ``munged``, ``slurmctld`` and ``slurmd`` as
daemons with pid files there (its own munge socket and Slurm ports, so a
Slurm or munge already running on the machine is neither used nor
touched), waits for the node to be idle, and stops exactly the processes
it started, by the ids in their pid files. Where the machine cannot run
it (not root, a program missing, a daemon that does not come up)
:meth:`SlurmCluster.start` raises :class:`SlurmUnavailable` naming the
reason, which the test turns into a skip. Debian's packages:
``apt-get install slurm-wlm munge`` (``.ci/install_slurm.sh``).
"""
import os
import os.path as osp
import shutil
import signal
import subprocess
import tempfile
import time
from typing import Dict, List, Optional

from mmseg_whitebox.utils.distributed import free_port

#: the programs the cluster needs (Debian: slurm-wlm, munge)
PROGRAMS = ('munged', 'slurmctld', 'slurmd', 'srun', 'sinfo', 'scontrol')
#: the partition the node is in
PARTITION = 'debug'
#: the node's name (slurmd is started as this node)
NODE = 'localhost'
#: how long a daemon may take to come up before the cluster counts as
#: unavailable: start-up only, never a limit on what a test measures
START_SECONDS = 60.0


class SlurmUnavailable(RuntimeError):
    """This machine cannot run the cluster; the message says why."""


def tail(path: str, lines: int = 15) -> str:
    """The last ``lines`` lines of a log file ('' if there is none)."""
    try:
        with open(path, errors='replace') as f:
            return ''.join(f.readlines()[-lines:]).strip()
    except OSError:
        return ''


def process_alive(pid: int) -> bool:
    """Whether process ``pid`` exists and is not a zombie."""
    try:
        with open(f'/proc/{pid}/stat') as f:
            return f.read().rsplit(')', 1)[1].split()[0] != 'Z'
    except (OSError, IndexError):
        return False


def process_name(pid: int) -> str:
    """The command name of process ``pid`` ('' if there is none)."""
    try:
        with open(f'/proc/{pid}/comm') as f:
            return f.read().strip()
    except OSError:
        return ''


class SlurmCluster:
    """munged + slurmctld + slurmd on localhost, all files under ``root``.

    ``env()`` is the environment for Slurm's commands (``SLURM_CONF`` set);
    ``stop()`` ends the daemons this object started and nothing else."""

    def __init__(self, root: str, cpus: Optional[int] = None) -> None:
        self.root = root
        self.cpus = cpus or os.cpu_count() or 1
        self.conf = osp.join(root, 'slurm.conf')
        self.munge_dir = osp.join(root, 'munge')
        # munged wants every folder above its socket searchable by all
        # (pytest's temporary folders are not) and a short path
        self.socket_dir = ''
        self.socket = ''
        self.pids: Dict[str, int] = {}

    def path(self, name: str) -> str:
        return osp.join(self.root, name)

    def env(self, base: Optional[Dict[str, str]] = None) -> Dict[str, str]:
        """``base`` (default: this process's environment) without any Slurm
        job's variables, with SLURM_CONF pointing at this cluster."""
        env = {k: v for k, v in (base or os.environ).items()
               if not k.startswith('SLURM_')}
        env['SLURM_CONF'] = self.conf
        return env

    # -- start ------------------------------------------------------------
    def start(self) -> None:
        """Start the three daemons and wait for the node to be idle; on any
        failure stop what was started and raise SlurmUnavailable."""
        if os.geteuid() != 0:
            raise SlurmUnavailable(
                'not root: the test cluster runs slurmd, which starts jobs '
                'as their user, as root')
        missing = [p for p in PROGRAMS if shutil.which(p) is None]
        if missing:
            raise SlurmUnavailable(
                f'{", ".join(missing)} not installed (Debian: apt-get '
                'install slurm-wlm munge, as .ci/install_slurm.sh does)')
        os.makedirs(self.munge_dir, mode=0o700, exist_ok=True)
        self.socket_dir = tempfile.mkdtemp(prefix='munge-', dir='/tmp')
        os.chmod(self.socket_dir, 0o755)
        self.socket = osp.join(self.socket_dir, 'munge.socket')
        for folder in ('spool', 'state'):
            os.makedirs(self.path(folder), mode=0o755, exist_ok=True)
        try:
            self._start_munged()
            self._write_conf()
            self._start('slurmctld', ['slurmctld', '-c', '-f', self.conf],
                        self.path('slurmctld.pid'),
                        self.path('slurmctld.log'))
            self._start('slurmd', ['slurmd', '-f', self.conf, '-N', NODE],
                        self.path('slurmd.pid'), self.path('slurmd.log'))
            self._wait_idle()
        except BaseException:
            self.stop()
            raise

    def _start_munged(self) -> None:
        key = osp.join(self.munge_dir, 'munge.key')
        with open(key, 'wb') as f:
            f.write(os.urandom(1024))
        os.chmod(key, 0o400)
        self._start('munged', [
            'munged', f'--socket={self.socket}', f'--key-file={key}',
            f'--pid-file={osp.join(self.munge_dir, "munged.pid")}',
            f'--log-file={osp.join(self.munge_dir, "munged.log")}',
            f'--seed-file={osp.join(self.munge_dir, "munged.seed")}'],
            osp.join(self.munge_dir, 'munged.pid'),
            osp.join(self.munge_dir, 'munged.log'))

    def _write_conf(self) -> None:
        settings = dict(
            ClusterName='whiteboxtest',
            SlurmctldHost=NODE,
            SlurmUser='root',
            SlurmdUser='root',
            AuthType='auth/munge',
            CredType='cred/munge',
            AuthInfo=f'socket={self.socket}',
            SlurmctldPort=free_port(),
            SlurmdPort=free_port(),
            SlurmctldPidFile=self.path('slurmctld.pid'),
            SlurmdPidFile=self.path('slurmd.pid'),
            SlurmctldLogFile=self.path('slurmctld.log'),
            SlurmdLogFile=self.path('slurmd.log'),
            SlurmdSpoolDir=self.path('spool'),
            StateSaveLocation=self.path('state'),
            MpiDefault='none',
            ProctrackType='proctrack/linuxproc',
            TaskPlugin='task/none',
            JobAcctGatherType='jobacct_gather/none',
            AccountingStorageType='accounting_storage/none',
            JobCompType='jobcomp/none',
            SchedulerType='sched/builtin',
            SelectType='select/cons_tres',
            SelectTypeParameters='CR_CPU',
            ReturnToService=2,
        )
        lines = [f'{k}={v}' for k, v in settings.items()] + [
            f'NodeName={NODE} CPUs={self.cpus} State=UNKNOWN',
            f'PartitionName={PARTITION} Nodes={NODE} Default=YES '
            'MaxTime=INFINITE State=UP']
        with open(self.conf, 'w') as f:
            f.write('\n'.join(lines) + '\n')

    def _start(self, name: str, cmd: List[str], pid_file: str,
               log_file: str) -> None:
        """Run ``cmd`` (a daemon that forks and writes ``pid_file``) and
        record the daemon's pid."""
        proc = subprocess.run(cmd, env=self.env(), capture_output=True,
                              text=True, stdin=subprocess.DEVNULL)
        if proc.returncode != 0:
            raise SlurmUnavailable(
                f'{name} failed to start (exit {proc.returncode}): '
                f'{(proc.stderr or proc.stdout).strip()} {tail(log_file)}')
        deadline = time.monotonic() + START_SECONDS
        while time.monotonic() < deadline:
            try:
                with open(pid_file) as f:
                    pid = int(f.read().split()[0])
            except (OSError, ValueError, IndexError):
                pid = 0
            if pid and process_alive(pid) and process_name(pid) == name:
                self.pids[name] = pid
                return
            time.sleep(0.2)
        raise SlurmUnavailable(f'{name} did not come up (no live process in '
                               f'{pid_file}): {tail(log_file)}')

    def _wait_idle(self) -> None:
        deadline = time.monotonic() + START_SECONDS
        state = ''
        while time.monotonic() < deadline:
            for name in self.pids:
                if not process_alive(self.pids[name]):
                    raise SlurmUnavailable(
                        f'{name} exited while starting: '
                        f'{tail(self.path(name + ".log"))}')
            proc = subprocess.run(
                ['sinfo', '-h', '-N', '-n', NODE, '-o', '%T'],
                env=self.env(), capture_output=True, text=True)
            state = (proc.stdout or proc.stderr).strip()
            if proc.returncode == 0 and state == 'idle':
                return
            time.sleep(0.5)
        raise SlurmUnavailable(
            f'node {NODE} not idle after start-up (sinfo: {state!r}): '
            f'{tail(self.path("slurmd.log"))}')

    # -- stop -------------------------------------------------------------
    def stop(self) -> None:
        """SIGTERM each daemon this object started (by pid, slurmd first;
        only while that pid is still the daemon), then SIGKILL whichever is
        still there after a grace period."""
        order = [n for n in ('slurmd', 'slurmctld', 'munged')
                 if n in self.pids]
        for name in order:
            pid = self.pids[name]
            if not process_alive(pid) or process_name(pid) != name:
                continue
            os.kill(pid, signal.SIGTERM)
            deadline = time.monotonic() + 30
            while process_alive(pid) and time.monotonic() < deadline:
                time.sleep(0.1)
            if process_alive(pid):
                os.kill(pid, signal.SIGKILL)
        self.pids.clear()
        if self.socket_dir:
            shutil.rmtree(self.socket_dir, ignore_errors=True)
            self.socket_dir = ''

    def logs(self) -> str:
        """The tails of the daemons' logs (for a failing test's message)."""
        return '\n'.join(
            f'--- {name}.log\n{tail(path)}' for name, path in (
                ('slurmctld', self.path('slurmctld.log')),
                ('slurmd', self.path('slurmd.log')),
                ('munged', osp.join(self.munge_dir, 'munged.log'))))
