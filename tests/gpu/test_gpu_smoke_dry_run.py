"""The GPU smoke check's whole plan as a dry run on the CPU (every model in
every precision, the DDP run as 2 gloo processes), that plan being the
GPU's apart from its sizes, its DDP launcher's failure paths, and a check
that cannot pass without what it checks: ``make gpu-check`` without a GPU
fails in one line, one GPU gives no DDP row."""
import json
import math
import os
import subprocess
import sys
import time
from dataclasses import fields

import pytest
import torch

from _helpers import REPO
from _smoke import (DRY_RUN_PLAN, EXPLICIT, GPU_PLAN, PRECISIONS,
                    SIZE_FIELDS, SMOKE_CONFIGS, precision_problem)
from _smoke_run import (DDP_ONE_GPU, REPORT, RESULTS, SmokeRun, first_error,
                        report_markdown, run_ddp, stop_launch)


def test_the_dry_run_plan_is_the_gpu_plan_made_smaller():
    assert DRY_RUN_PLAN.models == GPU_PLAN.models == tuple(SMOKE_CONFIGS)
    assert DRY_RUN_PLAN.precisions == GPU_PLAN.precisions == PRECISIONS
    assert DRY_RUN_PLAN.ddp_model == GPU_PLAN.ddp_model
    assert {f.name for f in fields(GPU_PLAN) if getattr(DRY_RUN_PLAN, f.name)
            != getattr(GPU_PLAN, f.name)} <= set(SIZE_FIELDS)
    # every published decode head on ViT-T, and the CBT encoder
    assert set(GPU_PLAN.models) == {'segmenter', 'linear', 'mssa',
                                    'mssa-ca', 'tssa', 'cbsa',
                                    'cbsa-rigorous', 'cbt+cbsa'}
    assert GPU_PLAN.arch == 't' and GPU_PLAN.iterations == 20


@pytest.fixture(scope='module')
def dry_run(tmp_path_factory):
    out = tmp_path_factory.mktemp('smoke')
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as the one_thread fixture, for the module
    try:
        run = SmokeRun(DRY_RUN_PLAN, torch.device('cpu'), str(out))
        for name in DRY_RUN_PLAN.models:
            run.model_rows(name)
        run.ddp()
        return out, run.write()
    finally:
        torch.set_num_threads(threads)


@pytest.mark.slow
def test_dry_run_trains_every_model_in_every_precision(dry_run):
    out, report = dry_run
    rows = report['rows']
    assert [(r['model'], r['precision']) for r in rows] == [
        (m, p) for m in GPU_PLAN.models for p in PRECISIONS]
    cpu = torch.device('cpu')
    for row in rows:
        problem = precision_problem(cpu, row['precision'])
        if problem:  # e.g. CPU float16 before torch 2.3: said, not run
            assert row['status'] == problem and 'losses' not in row
            continue
        assert row['status'] == 'ok', row
        assert len(row['losses']) == DRY_RUN_PLAN.iterations
        assert all(math.isfinite(x) for x in row['losses'])
        if row['precision'] == 'float32':
            assert 'vs_float32' not in row  # no ratio to itself
            assert 'skipped_steps' not in row
        else:
            assert row['vs_float32'] <= 0.05
            assert row['skipped_steps'] == sum(
                b < a for a, b in zip(row['scales'], row['scales'][1:]))
        kernels = row['kernels']
        assert kernels and all(k for k in kernels.values())
    by_model = {(r['model'], r['precision']): r for r in rows}
    # mmcv's MultiheadAttention (ViT, Segmenter) returns its weights: no
    # SDPA; the CBSA operator calls F.scaled_dot_product_attention
    seg = by_model[('segmenter', 'float32')]['kernels']
    assert set(map(tuple, seg.values())) == {(EXPLICIT, )}
    cbt = by_model[('cbt+cbsa', 'float32')]['kernels']
    assert all(EXPLICIT not in k for k in cbt.values())
    assert 'decode_head' not in ' '.join(
        by_model[('linear', 'float32')]['kernels'])

    ddp = report['ddp']
    assert ddp['status'] == 'ok', (ddp, (out / 'ddp.log').read_text()[-6000:])
    assert ddp['processes'] == 2 and ddp['backend'] == 'gloo'
    assert len(ddp['losses']) == 2
    assert all(len(rank) == DRY_RUN_PLAN.ddp_iterations and all(
        math.isfinite(x) for x in rank) for rank in ddp['losses'])
    assert ddp['max_param_diff'] == 0.0
    assert report['passed']

    text = (out / REPORT).read_text()
    assert text.splitlines()[0] == \
        f'# GPU smoke check: {report["machine"]["cpu"]}'
    assert f'torch {torch.__version__}' in text
    assert text.count('\n| cbsa | ') == len(PRECISIONS) + 1  # + DDP row
    assert 'All checks passed.' in text
    saved = json.loads((out / RESULTS).read_text())
    assert saved['rows'] == json.loads(json.dumps(rows))


def test_a_stalled_rank_is_named_from_its_watchdog(tmp_path):
    """A rank that waits forever: its watchdog (faulthandler, as each DDP
    rank arms it) ends it, and the row's error says so, not the last
    stack line."""
    log = tmp_path / 'ddp.log'
    with open(log, 'w') as f:
        code = subprocess.call([sys.executable, '-c', (
            'import faulthandler, threading\n'
            'faulthandler.dump_traceback_later(0.1, exit=True)\n'
            'threading.Event().wait()\n')], stdout=f, stderr=f)
    assert code == 1
    assert first_error(str(log)).startswith('a rank stalled: Timeout (')


def test_a_timed_out_launch_stops_its_ranks(tmp_path):
    """A launcher that, as torchrun, starts its worker in a session of its
    own and stops it on SIGTERM: stopping it after a timeout ends the
    worker too (a SIGKILL to the launcher's group left it running)."""
    pid_file = tmp_path / 'worker.pid'
    launcher = (
        'import signal, subprocess, sys, time\n'
        'w = subprocess.Popen([sys.executable, "-c", "import time; '
        'time.sleep(600)"], start_new_session=True)\n'
        f'open({str(pid_file)!r}, "w").write(str(w.pid))\n'
        'signal.signal(signal.SIGTERM, lambda *a: (w.terminate(), w.wait(),'
        ' sys.exit(1)))\n'
        'time.sleep(600)\n')
    proc = subprocess.Popen([sys.executable, '-c', launcher],
                            start_new_session=True)
    for _ in range(200):
        if pid_file.exists() and pid_file.read_text():
            break
        time.sleep(0.05)
    worker = int(pid_file.read_text())
    stop_launch(proc, grace=20)
    assert proc.returncode is not None
    with pytest.raises(ProcessLookupError):
        for _ in range(100):  # reaped by its launcher
            os.kill(worker, 0)
            time.sleep(0.05)


def test_ddp_row_on_one_gpu_is_skipped(tmp_path, monkeypatch):
    """One visible GPU: world size 1 would compare a rank with itself, so
    no DDP run starts and the row says so; it is not a failure."""
    monkeypatch.setattr(torch.cuda, 'device_count', lambda: 1)
    monkeypatch.setattr(subprocess, 'Popen', None)  # nothing is launched
    row = run_ddp(GPU_PLAN, torch.device('cuda'), 0, '', str(tmp_path),
                  10.0)
    assert row['status'] == DDP_ONE_GPU and row['processes'] == 1
    assert DDP_ONE_GPU.startswith('skipped: one GPU')
    assert not (tmp_path / 'ddp.log').exists()
    text = report_markdown(dict(gpu='GPU', torch='x', date='d'), GPU_PLAN,
                           [dict(model='cbsa', precision='float32',
                                 status='ok')], row)
    assert 'All checks passed (DDP skipped: one GPU).' in text


@pytest.mark.skipif(torch.cuda.is_available(), reason='a CUDA device exists')
def test_make_gpu_check_without_a_gpu_fails_in_one_line(tmp_path):
    """``make gpu-check`` where torch sees no CUDA GPU: exit status 2 and
    one line saying so before any test runs (not a pass of skipped
    tests), nothing written."""
    out = tmp_path / 'out'
    proc = subprocess.run(
        ['make', '-o', '.venv/.mmseg_whitebox-installed', 'gpu-check',
         f'PY={sys.executable}', f'GPU_CHECK_OUT={out}'],
        cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert lines[0].startswith('gpu-check: no CUDA GPU is visible'), lines
    assert len([line for line in lines if not line.startswith('make')]) == 1
    assert 'passed' not in proc.stdout and not out.exists()
