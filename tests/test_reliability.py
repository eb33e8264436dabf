"""Errors that never hide a bug, and runs that never collide.

Through the real command lines, with faults put in by
tests/fault_plugin.py (imported by a config's ``custom_imports``): a bug
in a training run, a sweep, an export and a converter is exit status 1,
``<tool>: internal error: ...`` and its traceback in a log file (never the
user-error line); a second sweep into a running one's folder stops at once
naming it, and the first loses nothing; a training run killed while
saving a checkpoint leaves the previous one, named by ``last_checkpoint``,
and a lock the next run takes over; an export whose parity check fails
keeps its graph aside and writes no ``--out``. The lock and the reports
themselves are checked in-process too.
"""
import json
import os
import os.path as osp
import re
import signal
import socket
import subprocess
import sys
import time

import cv2
import numpy as np
import pytest
import torch

from _helpers import (DEMO_SEGMENTER, REPO, needs_onnx_export, raised_by,
                      run_tool, small_run_options)
from fault_plugin import FAULT
from test_converters import timm_layout_weights

TESTS = osp.dirname(osp.abspath(__file__))
DEMO_CBSA = osp.join(REPO, 'configs', 'cbsa',
                     'cbsa_vit-demo_1xb8-800iter_synthade-128x128.py')
#: the last stderr line of a bug: tool, exception type, log file
INTERNAL = re.compile(r'(\S+): internal error: (\w+): .* -- this is a bug, '
                      r'not a problem with your input; the full traceback '
                      r'is in (\S+) \(--debug prints it here\)$')
#: the longest a test waits for a tool to reach a point (it fails then)
WAIT_SECONDS = 600


# ------------------------------------------------------------- helpers

def fault_config(tmp_path, base: str = DEMO_SEGMENTER) -> str:
    """``base`` with tests/fault_plugin.py among its custom imports."""
    path = tmp_path / f'fault_{osp.basename(base)}'
    path.write_text(
        f'_base_ = [{base!r}]\n'
        "custom_imports = dict(imports=['mmseg_whitebox', 'fault_plugin'],"
        ' allow_failed_imports=False)\n')
    return str(path)


def fault_env(tmp_path, fault: str = '') -> dict:
    """The environment of a tool run with ``fault`` (none: ''), the plugin
    importable and the system's temporary folder in ``tmp_path``."""
    temp = tmp_path / 'tmp'
    temp.mkdir(exist_ok=True)
    path = os.pathsep.join(p for p in (TESTS, os.environ.get('PYTHONPATH'))
                           if p)
    return {'PYTHONPATH': path, FAULT: fault, 'TMPDIR': str(temp)}


def assert_internal_error(proc, tool: str, error: str, folder,
                          *words: str) -> str:
    """Exit status 1, the last stderr line names the bug ``error`` and a
    log file in ``folder`` that holds its traceback (with ``words``); no
    user-error line, no traceback on stderr. Returns the log's text."""
    assert proc.returncode == 1, (proc.returncode, proc.stderr[-3000:])
    lines = proc.stderr.strip().splitlines()
    assert not any(line.startswith(f'{tool}: error:') for line in lines)
    assert 'Traceback' not in proc.stderr, proc.stderr[-3000:]
    match = INTERNAL.match(lines[-1])
    assert match, lines[-1]
    assert match.group(1) == tool and match.group(2) == error, lines[-1]
    log = match.group(3)
    assert osp.dirname(log) == str(folder), (log, folder)
    with open(log, encoding='utf-8') as f:
        text = f.read()
    assert 'Traceback (most recent call last)' in text
    for word in words:
        assert word in text, (word, text[-2000:])
    return text




def sweep_args(config: str, weights: str, out, data_root: str) -> list:
    """The smallest noise sweep: the clean model and one noise draw."""
    return ['tools/noise_robustness.py', config, weights, '--sigmas', '0.1',
            '--draws', '1', '--no-ablation', '--out', str(out),
            '--cfg-options', f'test_dataloader.dataset.data_root={data_root}',
            'test_dataloader.num_workers=0',
            'test_dataloader.persistent_workers=False']


def train_args(config: str, work, data_root: str, *options: str) -> list:
    """Two training iterations of ``config`` in ``work``."""
    return (['tools/train.py', config, '--work-dir', str(work),
             '--cfg-options'] + small_run_options(data_root, iters=2) +
            list(options))


# ------------------------------------------------ a bug is exit status 1

def test_bug_in_training_is_an_internal_error(tiny_ade, tmp_path):
    """A keyword typo inside CBSAHead.forward is a TypeError like a
    misspelt config key, but raised by the project's code: a bug."""
    work = tmp_path / 'work'
    proc = run_tool(train_args(fault_config(tmp_path, DEMO_CBSA), work,
                               tiny_ade),
                    check=False, env=fault_env(tmp_path, 'head-forward'))
    assert_internal_error(proc, 'train.py', 'TypeError', work,
                          "unexpected keyword argument 'pp'",
                          'in forward')
    assert not (work / '.lock').exists()  # released on the crash


def test_bug_in_a_sweep_is_an_internal_error(tiny_ade, weights, tmp_path):
    out = tmp_path / 'sweep'
    proc = run_tool(sweep_args(fault_config(tmp_path), weights, out,
                               tiny_ade) +
                    ['--work-dir', str(tmp_path / 'work')], check=False,
                    env=fault_env(tmp_path, 'evaluation:KeyError'))
    assert_internal_error(proc, 'noise_robustness.py', 'KeyError', out,
                          'injected KeyError', 'in fail')
    assert not (out / '.lock').exists()


@needs_onnx_export()
def test_bug_in_an_export_is_an_internal_error(weights, tmp_path):
    """No output folder: the log goes to the system's temporary folder;
    nothing is written at --out."""
    pytest.importorskip('onnxruntime')
    out = tmp_path / 'model.onnx'
    proc = run_tool(['tools/deployment/export_onnx.py',
                     fault_config(tmp_path), weights, '--shape', '64', '64',
                     '--out-file', str(out)], check=False,
                    env=fault_env(tmp_path, 'export-metadata:ValueError'))
    assert_internal_error(proc, 'export_onnx.py', 'ValueError',
                          tmp_path / 'tmp', 'injected ValueError',
                          'deployment_metadata')
    assert sorted(os.listdir(tmp_path)) == [osp.basename(
        fault_config(tmp_path)), 'tmp']  # no graph, no lock


def test_bug_in_a_converter_is_an_internal_error(tmp_path):
    """A ValueError from the converter's own code is not the input's
    (the tool once turned every ValueError into a user error)."""
    src, dst = tmp_path / 'vit.pth', tmp_path / 'dst.pth'
    torch.save(timm_layout_weights(), src)
    proc = run_tool(['tools/model_converters/timm2mmseg.py', str(src),
                     str(dst), fault_config(tmp_path)],
                    check=False,
                    env=fault_env(tmp_path, 'converter:ValueError'))
    assert_internal_error(proc, 'timm2mmseg.py', 'ValueError',
                          tmp_path / 'tmp', 'check_fits_backbone')
    assert not dst.exists()


# ---------------------------------------------- one writer per folder

def wait_for(path, proc) -> None:
    """Wait until ``path`` exists while ``proc`` runs."""
    start = time.monotonic()
    while not osp.exists(path):
        assert proc.poll() is None, f'the first run ended ({proc.returncode})'
        assert time.monotonic() - start < WAIT_SECONDS, 'never got there'
        time.sleep(0.1)


def test_second_sweep_into_a_running_ones_folder_stops(tiny_ade, weights,
                                                       tmp_path):
    """The first sweep waits in its first evaluation (tests/fault_plugin.py
    gate) while a second one starts on its --out: it stops at once naming
    the first's PID and start time; the first then finishes with every
    result. (A --resume is refused the same way: test_lock_refuses_...)"""
    gate, out = tmp_path / 'gate', tmp_path / 'sweep'
    gate.mkdir()
    args = sweep_args(fault_config(tmp_path), weights, out, tiny_ade)
    log = open(tmp_path / 'first.log', 'w')
    first = subprocess.Popen(
        [sys.executable] + args + ['--work-dir', str(tmp_path / 'w1')],
        cwd=REPO, stdout=log, stderr=subprocess.STDOUT,
        env=dict(os.environ, **fault_env(tmp_path, f'gate:{gate}')))
    try:
        wait_for(gate / 'ready', first)
        record = json.loads((out / '.lock.owner').read_text())
        assert record['pid'] == first.pid
        proc = run_tool(args + ['--work-dir', str(tmp_path / 'w2')],
                        check=False, env=fault_env(tmp_path))
        assert proc.returncode == 2, proc.stderr[-3000:]
        last = proc.stderr.strip().splitlines()[-1]
        assert last.startswith('noise_robustness.py: error: ')
        for word in (f"--out '{out}' is in use", f'PID {first.pid}',
                     record['started'], str(out / '.lock')):
            assert word in last, (word, last)
        (gate / 'go').touch()
        assert first.wait(timeout=WAIT_SECONDS) == 0
    finally:
        if first.poll() is None:
            first.kill()
            first.wait()
        log.close()
    with open(out / 'results.json') as f:
        results = json.load(f)
    assert results['clean']['mIoU'] >= 0
    assert [(p['sigma'], len(p['draws'])) for p in results['points']] == \
        [(0.1, 1)]
    assert not (out / '.lock').exists()


@pytest.mark.slow
def test_save_killed_half_way_keeps_the_previous_checkpoint(tiny_ade,
                                                            tmp_path):
    """The second checkpoint save is cut off half-way and the run killed
    (tests/fault_plugin.py): iter_1.pth stays, named by last_checkpoint
    (the demo keeps one checkpoint: it is removed only after the next is
    complete), no iter_2.pth; the next run takes the lock over, removes
    the cut-off file and resumes from iter_1."""
    work = tmp_path / 'work'
    config = fault_config(tmp_path)
    options = ('default_hooks.checkpoint.interval=1',
               'train_cfg.val_interval=100')
    proc = run_tool(train_args(config, work, tiny_ade, *options),
                    check=False, env=fault_env(tmp_path, 'kill-save:2'))
    assert proc.returncode == -signal.SIGKILL, proc.stderr[-3000:]
    first = work / 'iter_1.pth'
    assert (work / 'last_checkpoint').read_text() == str(first)
    assert not (work / 'iter_2.pth').exists()
    checkpoint = torch.load(first, map_location='cpu', weights_only=True)
    assert checkpoint['meta']['iter'] == 1
    cut = [n for n in os.listdir(work) if n.startswith('.iter_2.')]
    assert len(cut) == 1  # the temporary file, half written
    record = json.loads((work / '.lock.owner').read_text())

    proc = run_tool(train_args(config, work, tiny_ade, *options) +
                    ['--resume'], env=fault_env(tmp_path))
    assert f'note: taking over the lock {str(work / ".lock")!r}' in \
        proc.stderr and f'PID {record["pid"]}' in proc.stderr
    assert f'note: removing {work / cut[0]}' in proc.stderr
    assert f'resumed from the latest checkpoint {first}' in \
        proc.stdout + proc.stderr
    second = work / 'iter_2.pth'
    assert (work / 'last_checkpoint').read_text() == str(second)
    checkpoint = torch.load(second, map_location='cpu', weights_only=True)
    assert checkpoint['meta']['iter'] == 2
    assert not first.exists()  # max_keep_ckpts=1, once iter_2 was saved
    assert not [n for n in os.listdir(work) if n.startswith('.')]


@pytest.mark.slow
def test_killed_while_naming_the_new_checkpoint_resumes_from_it(tiny_ade,
                                                              tmp_path):
    """Killed right after ``last_checkpoint`` was opened for writing (and
    emptied) on the second save (tests/fault_plugin.py): mmengine's
    ``open(last_checkpoint, 'w')`` goes to a temporary file, so
    ``last_checkpoint`` still names iter_1.pth, which is still there (it is
    removed only once the save has ended), and ``--resume`` goes on from
    it."""
    work = tmp_path / 'work'
    config = fault_config(tmp_path)
    options = ('default_hooks.checkpoint.interval=1',
               'train_cfg.val_interval=100')
    proc = run_tool(train_args(config, work, tiny_ade, *options),
                    check=False,
                    env=fault_env(tmp_path, 'kill-last-checkpoint:2'))
    assert proc.returncode == -signal.SIGKILL, proc.stderr[-3000:]
    first = work / 'iter_1.pth'
    assert (work / 'last_checkpoint').read_text() == str(first)
    assert first.exists() and (work / 'iter_2.pth').exists()

    cut = [n for n in os.listdir(work) if n.startswith('.last_checkpoint')]
    assert len(cut) == 1  # the temporary file, emptied

    proc = run_tool(train_args(config, work, tiny_ade, *options) +
                    ['--resume'], env=fault_env(tmp_path))
    assert f'note: removing {work / cut[0]}' in proc.stderr
    assert f'resumed from the latest checkpoint {first}' in \
        proc.stdout + proc.stderr
    assert (work / 'last_checkpoint').read_text() == str(work / 'iter_2.pth')
    assert not [n for n in os.listdir(work) if n.startswith('.')]


@needs_onnx_export()
def test_failed_parity_check_keeps_the_graph_aside(weights, tmp_path):
    """The model changed after the export (tests/fault_plugin.py): the
    graph disagrees, is kept as <stem>.failed.onnx, --out is not written,
    exit status 1 with one line saying where; the --json report names the
    kept graph."""
    pytest.importorskip('onnxruntime')
    out, report = tmp_path / 'model.onnx', tmp_path / 'parity.json'
    proc = run_tool(['tools/deployment/export_onnx.py',
                     fault_config(tmp_path), weights, '--shape', '64', '64',
                     '--out-file', str(out), '--json', str(report)],
                    check=False,
                    env=fault_env(tmp_path, 'parity'))
    assert proc.returncode == 1, proc.stderr[-3000:]
    kept = tmp_path / 'model.failed.onnx'
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith('export_onnx.py: check failed: the ONNX graph '
                           'disagrees with PyTorch'), last
    assert f'the graph is kept as {kept}' in last
    assert kept.is_file() and not out.exists()
    assert not (tmp_path / 'model.onnx.lock').exists()
    assert json.loads(report.read_text())['onnx'] == str(kept)


# ------------------------------------------------------ the pieces

#: a process that holds the lock file argv[1] with filelock until its
#: stdin closes (or it is killed)
HOLD = (
    'import sys\n'
    'from filelock import FileLock\n'
    'lock = FileLock(sys.argv[1])\n'
    'lock.acquire(timeout=0)\n'
    'print("held", flush=True)\n'
    'sys.stdin.read()\n')


class OtherHolder:
    """The lock of ``folder`` held by another process, with its owner
    record (a start time of its own, to be recognised in messages) unless
    ``record`` is False (a holder that has not written it yet)."""

    def __init__(self, folder, record: bool = True) -> None:
        os.makedirs(folder, exist_ok=True)
        self.path = osp.join(folder, '.lock')
        self.proc = subprocess.Popen(
            [sys.executable, '-c', HOLD, self.path], stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout.readline() == 'held\n'
        self.record = dict(pid=self.proc.pid, host=socket.gethostname(),
                           started='2000-01-01 00:00:00 +0000',
                           command='python tools/other.py')
        if record:
            with open(self.path + '.owner', 'w') as f:
                json.dump(self.record, f)

    def end(self) -> None:
        """The holder is killed: the system drops its lock, its files
        stay behind."""
        self.proc.kill()
        self.proc.wait()
        self.proc.stdin.close()
        self.proc.stdout.close()


def test_lock_refuses_while_held_and_takes_over_after(tmp_path, capsys):
    """Every output that locks refuses a folder another process holds
    (naming it), and takes it over once that process has been killed."""
    from mmseg_whitebox.robustness.corruptions.benchmark import \
        CorruptionStore
    from mmseg_whitebox.robustness.sweep import ResultStore
    from mmseg_whitebox.utils.run_lock import lock_folder, lock_output_file
    from mmseg_whitebox.utils.tool_error import ToolError
    holder = OtherHolder(tmp_path / 'out')
    try:
        for take in (lambda: lock_folder(str(tmp_path / 'out')),
                     lambda: ResultStore(str(tmp_path / 'out'), {}),
                     lambda: ResultStore(str(tmp_path / 'out'), {},
                                         resume=True),
                     lambda: CorruptionStore(str(tmp_path / 'out'), {}),
                     lambda: CorruptionStore(str(tmp_path / 'out'), {},
                                             resume=True)):
            with pytest.raises(ToolError, match=f'is in use by PID '
                               f'{holder.proc.pid} .* started 2000-01-01'):
                take()
        # nothing written: only the holder's lock and record
        assert sorted(os.listdir(tmp_path / 'out')) == ['.lock',
                                                        '.lock.owner']
    finally:
        holder.end()
    with lock_folder(str(tmp_path / 'out')) as lock:
        err = capsys.readouterr().err
        assert 'taking over the lock' in err and \
            f'PID {holder.proc.pid}' in err
        record = json.loads(open(lock.owner_path).read())
        assert record['pid'] == os.getpid()
        with ResultStore(str(tmp_path / 'out'), {}).lock:  # same process
            pass
        assert osp.exists(lock.owner_path)  # until the last handle goes
    assert os.listdir(tmp_path / 'out') == []  # lock and record removed
    # an output file: <file>.lock
    with lock_output_file(str(tmp_path / 'm.onnx')) as lock:
        assert lock.path == str(tmp_path / 'm.onnx.lock')
        assert lock.owner_path == str(tmp_path / 'm.onnx.lock.owner')
    assert os.listdir(tmp_path) == ['out']


def test_lock_without_a_readable_record(tmp_path, capsys):
    """A lock whose holder has not written its record yet refuses all the
    same; a record cut off when its run was killed is replaced, without a
    note (it names nobody)."""
    from mmseg_whitebox.utils.run_lock import lock_folder
    from mmseg_whitebox.utils.tool_error import ToolError
    out = tmp_path / 'out'
    holder = OtherHolder(out, record=False)
    try:
        with pytest.raises(ToolError, match=r"--out '.*' is in use by "
                           r'another run \(no record yet\)'):
            lock_folder(str(out))
    finally:
        holder.end()
    (out / '.lock.owner').write_text('{"pid": 12')  # cut off
    with lock_folder(str(out)) as lock:
        assert 'taking over' not in capsys.readouterr().err
        assert json.loads(open(lock.owner_path).read())['pid'] == \
            os.getpid()


def test_test_tool_and_benchmarks_lock_their_output(tmp_path, weights):
    """tools/test.py locks its work dir (and evaluate_checkpoint, the
    tool's function, its --out too), the benchmarks their --out: a second
    run is refused before it writes anything, naming the first."""
    from mmseg_whitebox.analysis.decoder_benchmark import \
        run_decoder_benchmark
    from mmseg_whitebox.apis import evaluate_checkpoint
    from mmseg_whitebox.engine.runner_config import runner_config
    from mmseg_whitebox.utils.tool_error import ToolError
    work = tmp_path / 'work'
    holder = OtherHolder(work)
    try:
        proc = run_tool(['tools/test.py', DEMO_SEGMENTER, weights,
                         '--work-dir', str(work)], check=False)
        assert proc.returncode == 2, proc.stderr[-3000:]
        last = proc.stderr.strip().splitlines()[-1]
        assert last.startswith(f"test.py: error: --work-dir '{work}' is "
                               f'in use by PID {holder.proc.pid}'), last
        cfg = runner_config(DEMO_SEGMENTER, work_dir=str(tmp_path / 'w'))
        for run, option in (
                (lambda: evaluate_checkpoint(cfg, weights, out=str(work)),
                 '--out'),
                (lambda: run_decoder_benchmark(str(work), ['cbsa'],
                                               [(64, 64)], 't'), '--out')):
            with pytest.raises(ToolError, match=f"{option} '{work}' is in "
                               f'use by PID {holder.proc.pid}'):
                run()
        assert not osp.exists(tmp_path / 'w' / '.lock')
        assert sorted(os.listdir(work)) == ['.lock', '.lock.owner']
    finally:
        holder.end()


def test_typeerror_is_a_users_only_when_built_from_the_config():
    """A misspelt config key is found when the config is read (the class
    its type names does not take it); 'unexpected keyword argument' from
    a call in a method is a bug."""
    from mmengine.config import Config

    from mmseg_whitebox.cli.errors import user_error_message
    from mmseg_whitebox.engine.config_checks import check_model_types
    misspelt = raised_by(lambda: check_model_types(Config(dict(model=dict(
        type='CrossEntropyLoss', use_sigmod=True)))))
    assert user_error_message(misspelt) == (
        "model: CrossEntropyLoss does not take the setting 'use_sigmod'; "
        "did you mean 'use_sigmoid'? Fix or remove that key in the config "
        'or in --cfg-options')

    class Head(torch.nn.Module):
        def forward(self):
            return torch.nn.Dropout(pp=0.1)

    bug = raised_by(lambda: Head()())
    assert re.fullmatch(r"\w+\.__init__\(\) got an unexpected keyword "
                        r"argument 'pp'", str(bug))  # as a config key's
    assert user_error_message(bug) is None


def test_opencv_errors_name_the_file_or_are_bugs(tmp_path):
    """A damaged image file is named by the code that reads it (the
    tools' image check, the ONNX segmentor's reader); an OpenCV error on
    an image in memory has no file to blame: a bug."""
    from mmseg_whitebox.cli.errors import user_error_message
    from mmseg_whitebox.deployment.onnx_segmentor import load_image
    from mmseg_whitebox.utils.input_checks import check_image_file
    image = tmp_path / 'photo.png'
    image.write_bytes(b'\x89PNG but cut off')
    for read in (check_image_file, load_image):
        message = user_error_message(raised_by(lambda: read(str(image))))
        assert f"'{image}'" in message and 'image' in message, message
    assert user_error_message(raised_by(lambda: cv2.cvtColor(
        np.zeros((0, 0, 3), np.uint8), cv2.COLOR_BGR2RGB))) is None


def test_report_of_a_bug_logs_its_traceback(tmp_path, monkeypatch, capsys):
    """In the run's output folder when there is one, else in the system's
    temporary folder; --debug prints it too; a user's error is one line
    ending with the --debug hint, and no log."""
    from mmseg_whitebox.cli.errors import DEBUG_ENV, DEBUG_HINT, report
    from mmseg_whitebox.utils import run_lock
    from mmseg_whitebox.utils.tool_error import ToolError
    monkeypatch.delenv(DEBUG_ENV, raising=False)
    monkeypatch.setattr(run_lock, '_OUTPUT_FOLDER', None)
    temp = tmp_path / 'tmp'
    temp.mkdir()
    monkeypatch.setattr('tempfile.tempdir', str(temp))

    def buggy():
        return {}['missing key']

    for folder in (None, tmp_path / 'run'):
        if folder:
            folder.mkdir()
            run_lock.note_output_folder(str(folder))
        assert report('tool.py', raised_by(buggy)) == 1
        line = capsys.readouterr().err.strip()
        match = INTERNAL.match(line)
        assert match and match.group(2) == 'KeyError', line
        log = match.group(3)
        assert osp.dirname(log) == str(folder or temp)
        text = open(log).read()
        assert 'Traceback' in text and 'in buggy' in text
    monkeypatch.setenv(DEBUG_ENV, '1')
    assert report('tool.py', raised_by(buggy)) == 1
    err = capsys.readouterr().err
    log = re.search(r'the full traceback is in (\S+)$', err).group(1)
    assert 'Traceback' in err and osp.dirname(log) == str(tmp_path / 'run')
    assert report('tool.py', ToolError('bad input')) == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == \
        'tool.py: error: bad input'
    monkeypatch.delenv(DEBUG_ENV)
    assert report('tool.py', ToolError('bad input')) == 2
    assert capsys.readouterr().err.strip() == \
        f'tool.py: error: bad input {DEBUG_HINT}'
    assert len(os.listdir(tmp_path / 'run')) == 2  # the two bugs' logs
