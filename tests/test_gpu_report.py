"""The GPU report: its whole sequence as a dry run on the CPU, and the
one-line answer of a machine without a GPU."""
import json

import pytest
import torch

from mmseg_whitebox.analysis.gpu_report import (BENCHMARKS, REPORT,
                                                missing_gpu, run_gpu_report)


def test_dry_run_reports_every_benchmark_in_both_precisions(tmp_path):
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
    # each precision's ratios are to its own reference row (exactly 1)
    decoders = report['results']['decoders']['results']
    refs = [r for r in decoders if r['head'] == 'segmenter']
    assert [r['fwd_ms_vs_segmenter'] for r in refs] == [1.0, 1.0]
    assert all(r['identical'] for r in
               report['results']['shared_sweep']['results'])


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
