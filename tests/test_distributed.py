"""Distributed runs on CPU: tools/dist_train.sh and tools/dist_test.sh with
2 processes (gloo) and ``--device cpu``, as a user starts them, and the
noise tool under torchrun; a launched run without a GPU and without
``--device cpu`` stops before any work, and a user's error in the ranks
(pretrained weights that cannot be had) ends the script's output, exit 2.
CUDA is hidden from the processes, so the runs take the CPU path on any
machine. Marked ``distributed`` (deselect with ``-m "not distributed"``)."""
import gc
import glob
import json
import math
import os
import os.path as osp
import subprocess
import sys
from typing import List, Tuple

import pytest
import torch
import torch.distributed as dist
from mmengine.config import Config

from _helpers import (DEMO_SEGMENTER, REPO, run_in_session,
                      run_tool, small_run_options)
from mmseg_whitebox.compat import cuda_hidden
from mmseg_whitebox.engine.runner_config import run_device
from mmseg_whitebox.utils.device import auto_device, resolve_device
from mmseg_whitebox.utils.distributed import (cpu_model_wrapper_cfg,
                                              free_port, setup_distributed)
from mmseg_whitebox.utils.tool_error import ToolError

pytestmark = [
    pytest.mark.distributed,
    pytest.mark.skipif(not (dist.is_available() and
                            dist.is_gloo_available()),
                       reason='torch.distributed with gloo not available'),
]

NPROC = 2


def torchrun_command(*args: str) -> list:
    """``python -m torch.distributed.run`` with NPROC processes on a free
    port, running ``args``."""
    return [sys.executable, '-m', 'torch.distributed.run',
            f'--nproc_per_node={NPROC}', f'--master_port={free_port()}',
            *args]


def run_script(args, timeout=240, check=True, **env):
    """``bash tools/<script> ARGS`` from the repository root with this
    interpreter as PYTHON and no GPU; on a timeout the whole process group
    (torchrun and its workers) is killed."""
    env = dict(os.environ, **dict(
        dict(PYTHON=sys.executable, PYTHONUNBUFFERED='1',
             CUDA_VISIBLE_DEVICES='', PORT=str(free_port())), **env))
    returncode, out = run_in_session(['bash'] + args, env, timeout)
    if check and returncode != 0:
        raise AssertionError(f'{args} failed ({returncode}):\n'
                             f'{out[-6000:]}')
    return returncode, out


def test_scripts_have_help_and_check_arguments():
    for script, usage in (('dist_train.sh', 'CONFIG GPUS'),
                          ('dist_test.sh', 'CONFIG CHECKPOINT GPUS')):
        path = f'tools/{script}'
        rc, out = run_script([path, '--help'])
        assert rc == 0 and f'usage: {script} {usage}' in out
        assert 'PYTHON' in out and 'gloo' in out
        rc, out = run_script([path], check=False)
        assert rc == 2 and f'{script}: error: expected CONFIG' in out
        assert 'unbound variable' not in out
    rc, out = run_script(['tools/dist_train.sh', DEMO_SEGMENTER, 'two'],
                         check=False)
    assert rc == 2 and "(a positive integer), got 'two'" in out
    rc, out = run_script(['tools/dist_test.sh', DEMO_SEGMENTER, 'nope.pth',
                          '2'], check=False)
    assert rc == 2 and "checkpoint 'nope.pth' does not exist" in out
    rc, out = run_script(['tools/dist_train.sh', DEMO_SEGMENTER, '2'],
                         check=False, PYTHON='/nonexistent/python')
    assert rc == 2 and 'no Python with torch found' in out


def fake_env(root, name: str, real: str = None) -> str:
    """An environment folder ``root/name`` whose bin/python is a small
    script: running ``real`` (with torch), or, without it, failing as a
    Python without torch would."""
    folder = root / name
    (folder / 'bin').mkdir(parents=True)
    python = folder / 'bin' / 'python'
    python.write_text('#!/bin/sh\n' + (f'exec "{real}" "$@"\n' if real else
                                       'exit 1\n'))
    python.chmod(0o755)
    return str(folder)


def without_python_choice(**env) -> dict:
    """The environment of a launch script that must choose its Python
    itself: no PYTHON, VIRTUAL_ENV, CONDA_PREFIX except those given."""
    return dict(dict(PYTHON='', VIRTUAL_ENV='', CONDA_PREFIX=''), **env)


def test_scripts_prefer_the_active_environment(tmp_path):
    """PYTHON, then VIRTUAL_ENV, then CONDA_PREFIX, then the checkout's
    .venv: the chosen Python is the one named, here one without torch."""
    venv = fake_env(tmp_path, 'venv')
    conda = fake_env(tmp_path, 'conda')
    for env, chosen in (
            (dict(VIRTUAL_ENV=venv, CONDA_PREFIX=conda),
             (venv, 'VIRTUAL_ENV')),
            (dict(CONDA_PREFIX=conda), (conda, 'CONDA_PREFIX')),
            (dict(PYTHON=osp.join(venv, 'bin', 'python'), CONDA_PREFIX=conda),
             (venv, 'PYTHON'))):
        rc, out = run_script(['tools/dist_train.sh', DEMO_SEGMENTER, '2'],
                             check=False, **without_python_choice(**env))
        python = osp.join(chosen[0], 'bin', 'python')
        assert rc == 2, out
        assert f"no Python with torch found (tried '{python}' from " \
            f'{chosen[1]})' in out, out


def last_line(out: str) -> str:
    return [line for line in out.splitlines() if line.strip()][-1]


def ranks_last_line(out: str) -> str:
    """The line the ranks stopped with, which the script repeats last,
    after at least one rank's copy: torchrun ends (SIGTERM) the ranks
    still running when the first exits, so a rank slower to reach its
    check may be ended before it prints."""
    line = last_line(out)
    assert 2 <= out.count(line) <= NPROC + 1, out
    return line


def test_launch_without_gpu_stops_before_any_work(tmp_path):
    """No CUDA and no --device cpu: the script stops before torchrun
    starts (nothing trained, no work dir), with one line naming GPUS,
    exit 2, for training and testing alike. The script starts with the
    Python of the active virtualenv and says what it runs with."""
    venv = fake_env(tmp_path, 'venv', sys.executable)
    work_dir = tmp_path / 'work'
    checkpoint = tmp_path / 'iter_1.pth'
    checkpoint.write_bytes(b'')
    python = osp.join(venv, 'bin', 'python')
    seen = (f'torch {torch.__version__}, CUDA {torch.version.cuda or "none"}'
            ", 0 CUDA device(s) visible (CUDA_VISIBLE_DEVICES='')")
    for script, args in (('dist_train.sh', [DEMO_SEGMENTER]),
                         ('dist_test.sh', [DEMO_SEGMENTER, str(checkpoint)])):
        rc, out = run_script([f'tools/{script}'] + args + [
            str(NPROC), '--work-dir', str(work_dir)], check=False,
            **without_python_choice(VIRTUAL_ENV=venv))
        assert rc == 2, out[-6000:]
        assert out.splitlines()[0] == \
            f'{script}: Python {python} (from VIRTUAL_ENV): {seen}'
        assert last_line(out) == (
            f'{script}: error: GPUS={NPROC}: one process per GPU, but torch '
            f'sees no CUDA device ({seen}), and a launched run does not '
            'fall back to the CPU unasked. For CPU processes (gloo) add '
            '--device cpu; for GPUs install a CUDA build of torch or check '
            'the driver (nvidia-smi) and CUDA_VISIBLE_DEVICES'), out
        assert len(out.strip().splitlines()) == 2, out
        assert not work_dir.exists()


def test_more_processes_than_visible_gpus_stop_in_the_script(tmp_path):
    """GPUS larger than the GPUs torch sees (a Python that reports one):
    one line, exit 2, before torchrun (which would die in
    torch.cuda.set_device); GPUS=1 passes the check (and reaches that
    Python's torchrun, which fails here)."""
    fake = tmp_path / 'one-gpu' / 'bin'
    fake.mkdir(parents=True)
    (fake / 'python').write_text(
        '#!/bin/sh\n'
        'if [ "$1" = -c ]; then echo "torch 9.9, CUDA 12.1, 1 CUDA '
        'device(s) visible (CUDA_VISIBLE_DEVICES=unset)"; exit 0; fi\n'
        'echo "torchrun $*"; exit 1\n')
    (fake / 'python').chmod(0o755)
    env = dict(PYTHON=str(fake / 'python'))
    rc, out = run_script(['tools/dist_train.sh', DEMO_SEGMENTER, '8'],
                         check=False, **env)
    assert rc == 2, out
    assert last_line(out) == (
        'dist_train.sh: error: GPUS=8: one process per GPU, but torch sees '
        '1 CUDA device(s) on this node (torch 9.9, CUDA 12.1, 1 CUDA '
        'device(s) visible (CUDA_VISIBLE_DEVICES=unset)): give GPUS=1 or '
        'fewer, make more GPUs visible (CUDA_VISIBLE_DEVICES), or add '
        '--device cpu for CPU processes (gloo)'), out
    assert 'torchrun' not in out
    rc, out = run_script(['tools/dist_train.sh', DEMO_SEGMENTER, '1'],
                         check=False, **env)
    assert rc == 1 and 'torchrun -m torch.distributed.run' in out, out
    # CPU processes are not limited by the GPUs
    rc, out = run_script(['tools/dist_train.sh', DEMO_SEGMENTER, '8',
                          '--device', 'cpu'], check=False, **env)
    assert rc == 1 and '--nproc_per_node=8' in out, out


def test_unreachable_pretrained_weights_stop_every_rank(tiny_ade, tmp_path):
    """Pretrained weights at a URL nobody answers, with an empty hub cache:
    each rank tries itself, before any collective step, and stops with
    the same line (none is left at a barrier); it ends the script's
    output, exit 2. The Python is the active conda environment's."""
    conda = fake_env(tmp_path, 'conda', sys.executable)
    url = f'http://127.0.0.1:{free_port()}/vit_demo_weights.pth'
    work_dir = tmp_path / 'work'
    rc, out = run_script(
        ['tools/dist_train.sh', DEMO_SEGMENTER, str(NPROC), '--device', 'cpu',
         '--work-dir', str(work_dir), '--cfg-options',
         f'model.pretrained={url}'] + small_run_options(tiny_ade, iters=2),
        check=False, TORCH_HOME=str(tmp_path / 'torch'),
        **without_python_choice(CONDA_PREFIX=conda))
    assert rc == 2, out[-6000:]
    assert f'(from CONDA_PREFIX): torch {torch.__version__}' in \
        out.splitlines()[0]
    line = ranks_last_line(out)
    assert line.startswith('train.py: error: could not download the '
                           f'pretrained weights {url} ('), out
    cached = (tmp_path / 'torch' / 'hub' / 'checkpoints' /
              'vit_demo_weights.pth')
    assert f'put it at {cached}' in line
    assert 'Iter(train)' not in out and not glob.glob(str(work_dir / '*'))


def test_cpu_wrapper_keeps_config_settings_and_drops_device_ids():
    cfg = Config(dict(model_wrapper_cfg=dict(
        type='MMDistributedDataParallel', find_unused_parameters=True)))
    wrapper = cpu_model_wrapper_cfg(cfg)
    assert wrapper == dict(type='MMDistributedDataParallel',
                           find_unused_parameters=True, device_ids=None)
    default = cpu_model_wrapper_cfg(Config(dict(find_unused_parameters=True)))
    assert default['device_ids'] is None
    assert default['find_unused_parameters'] is True
    # mmengine passes device ids to the DistributedDataParallel kinds only
    separate = cpu_model_wrapper_cfg(Config(dict(model_wrapper_cfg=dict(
        type='MMSeparateDistributedDataParallel'))))
    assert separate['device_ids'] is None
    other = cpu_model_wrapper_cfg(Config(dict(model_wrapper_cfg=dict(
        type=torch.nn.Identity))))
    assert 'device_ids' not in other


def test_launcher_without_torchrun_environment_is_a_clear_error(monkeypatch):
    monkeypatch.setattr('torch.cuda.is_available', lambda: False)
    for key in ('RANK', 'WORLD_SIZE', 'MASTER_ADDR', 'MASTER_PORT'):
        monkeypatch.delenv(key, raising=False)
    with pytest.raises(ToolError, match='tools/dist_train.sh'):
        setup_distributed(Config(dict(launcher='pytorch')), 'cpu')
    # no device given: decided, and a launched run without a GPU refused
    with pytest.raises(ToolError, match='--device cpu'):
        setup_distributed(Config(dict(launcher='pytorch')))
    with pytest.raises(ToolError, match='--launcher mpi --device cpu'):
        setup_distributed(Config(dict(launcher='mpi')), 'cpu')
    for key in ('SLURM_PROCID', 'SLURM_NTASKS', 'SLURM_LOCALID',
                'SLURM_NODELIST'):
        monkeypatch.delenv(key, raising=False)
    with pytest.raises(ToolError, match='--launcher slurm: SLURM_PROCID'):
        setup_distributed(Config(dict(launcher='slurm')), 'cpu')
    assert setup_distributed(Config(dict(launcher='none'))) is None


LAUNCHERS = ('none', 'pytorch', 'slurm')


@pytest.mark.parametrize('cuda', [True, False])
@pytest.mark.parametrize('device', [None, 'cpu', 'cuda'])
@pytest.mark.parametrize('launcher', LAUNCHERS)
def test_device_decision(monkeypatch, launcher, device, cuda):
    """cpu when asked; cuda when asked and visible; by default the GPU
    when one is visible, else the CPU for one process only: a launched run
    without a GPU stops, saying what torch sees and what to do."""
    monkeypatch.setattr('torch.cuda.is_available', lambda: cuda)
    monkeypatch.setattr('torch.cuda.device_count', lambda: int(cuda))
    monkeypatch.setenv('CUDA_VISIBLE_DEVICES', '')
    # every tool's default (auto_device); a launched run adds its refusal
    assert auto_device() == ('cuda' if cuda else 'cpu')
    assert auto_device('cuda:1') == 'cuda:1'
    expected = {
        'cpu': 'cpu',
        'cuda': 'cuda' if cuda else None,
        None: 'cuda' if cuda else ('cpu' if launcher == 'none' else None),
    }[device]
    if expected is not None:
        assert resolve_device(launcher, device) == expected
        return
    with pytest.raises(ToolError) as error:
        resolve_device(launcher, device)
    line = str(error.value)
    assert '\n' not in line
    for seen in (f'torch {torch.__version__}', "CUDA_VISIBLE_DEVICES=''",
                 '0 CUDA device(s) visible', '--device cpu',
                 'built with CUDA' if torch.version.cuda else
                 'built without CUDA'):
        assert seen in line, (seen, line)
    if device is None:
        assert f'--launcher {launcher} without --device' in line


def test_unknown_run_device_is_refused():
    with pytest.raises(ToolError, match="one of cuda, cpu, got 'cuda:1'"):
        resolve_device('none', 'cuda:1')


def test_cpu_run_hides_the_gpus_and_restores_them(monkeypatch):
    """--device cpu on a machine with GPUs (torch's answers mocked): inside
    the run torch and mmengine see none, and the processes it starts get
    an empty CUDA_VISIBLE_DEVICES; all is as before afterwards."""
    import mmengine.device.utils as engine
    from mmengine.device import get_device
    monkeypatch.setattr('torch.cuda.is_available', lambda: True)
    monkeypatch.setattr('torch.cuda.device_count', lambda: 8)
    monkeypatch.setattr(engine, 'DEVICE', 'cuda')
    monkeypatch.setenv('CUDA_VISIBLE_DEVICES', '0,1')
    cfg = Config(dict(launcher='none'))
    with run_device(cfg, 'cpu') as device:
        assert device == 'cpu'
        assert not torch.cuda.is_available()
        assert torch.cuda.device_count() == 0
        assert get_device() == 'cpu'
        assert os.environ['CUDA_VISIBLE_DEVICES'] == ''
    assert torch.cuda.is_available() and torch.cuda.device_count() == 8
    assert get_device() == 'cuda'
    assert os.environ['CUDA_VISIBLE_DEVICES'] == '0,1'
    with run_device(cfg, None) as device:  # the GPU, untouched
        assert device == 'cuda' and torch.cuda.is_available()
    monkeypatch.setattr('torch.cuda.is_available', lambda: False)
    with cuda_hidden():  # nothing to hide: nothing changed
        assert os.environ['CUDA_VISIBLE_DEVICES'] == '0,1'


def test_tools_destroy_the_process_group_they_started(tmp_path, request):
    """run_tool ends the process group on success and on a ToolError, so
    no rank leaves its teardown to the interpreter's shutdown; the tool
    runs with what was imported before it frozen out of the collector's
    walks (pytest's heap here: given back afterwards)."""
    from mmseg_whitebox.utils.tool_error import BAD_INPUT
    from mmseg_whitebox.cli import run_tool as run_tool_main
    request.addfinalizer(gc.unfreeze)

    def start(argv):
        assert gc.get_freeze_count() > 0
        dist.init_process_group(
            'gloo', init_method=f'file://{tmp_path / argv[0]}', rank=0,
            world_size=1)
        if argv[1] == 'fail':
            raise ToolError('bad input')
        return 'ok'

    assert run_tool_main(start, ['ok', 'pass']) == 'ok'
    assert not dist.is_initialized()
    with pytest.raises(SystemExit) as exit_info:
        run_tool_main(start, ['fail', 'fail'])
    assert exit_info.value.code == BAD_INPUT
    assert not dist.is_initialized()


WORKER_TOOL = """
import atexit, os, sys
import torch.distributed as dist
from mmseg_whitebox.cli import run_tool
from mmseg_whitebox.utils.tool_error import ToolError


class Finalised:
    def __del__(self):
        os.write(1, b'interpreter finalised\\n')


MARK = Finalised()


def main(argv):
    dist.init_process_group('gloo')
    rank = dist.get_rank()
    atexit.register(lambda: open(f'{sys.argv[2]}/atexit-{rank}', 'w').close())
    print(f'rank {rank} output left in the buffer')
    dist.barrier()
    if rank == 1 and sys.argv[1] == 'fail':
        raise ToolError('bad input on rank 1')


run_tool(main)
"""


@pytest.mark.parametrize('outcome', ['pass', 'fail'])
def test_distributed_workers_exit_without_interpreter_teardown(tmp_path,
                                                               outcome):
    """Under torchrun, run_tool ends a worker without the interpreter's
    finalisation (where a gloo thread waiting for the GIL aborts the
    rank), yet as a normal exit: exit handlers run, buffered output is
    flushed and the exit status is kept."""
    script = tmp_path / 'worker_tool.py'
    script.write_text(WORKER_TOOL)
    env = {k: v for k, v in os.environ.items() if k != 'PYTHONUNBUFFERED'}
    env.update(CUDA_VISIBLE_DEVICES='', PYTHONPATH=REPO)
    proc = subprocess.run(
        torchrun_command(str(script), outcome, str(tmp_path)),
        env=env, capture_output=True, text=True, timeout=120)
    out = proc.stdout + proc.stderr
    assert 'interpreter finalised' not in out, out
    for rank in range(NPROC):
        assert f'rank {rank} output left in the buffer' in out, out
        assert (tmp_path / f'atexit-{rank}').is_file(), out
    if outcome == 'pass':
        assert proc.returncode == 0, out
    else:
        assert proc.returncode != 0
        assert 'worker_tool.py: error: bad input on rank 1' in out, out
        assert 'exitcode  : 2' in out, out


def test_gpu_runs_are_left_to_mmengine(monkeypatch):
    """With CUDA the config stays as it is (NCCL, mmengine's wrapper)."""
    monkeypatch.setattr('torch.cuda.is_available', lambda: True)
    cfg = Config(dict(launcher='pytorch',
                      env_cfg=dict(dist_cfg=dict(backend='nccl'))))
    before = cfg.to_dict()
    assert setup_distributed(cfg) == 'nccl'
    assert setup_distributed(cfg, 'cuda') == 'nccl'
    assert cfg.to_dict() == before and 'model_wrapper_cfg' not in cfg


@pytest.fixture(scope='module')
def dist_trained(tiny_ade, tmp_path_factory):
    """tools/dist_train.sh, 2 CPU processes, 2 iterations."""
    work_dir = str(tmp_path_factory.mktemp('dist_train'))
    _, log = run_script(['tools/dist_train.sh', DEMO_SEGMENTER, str(NPROC),
                         '--work-dir', work_dir, '--device', 'cpu',
                         '--cfg-options'] +
                        small_run_options(tiny_ade, iters=2))
    return dict(work_dir=work_dir, log=log, data_root=tiny_ade,
                ckpt=osp.join(work_dir, 'iter_2.pth'))


def test_dist_train_on_cpu(dist_trained):
    log = dist_trained['log']
    assert log.startswith(f'dist_train.sh: Python {sys.executable} (from '
                          f'PYTHON): torch {torch.__version__}, CUDA ')
    assert "CUDA_VISIBLE_DEVICES='')" in log.splitlines()[0]
    assert 'Distributed training: True' in log
    # the configs' timeout (seconds) reaches the gloo process group
    assert "dist_cfg=dict(backend='gloo', timeout=1800)" in log
    assert 'Iter(train) [2/2]' in log
    assert osp.isfile(dist_trained['ckpt'])
    for error in ('_cuda_setDevice', 'only work with', 'Traceback'):
        assert error not in log, log[-4000:]


def _metrics(work_dir: str) -> dict:
    found = glob.glob(osp.join(work_dir, '*', '*.json'))
    assert len(found) == 1, found
    with open(found[0]) as f:
        return json.load(f)


def test_dist_test_equals_one_process(dist_trained, tmp_path):
    """3 validation images over 2 processes (one rank gets a padded copy):
    the gathered metrics are those of one process."""
    opts = small_run_options(dist_trained['data_root'], iters=2)
    run_tool(['tools/test.py', DEMO_SEGMENTER, dist_trained['ckpt'],
              '--work-dir', str(tmp_path / 'one'), '--cfg-options'] + opts)
    _, log = run_script(['tools/dist_test.sh', DEMO_SEGMENTER,
                         dist_trained['ckpt'], str(NPROC), '--work-dir',
                         str(tmp_path / 'two'), '--device', 'cpu',
                         '--cfg-options'] + opts)
    assert "dist_cfg=dict(backend='gloo', timeout=1800)" in log
    one, two = _metrics(str(tmp_path / 'one')), _metrics(str(tmp_path / 'two'))
    for key in ('mIoU', 'aAcc', 'mAcc'):
        assert two[key] == one[key], (key, one, two, log[-4000:])


#: results.json fields a sweep's two runs may differ in: wall time
SWEEP_TIMES = ('seconds', )


def _same_results(one, two, path='results') -> None:
    """``one == two`` field by field, exactly (NaN equals NaN), but the
    fields named in SWEEP_TIMES."""
    if isinstance(one, dict):
        assert set(one) == set(two), (path, sorted(set(one) ^ set(two)))
        for key in sorted(set(one) - set(SWEEP_TIMES)):
            _same_results(one[key], two[key], f'{path}.{key}')
    elif isinstance(one, list):
        assert len(one) == len(two), path
        for i, (a, b) in enumerate(zip(one, two)):
            _same_results(a, b, f'{path}[{i}]')
    elif isinstance(one, float) and isinstance(two, float) and \
            math.isnan(one) and math.isnan(two):
        pass
    else:
        assert one == two, (path, one, two)


def _one_and_two_processes(args: List[str], options: List[str],
                           tmp_path) -> Tuple[dict, dict]:
    """The ``results.json`` of tool ``args`` (with ``options`` last) run
    once under torchrun with ``--launcher pytorch --device cpu`` on NPROC
    CPU processes, once as one process on one thread (as torchrun gives
    each of its processes: float sums then round alike)."""
    out, one = tmp_path / 'two', tmp_path / 'one'
    env = dict(os.environ, CUDA_VISIBLE_DEVICES='', PYTHONUNBUFFERED='1',
               PYTHONPATH=REPO)
    status, log = run_in_session(torchrun_command(
        *args, '--out', str(out), '--work-dir', str(tmp_path / 'work'),
        '--launcher', 'pytorch', '--device', 'cpu', *options), env, 240)
    assert status == 0, log[-6000:]
    run_tool(args + ['--out', str(one), '--work-dir',
                     str(tmp_path / 'work1')] + options,
             env=dict(OMP_NUM_THREADS='1'))
    with open(out / 'results.json') as f:
        results = json.load(f)
    with open(one / 'results.json') as f:
        return results, json.load(f)


@pytest.mark.slow
def test_noise_tool_under_torchrun(dist_trained, tmp_path):
    """tools/noise_robustness.py --launcher pytorch on 2 CPU processes
    writes the results of one process (on one thread, as torchrun's are):
    every field of results.json equal, exactly, but the wall times. 3 test images, one of them padded
    on rank 1: the per-image statistics (non-finite fraction, attention
    usage) count each image once; sigma 1e38 makes every logit
    non-finite."""
    opts = small_run_options(dist_trained['data_root'], iters=2)
    results, single = _one_and_two_processes(
        ['tools/noise_robustness.py', DEMO_SEGMENTER, dist_trained['ckpt']],
        ['--sigmas', '0.1', '1e38', '--draws', '1', '--cfg-options', *opts],
        tmp_path)
    assert results['clean'] and results['points']
    usage = results['attention_usage']
    assert usage and all(row['images'] == 3 for row in usage), usage
    [huge] = [p for p in results['points'] if p['sigma'] == 1e38]
    assert huge['nonfinite_fraction'] == 1.0
    _same_results(single, results)


@pytest.mark.slow
def test_corruption_tool_under_torchrun(dist_trained, tmp_path):
    """tools/analysis_tools/test_corruption_robustness.py takes the noise
    sweep's --launcher and --device: on 2 CPU processes (3 test images, one
    padded on rank 1) it writes the results of one process, every field of
    results.json equal but the wall times."""
    opts = small_run_options(dist_trained['data_root'], iters=2)
    results, single = _one_and_two_processes(
        ['tools/analysis_tools/test_corruption_robustness.py',
         DEMO_SEGMENTER, dist_trained['ckpt']],
        ['--corruptions', 'gaussian_noise', 'contrast', '--severities', '2',
         '--cfg-options', *opts], tmp_path)
    assert results['clean'] and results['summary']['complete']
    assert set(results['results']) == {'gaussian_noise', 'contrast'}
    _same_results(single, results)
