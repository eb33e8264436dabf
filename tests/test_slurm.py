"""Slurm: tools/slurm_train.sh and tools/slurm_test.sh, and ``--launcher
slurm`` on CPU processes (gloo).

The scripts' command lines are checked against a stand-in ``srun`` that
records its arguments (no Slurm needed). The real test starts a one-node
Slurm on localhost (munged, slurmctld, slurmd: tests/_slurm_cluster.py),
trains a demo config for 2 iterations in 2 tasks with slurm_train.sh and
tests its checkpoint in 2 tasks with slurm_test.sh. Where Slurm cannot run
here (not root, not installed: ``.ci/install_slurm.sh``, a daemon that does
not start) that test skips naming the reason; with ``REQUIRE_SLURM_TEST=1``
(set by .ci/run once Slurm is installed) it fails instead. Marked
``slurm`` (deselect with ``-m "not slurm"``)."""
import glob
import json
import os
import os.path as osp
import shutil
import stat
import sys

import pytest
import torch.distributed as dist

from _helpers import (DEMO_SEGMENTER, REPO, run_in_session,
                      small_run_options)
from _slurm_cluster import PARTITION, SlurmCluster, SlurmUnavailable
from mmseg_whitebox.utils.distributed import free_port, slurm_environment
from mmseg_whitebox.utils.tool_error import ToolError

pytestmark = pytest.mark.slurm

#: the arguments that make the tools run on CPU processes (gloo); the
#: scripts then ask srun for no GPUs
DEVICE_ARGS = ['--device', 'cpu']
#: tasks of the Slurm job (processes; the node has this many CPUs or more)
NTASKS = 2
#: what the tests set for every script they run
SCRIPT_ENV = dict(PYTHONUNBUFFERED='1', CUDA_VISIBLE_DEVICES='',
                  OMP_NUM_THREADS='1')
#: seconds a Slurm job may run before the test stops it as hung (a bound
#: on a hang, not on speed: the job takes well under a minute)
JOB_TIMEOUT = 600


def run(args, env, timeout=JOB_TIMEOUT):
    """``args`` from the repository root (:func:`run_in_session`)."""
    return run_in_session(args, env, timeout)


# -- the scripts' command lines (a stand-in srun) --------------------------
@pytest.fixture
def fake_srun(tmp_path):
    """A PATH whose ``srun`` writes its arguments, one a line, to a file
    and exits 0; ``(env, read)``: the environment, and a function that
    returns the recorded arguments."""
    bin_dir = tmp_path / 'bin'
    bin_dir.mkdir()
    record = tmp_path / 'srun-args'
    srun = bin_dir / 'srun'
    srun.write_text(f'#!/bin/sh\nprintf "%s\\n" "$@" > {record}\n')
    srun.chmod(srun.stat().st_mode | stat.S_IEXEC)
    env = {k: v for k, v in os.environ.items()
           if k not in ('GPUS', 'GPUS_PER_NODE', 'CPUS_PER_TASK', 'GRES',
                        'SRUN_ARGS')}
    env.update(PATH=f'{bin_dir}:{env["PATH"]}', PYTHON=sys.executable)

    def read():
        return record.read_text().splitlines()

    return env, read


def test_slurm_scripts_build_the_srun_command(fake_srun, tmp_path):
    env, read = fake_srun
    ckpt = tmp_path / 'x.pth'
    ckpt.write_bytes(b'')
    rc, out = run(['tools/slurm_train.sh', 'gpu', 'job1', DEMO_SEGMENTER,
                   'work', '--cfg-options', 'a=1'], env)
    assert rc == 0, out
    train = osp.join(REPO, 'tools', 'train.py')
    assert read() == [
        '-p', 'gpu', '--job-name=job1', '--gres=gpu:8', '--ntasks=8',
        '--ntasks-per-node=8', '--cpus-per-task=5', '--kill-on-bad-exit=1',
        sys.executable, '-u', train, DEMO_SEGMENTER, '--launcher', 'slurm',
        '--work-dir', 'work', '--cfg-options', 'a=1']
    assert 'slurm_train.sh: srun -p gpu' in out  # the command is shown
    # GPUS tasks over nodes of GPUS_PER_NODE; SRUN_ARGS split at spaces;
    # no WORK_DIR when the first argument is an option
    rc, out = run(['tools/slurm_train.sh', 'gpu', 'job2', DEMO_SEGMENTER,
                   '--resume'],
                  dict(env, GPUS='16', CPUS_PER_TASK='2',
                       SRUN_ARGS='--quotatype=auto -x node1'))
    assert rc == 0, out
    args = read()
    assert args[:10] == [
        '-p', 'gpu', '--job-name=job2', '--gres=gpu:8', '--ntasks=16',
        '--ntasks-per-node=8', '--cpus-per-task=2', '--kill-on-bad-exit=1',
        '--quotatype=auto', '-x']
    assert args[-4:] == [DEMO_SEGMENTER, '--launcher', 'slurm', '--resume']
    assert '--work-dir' not in args
    # fewer tasks than GPUS_PER_NODE: one node with that many GPUs
    rc, out = run(['tools/slurm_test.sh', 'gpu', 'job3', DEMO_SEGMENTER,
                   str(ckpt)], dict(env, GPUS='2'))
    assert rc == 0, out
    args = read()
    assert '--gres=gpu:2' in args and '--ntasks-per-node=2' in args
    assert args[-5:] == [osp.join(REPO, 'tools', 'test.py'), DEMO_SEGMENTER,
                         str(ckpt), '--launcher', 'slurm']
    # a CPU run asks for no GPUs: --device cpu in ARGS, or GRES=none
    for extra, more_env in ((['--device', 'cpu'], {}),
                            (['--device=cpu'], {}),
                            ([], dict(GRES='none'))):
        rc, out = run(['tools/slurm_train.sh', 'cpu', 'job4',
                       DEMO_SEGMENTER] + extra, dict(env, **more_env))
        assert rc == 0, out
        assert not any(a.startswith('--gres') for a in read()), extra
    rc, out = run(['tools/slurm_train.sh', 'gpu', 'job5', DEMO_SEGMENTER,
                   '--device', 'cpu'], dict(env, GRES='gpu:a100:4'))
    assert rc == 0 and '--gres=gpu:a100:4' in read(), out


@pytest.mark.parametrize('script,args,message', [
    ('slurm_train.sh', [], 'expected PARTITION, JOB_NAME and CONFIG, got 0'),
    ('slurm_test.sh', ['p', 'j', DEMO_SEGMENTER],
     'expected PARTITION, JOB_NAME, CONFIG and CHECKPOINT, got 3'),
    ('slurm_train.sh', ['p', 'j', 'nope.py'],
     "config file 'nope.py' does not exist"),
    ('slurm_test.sh', ['p', 'j', DEMO_SEGMENTER, 'nope.pth'],
     "checkpoint 'nope.pth' does not exist"),
    ('slurm_train.sh', ['', 'j', DEMO_SEGMENTER], 'PARTITION is empty'),
])
def test_slurm_scripts_check_their_arguments(fake_srun, script, args,
                                             message):
    env, _ = fake_srun
    rc, out = run([f'tools/{script}'] + args, env)
    assert rc == 2 and f'{script}: error: {message}' in out, out
    assert 'unbound variable' not in out


def test_slurm_scripts_check_the_environment(fake_srun, tmp_path):
    env, _ = fake_srun
    for name in ('GPUS', 'GPUS_PER_NODE', 'CPUS_PER_TASK'):
        rc, out = run(['tools/slurm_train.sh', 'p', 'j', DEMO_SEGMENTER],
                      dict(env, **{name: '0'}))
        assert rc == 2, out
        assert f"{name} must be a positive integer, got '0'" in out
    # a PATH with what the script needs besides srun
    bare = tmp_path / 'bare'
    bare.mkdir()
    for program in ('bash', 'basename', 'dirname'):
        (bare / program).symlink_to(shutil.which(program))
    rc, out = run(['tools/slurm_train.sh', 'p', 'j', DEMO_SEGMENTER],
                  dict(env, PATH=str(bare)))
    assert rc == 2 and 'srun not found on PATH' in out, out
    for script, usage in (('slurm_train.sh',
                           'PARTITION JOB_NAME CONFIG [WORK_DIR]'),
                          ('slurm_test.sh',
                           'PARTITION JOB_NAME CONFIG CHECKPOINT')):
        rc, out = run([f'tools/{script}', '--help'], env)
        assert rc == 0 and f'usage: {script} {usage}' in out
        for variable in ('GPUS_PER_NODE', 'CPUS_PER_TASK', 'SRUN_ARGS',
                         'GRES', 'MASTER_PORT', '--device cpu'):
            assert variable in out, (script, variable)


# -- the ranks from srun's variables ---------------------------------------
SRUN_VARIABLES = dict(SLURM_PROCID='3', SLURM_NTASKS='4', SLURM_LOCALID='1',
                      SLURM_NODELIST='node[07-08]')


def test_slurm_environment_from_srun_variables(tmp_path, monkeypatch):
    """RANK, WORLD_SIZE and LOCAL_RANK from srun's variables; the master
    is the node list's first host as scontrol expands it (a stand-in
    scontrol here), unless MASTER_ADDR is set; the port is env_cfg's, else
    MASTER_PORT, else 29500."""
    scontrol = tmp_path / 'scontrol'
    scontrol.write_text('#!/bin/sh\n[ "$1 $2 $3" = "show hostnames '
                        'node[07-08]" ] && printf "node07\\nnode08\\n"\n')
    scontrol.chmod(0o755)
    monkeypatch.setenv('PATH', f'{tmp_path}:{os.environ["PATH"]}')
    assert slurm_environment(SRUN_VARIABLES) == dict(
        RANK='3', WORLD_SIZE='4', LOCAL_RANK='1', MASTER_ADDR='node07',
        MASTER_PORT='29500')
    env = slurm_environment(dict(SRUN_VARIABLES, MASTER_PORT='1234',
                                 MASTER_ADDR='10.0.0.1'))
    assert (env['MASTER_ADDR'], env['MASTER_PORT']) == ('10.0.0.1', '1234')
    env = slurm_environment(dict(SRUN_VARIABLES, MASTER_PORT='1234'),
                            port=4321)
    assert env['MASTER_PORT'] == '4321'


def test_slurm_environment_errors_are_one_line(tmp_path, monkeypatch):
    without = {k: v for k, v in SRUN_VARIABLES.items() if k != 'SLURM_PROCID'}
    with pytest.raises(ToolError, match='SLURM_PROCID not set .*srun'):
        slurm_environment(without)
    with pytest.raises(ToolError, match="SLURM_NTASKS='x' is not a number"):
        slurm_environment(dict(SRUN_VARIABLES, SLURM_NTASKS='x'))
    monkeypatch.setenv('PATH', str(tmp_path))  # no scontrol
    with pytest.raises(ToolError, match='scontrol command is not on PATH'):
        slurm_environment(SRUN_VARIABLES)
    failing = tmp_path / 'scontrol'
    failing.write_text('#!/bin/sh\necho "Invalid node name" >&2\nexit 1\n')
    failing.chmod(0o755)
    with pytest.raises(ToolError, match='Invalid node name.*MASTER_ADDR'):
        slurm_environment(SRUN_VARIABLES)


# -- a real one-node Slurm -------------------------------------------------
@pytest.fixture(scope='module')
def slurm_cluster(tmp_path_factory):
    """munged + slurmctld + slurmd on localhost, stopped (by their process
    ids) after the module; a skip naming the reason where they cannot
    run, a failure instead under REQUIRE_SLURM_TEST=1."""
    if not (dist.is_available() and dist.is_gloo_available()):
        pytest.skip('torch.distributed with gloo not available')
    cluster = SlurmCluster(str(tmp_path_factory.mktemp('slurm')),
                           cpus=max(NTASKS, os.cpu_count() or 1))
    try:
        cluster.start()
    except SlurmUnavailable as exc:
        if os.environ.get('REQUIRE_SLURM_TEST') == '1':
            pytest.fail(f'Slurm required (REQUIRE_SLURM_TEST=1) but: {exc}')
        pytest.skip(f'no Slurm cluster here: {exc}')
    yield cluster
    cluster.stop()


def _metrics(work_dir: str) -> dict:
    found = glob.glob(osp.join(work_dir, '*', '*.json'))
    assert len(found) == 1, found
    with open(found[0]) as f:
        return json.load(f)


@pytest.mark.slow
def test_slurm_train_then_test(slurm_cluster, tiny_ade, tmp_path):
    """slurm_train.sh: 2 tasks, 2 iterations of the demo Segmenter on
    gloo; slurm_test.sh on its checkpoint in 2 tasks: both exit 0, the
    checkpoint is written, the metrics printed and saved."""
    env = slurm_cluster.env(dict(
        os.environ, PYTHON=sys.executable, GPUS=str(NTASKS),
        GPUS_PER_NODE=str(NTASKS), CPUS_PER_TASK='1',
        MASTER_PORT=str(free_port()), **SCRIPT_ENV))
    work = tmp_path / 'work'
    opts = small_run_options(tiny_ade, iters=2)
    rc, log = run(['tools/slurm_train.sh', PARTITION, 'wb-train',
                   DEMO_SEGMENTER, str(work)] + DEVICE_ARGS +
                  ['--cfg-options'] + opts, env)
    where = f'{log[-6000:]}\n{slurm_cluster.logs()}'
    assert rc == 0, where
    assert 'Distributed launcher: slurm' in log, where
    assert 'GPU number: 2' in log, where  # mmengine's name for world size
    assert "backend='gloo'" in log, where
    assert 'Iter(train) [2/2]' in log, where
    ckpt = work / 'iter_2.pth'
    assert ckpt.is_file(), where
    for error in ('_cuda_setDevice', 'Traceback'):
        assert error not in log, where

    rc, log = run(['tools/slurm_test.sh', PARTITION, 'wb-test',
                   DEMO_SEGMENTER, str(ckpt)] + DEVICE_ARGS +
                  ['--work-dir', str(tmp_path / 'test'), '--cfg-options'] +
                  opts, dict(env, MASTER_PORT=str(free_port())))
    where = f'{log[-6000:]}\n{slurm_cluster.logs()}'
    assert rc == 0, where
    assert "backend='gloo'" in log, where
    assert 'Iter(test) [' in log and 'mIoU' in log, where
    metrics = _metrics(str(tmp_path / 'test'))
    assert {'mIoU', 'aAcc', 'mAcc'} <= set(metrics), metrics


def test_setup_distributed_under_slurm_on_cpu(monkeypatch):
    """--launcher slurm with no CUDA: gloo, the process group initialised
    from srun's variables (one task here), env_cfg's ``port`` used as the
    master port and not passed to torch."""
    from mmengine.config import Config
    from mmseg_whitebox.utils.distributed import setup_distributed
    monkeypatch.setattr('torch.cuda.is_available', lambda: False)
    for key in ('RANK', 'WORLD_SIZE', 'LOCAL_RANK', 'MASTER_PORT'):
        # recorded (setenv) so that what setup_distributed sets is undone
        monkeypatch.setenv(key, '')
        monkeypatch.delenv(key)
    port = free_port()
    monkeypatch.setenv('MASTER_ADDR', '127.0.0.1')
    for key, value in dict(SLURM_PROCID='0', SLURM_NTASKS='1',
                           SLURM_LOCALID='0',
                           SLURM_NODELIST='localhost').items():
        monkeypatch.setenv(key, value)
    cfg = Config(dict(launcher='slurm', env_cfg=dict(
        dist_cfg=dict(backend='nccl', port=port, timeout=60))))
    try:
        assert setup_distributed(cfg, 'cpu') == 'gloo'
        assert dist.is_initialized() and dist.get_world_size() == 1
        assert dist.get_backend() == 'gloo'
        assert os.environ['MASTER_PORT'] == str(port)
        assert (os.environ['RANK'], os.environ['LOCAL_RANK']) == ('0', '0')
        assert cfg.env_cfg.dist_cfg['backend'] == 'gloo'
        assert cfg.model_wrapper_cfg['device_ids'] is None
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
