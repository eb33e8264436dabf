"""The GPU report: its whole sequence as a dry run on the CPU, and the
one-line answer of a machine without a GPU."""
import json

import pytest
import torch

from mmseg_whitebox.analysis.benchmark import plan_differences
from mmseg_whitebox.analysis.gpu_report import (BENCHMARKS, DRY_RUN_PLAN,
                                                GPU_PLAN, REPORT,
                                                SIZE_FIELDS, missing_gpu,
                                                run_gpu_report, slope_lines)


def test_the_dry_run_plan_is_the_gpu_plan_made_smaller():
    # the same models, heads, banded-loss rows and configs; only sizes
    # (of inputs and models), CBSA's grid of representatives and timing
    # budgets differ
    differing = plan_differences(DRY_RUN_PLAN, GPU_PLAN)
    assert differing and set(differing) <= set(SIZE_FIELDS)
    for name in ('decoder_heads', 'encoders', 'train_models',
                 'train_band_rows', 'sweep_config', 'decoder_encoder'):
        assert getattr(DRY_RUN_PLAN, name) == getattr(GPU_PLAN, name)
    assert GPU_PLAN.train_band_rows  # the banded-loss rows run in both


@pytest.mark.slow
def test_dry_run_reports_every_benchmark_in_both_precisions(tmp_path,
                                                            one_thread):
    out = tmp_path / 'report'
    report = run_gpu_report(str(out), dry_run=True)
    text = (out / REPORT).read_text()
    assert f'torch {torch.__version__}' in text
    assert report['machine']['cpu'] in text.splitlines()[0]
    for name, (title, _, table) in BENCHMARKS.items():
        done = report['results'][name]
        assert 'error' not in done, done
        rows = done['results']
        assert {r['precision'] for r in rows} == {'float32', 'bfloat16'}
        assert all(r['status'] == 'ok' for r in rows), rows
        assert f'## {title}' in text
        header = '| ' + ' | '.join(c[1] for c in table.columns) + ' | note |'
        assert header in text  # one table per benchmark
        with open(out / f'{name}.json') as f:
            assert json.load(f)['results'] == json.loads(json.dumps(rows))
    # each precision's ratios are to its own reference row, and no row
    # has a ratio to itself
    decoders = report['results']['decoders']['results']
    for precision in ('float32', 'bfloat16'):
        mine = {r['head']: r for r in decoders
                if r['precision'] == precision}
        assert 'fwd_ms_vs_segmenter' not in mine['segmenter']
        assert mine['cbsa']['fwd_ms_vs_segmenter'] == pytest.approx(
            mine['cbsa']['fwd_ms'] / mine['segmenter']['fwd_ms'])
    train = report['results']['train_step']['results']
    assert {r['head'] for r in train} == {
        m + b for m in GPU_PLAN.train_models for b in ('', ' banded')}
    for r in train:
        assert ('step_ms_vs_ref' in r) == (r['head'] != 'vit+segmenter')
    encoders = report['results']['encoders']['results']
    assert {r['head'] for r in encoders} == set(GPU_PLAN.encoders)
    assert all(r['identical'] for r in
               report['results']['shared_sweep']['results'])


def test_the_report_fits_each_heads_slope_per_precision():
    """The linearity check: cost x4 per token x4 is slope 1, x16 is 2; a
    head measured at one size has no slope."""
    rows = [dict(head=head, precision=precision, tokens=tokens,
                 fwd_ms=tokens ** power)
            for precision in ('float32', 'bfloat16')
            for head, power in (('cbsa', 1), ('segmenter', 2))
            for tokens in (1024, 4096)]
    rows.append(dict(head='once', precision='float32', tokens=1024,
                     fwd_ms=1.0))
    assert slope_lines(rows, 'fwd_ms') == [
        'Slope of fwd_ms against tokens (log-log; 1 = linear), float32: '
        'cbsa 1.00, segmenter 2.00.',
        'Slope of fwd_ms against tokens (log-log; 1 = linear), bfloat16: '
        'cbsa 1.00, segmenter 2.00.']


def test_compiled_heads_are_timed_beside_themselves_eager(eager_compile):
    """The GPU plan's compiled decoder rows, through the report's own path
    on one head at the dry run's size; dynamo's ``eager`` backend stands in
    for inductor (the same graphs, no code generated)."""
    from dataclasses import replace
    from mmseg_whitebox.analysis.benchmark import project_configs
    from mmseg_whitebox.analysis.gpu_report import _decoders
    plan = replace(DRY_RUN_PLAN, decoder_heads=('segmenter', ),
                   decoder_compiled=('segmenter', ))
    assert 'segmenter' in GPU_PLAN.decoder_compiled
    rows = {(r['head'], r['precision']): r for r in _decoders(
        plan, torch.device('cpu'), None, project_configs())}
    assert sorted(rows) == [(head, precision)
                            for head in ('segmenter', 'segmenter+compile')
                            for precision in ('bfloat16', 'float32')]
    for precision in ('float32', 'bfloat16'):
        eager = rows[('segmenter', precision)]
        compiled = rows[('segmenter+compile', precision)]
        assert compiled['fwd_compile_s'] > 0
        assert compiled['train_compile_s'] > 0
        assert compiled['fwd_ms_vs_eager'] == pytest.approx(
            compiled['fwd_ms'] / eager['fwd_ms'])


def test_gpu_sizes_are_refused_on_a_cpu(tmp_path):
    with pytest.raises(ValueError, match='would take hours'):
        run_gpu_report(str(tmp_path / 'x'), device='cpu')
    assert not (tmp_path / 'x').exists()


@pytest.mark.skipif(torch.cuda.is_available(), reason='a CUDA device exists')
def test_without_a_gpu_the_report_says_so_in_one_line():
    # the tool prints this line and exits 0 (not run here: a tool's start
    # costs seconds); a CPU device needs no GPU
    assert missing_gpu('cpu') is None
    message = missing_gpu('cuda')
    assert message.startswith('no GPU') and '\n' not in message
