"""One GPU smoke check run: its rows (tests/gpu/_smoke.py), the DDP run
through ``torchrun`` (tests/gpu/_ddp_rank.py) and the report,
``gpu_smoke.md`` and ``gpu_smoke.json`` (what ``make gpu-check`` writes).

The DDP run: ``torchrun`` on 127.0.0.1 with a free port (no c10d
rendezvous, whose node names come from DNS), one process per visible GPU
(NCCL) or the plan's CPU processes (gloo); its losses finite and its
parameters equal across ranks after the steps. With fewer than 2
processes nothing runs: one rank would be compared with itself.
"""
from __future__ import annotations

import json
import math
import os
import os.path as osp
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict
from typing import Any, Dict, List, Optional

import torch

from mmseg_whitebox.analysis.benchmark import machine, project_configs
from mmseg_whitebox.analysis.report import results_table
from mmseg_whitebox.utils.atomic import write_json, write_text
from mmseg_whitebox.utils.distributed import free_port

from _smoke import LOSS_TOLERANCE, SmokePlan, smoke_model

REPORT, RESULTS = 'gpu_smoke.md', 'gpu_smoke.json'
HERE = osp.dirname(osp.abspath(__file__))
REPO = osp.dirname(osp.dirname(HERE))
#: the DDP row's status on a machine with one GPU: one rank proves nothing
DDP_ONE_GPU = ('skipped: one GPU (DDP needs 2 or more: with one rank, '
               '"parameters equal across ranks" compares a rank with '
               'itself)')


def passes(status: str) -> bool:
    """Whether a row's status is not a failure: ok, a precision the device
    cannot run, or the DDP row skipped on one GPU."""
    return status == 'ok' or status.startswith(('unavailable', 'skipped'))


class SmokeRun:
    """``plan`` on ``device``: each model's rows trained on first request
    (:meth:`model_rows`), the DDP row (:meth:`ddp`, its log ``ddp.log`` in
    ``out_dir``), the report (:meth:`write`)."""

    def __init__(self, plan: SmokePlan, device: torch.device, out_dir: str,
                 seed: int = 0, config_root: Optional[str] = None) -> None:
        self.plan, self.device, self.out_dir = plan, device, out_dir
        self.seed = seed
        self.config_root = config_root or project_configs()
        self.rows: Dict[str, List[Dict]] = {}
        self.ddp_row: Optional[Dict] = None
        self.start = time.perf_counter()

    def model_rows(self, name: str) -> List[Dict]:
        if name not in self.rows:
            self.rows[name] = smoke_model(name, self.plan, self.device,
                                          self.seed, self.config_root)
        return self.rows[name]

    def row(self, name: str, precision: str) -> Dict:
        return next(r for r in self.model_rows(name)
                    if r['precision'] == precision)

    def ddp(self, timeout: float = 300.0) -> Dict:
        if self.ddp_row is None:
            self.ddp_row = run_ddp(self.plan, self.device, self.seed,
                                   self.config_root, self.out_dir, timeout)
        return self.ddp_row

    def write(self) -> Dict:
        """``gpu_smoke.md`` and ``gpu_smoke.json`` in ``out_dir``, of the
        rows trained so far (in the plan's order) and the DDP row if it
        ran; returns the report."""
        facts = machine(self.device)
        facts['torch_cuda'] = torch.version.cuda
        if self.device.type == 'cuda':
            facts['visible_gpus'] = torch.cuda.device_count()
        rows = [r for name in self.plan.models for r in self.rows.get(name,
                                                                      [])]
        done = rows + ([self.ddp_row] if self.ddp_row else [])
        report = dict(machine=facts, plan=asdict(self.plan),
                      tolerance=LOSS_TOLERANCE, rows=rows, ddp=self.ddp_row,
                      passed=all(passes(r['status']) for r in done),
                      seconds=time.perf_counter() - self.start)
        os.makedirs(self.out_dir, exist_ok=True)
        write_json(osp.join(self.out_dir, RESULTS), report)
        write_text(osp.join(self.out_dir, REPORT), report_markdown(
            facts, self.plan, rows, self.ddp_row) + '\n')
        return report


# ------------------------------------------------------------- DDP
def first_error(log: str) -> str:
    """The first rank's exception line in a torchrun log (``[rankN]:
    SomeError: ...``), a rank's watchdog line (its stacks follow it), else
    the log's last line."""
    with open(log, errors='replace') as f:
        lines = [line.strip() for line in f if line.strip()]
    for line in lines:
        if line.startswith('Timeout ('):  # faulthandler's, see _ddp_rank
            return f'a rank stalled: {line} its threads\' stacks follow'
        if line.startswith('[rank') and ('Error: ' in line or
                                         'Exception: ' in line):
            return line
    return lines[-1] if lines else 'no output'


def stop_launch(proc: subprocess.Popen, grace: float = 30.0) -> None:
    """Stop ``torchrun`` (``proc``, its own session) and its ranks: SIGTERM,
    which torchrun passes on to the ranks (each in a session of its own,
    out of reach of a signal to torchrun's group), then SIGKILL after
    ``grace`` seconds."""
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def run_ddp(plan: SmokePlan, device: torch.device, seed: int,
            config_root: str, out_dir: str, timeout: float) -> Dict:
    """The DDP row (module docstring); the launch's output is ``ddp.log``
    in ``out_dir``."""
    processes = plan.ddp_processes or torch.cuda.device_count()
    row: Dict[str, Any] = dict(
        model=plan.ddp_model, processes=processes,
        backend='nccl' if device.type == 'cuda' else 'gloo',
        iterations=plan.ddp_iterations, batch=plan.ddp_batch,
        crop='x'.join(map(str, plan.ddp_crop)))
    if processes < 2:
        row['status'] = DDP_ONE_GPU
        return row
    os.makedirs(out_dir, exist_ok=True)
    log = osp.join(out_dir, 'ddp.log')
    with tempfile.TemporaryDirectory() as tmp:
        spec_path, result = osp.join(tmp, 'spec.json'), osp.join(
            tmp, 'result.json')
        write_json(spec_path, dict(
            model=plan.ddp_model, arch=plan.arch, crop=list(plan.ddp_crop),
            batch=plan.ddp_batch, iterations=plan.ddp_iterations, seed=seed,
            rep_grid=plan.rep_grid, watchdog=max(timeout - 30, timeout / 2),
            device=device.type, config_root=config_root, out=result))
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(
            [REPO, osp.dirname(HERE)] + [p for p in [
                os.environ.get('PYTHONPATH')] if p]))
        if device.type == 'cpu':
            env.update(OMP_NUM_THREADS='1', CUDA_VISIBLE_DEVICES='')
        command = [sys.executable, '-m', 'torch.distributed.run',
                   '--nnodes=1', f'--nproc_per_node={processes}',
                   '--master_addr=127.0.0.1', f'--master_port={free_port()}',
                   osp.join(HERE, '_ddp_rank.py'), spec_path]
        start = time.perf_counter()
        with open(log, 'w') as log_file:
            proc = subprocess.Popen(command, stdout=log_file,
                                    stderr=subprocess.STDOUT, env=env,
                                    start_new_session=True)
            try:
                code = proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                stop_launch(proc)
                code = None
        row['seconds'] = time.perf_counter() - start
        if code != 0 or not osp.exists(result):
            row['status'] = 'error: ' + (
                f'timed out after {timeout:.0f} s' if code is None else
                f'torchrun exit {code}') + f' ({first_error(log)}; ddp.log)'
            return row
        with open(result) as f:
            row.update(json.load(f))
    losses = [x for rank in row['losses'] for x in rank]
    problems = []
    if not all(math.isfinite(x) for x in losses):
        problems.append('non-finite loss')
    if row['max_param_diff'] != 0.0:
        problems.append('parameters differ across ranks by up to '
                        f'{row["max_param_diff"]:.2e}')
    row['status'] = 'FAILED: ' + '; '.join(problems) if problems else 'ok'
    return row


# ------------------------------------------------------------- the report
_SMOKE_COLUMNS = [
    ('model', 'model', '{}'), ('precision', 'precision', '{}'),
    ('first_loss', 'first loss', '.4f'), ('last_loss', 'last loss', '.4f'),
    ('vs_float32', 'gap to float32', '.2%'),
    ('skipped_steps', 'scaler skipped', '{}'),
    ('final_scale', 'final scale', '.0f'), ('s_per_iter', 's/iter', '.3f'),
    ('peak_mib', 'peak MiB', '.0f'),
    ('attention', 'attention kernels (first iteration)', '{}')]
_DDP_COLUMNS = [('model', 'model', '{}'), ('processes', 'processes', '{}'),
                ('backend', 'backend', '{}'), ('crop', 'crop', '{}'),
                ('batch', 'batch per process', '{}'),
                ('iterations', 'iterations', '{}'),
                ('mean_losses', 'mean loss per iteration', '{}'),
                ('max_param_diff', 'max param diff across ranks', '.1e'),
                ('stride_warnings', 'DDP stride warnings', '{}'),
                ('seconds', 's (with start)', '.0f')]


def _ddp_for_table(row: Dict) -> Dict:
    if row.get('losses'):
        row = dict(row, mean_losses=' '.join(
            f'{sum(s) / len(s):.4f}' for s in zip(*row['losses'])))
    return row


def report_markdown(facts: Dict, plan: SmokePlan, rows: List[Dict],
                    ddp: Optional[Dict]) -> str:
    """The report: the device, torch and date, the plan, one table of the
    training runs (a row per model and precision) and the DDP row."""
    device = facts.get('gpu') or facts['cpu']
    done = rows + ([ddp] if ddp else [])
    passed = all(passes(r['status']) for r in done)
    skipped = ' (DDP skipped: one GPU)' if ddp and \
        ddp['status'] == DDP_ONE_GPU else ''
    lines = [f'# GPU smoke check: {device}', '',
             f'{device}, torch {facts["torch"]}, {facts["date"]}; '
             f'{plan.sizes_note}. Every model from the same random weights '
             'on the same batches in each precision; "gap to float32": '
             '|last loss - float32\'s| / float32\'s (tolerance '
             f'{LOSS_TOLERANCE:.0%}); "scaler skipped": steps the dynamic '
             'loss scale skipped (its decreases). '
             + (f'All checks passed{skipped}.' if passed else
                '**Some checks FAILED** (see the note column).'), '',
             '## Training in float32, bfloat16 and float16', '',
             results_table(rows, _SMOKE_COLUMNS), '', '## DDP', '',
             results_table([_ddp_for_table(ddp)], _DDP_COLUMNS) if ddp
             else 'Not run.']
    return '\n'.join(lines)
