"""The GPU report, ``make gpu-report``: every command it runs is its
benchmark tool's own (flags, choices), in float32 and bfloat16; the
shared sweep writes its table under autocast; the report gathers every
benchmark's table; without a GPU it stops in one line. The tools run in
subprocesses; none is imported here."""
import json
import shlex
import subprocess
import sys

import pytest
import torch

from mmseg_whitebox.apis.demo_models import DEMO_MODELS

from _helpers import REPO, run_tool, skip_without_cpu_autocast

#: the report's benchmarks, as its folders name them, in its order
PARTS = ('decoders', 'decoders-compiled', 'encoders', 'train_step',
         'shared_sweep')
PRECISIONS = ('float32', 'bfloat16')


def make(*args: str) -> subprocess.CompletedProcess:
    """``make ARGS`` at the repository root with this interpreter, the
    venv taken as installed."""
    return subprocess.run(
        ['make', '--no-print-directory', '-o',
         '.venv/.mmseg_whitebox-installed', *args, f'PY={sys.executable}'],
        cwd=REPO, capture_output=True, text=True, timeout=300)


def report_commands(out: str):
    """``(tool, arguments)`` of every tool ``make gpu-report`` runs."""
    proc = make('-n', 'gpu-report', 'DEVICE=cpu', f'GPU_REPORT_OUT={out}')
    assert proc.returncode == 0, proc.stderr
    words = [shlex.split(line) for line in proc.stdout.splitlines()]
    return [(w[1], w[2:]) for w in words
            if len(w) > 1 and w[1].startswith('tools/')]


def flag_values(argv):
    """``{flag: [values]}`` of a command line of flags only."""
    found = {}
    for word in argv:
        if word.startswith('--'):
            flag = found.setdefault(word, [])
        else:
            flag.append(word)
    return found


def test_the_report_runs_each_benchmark_with_its_own_flags(tmp_path):
    commands = report_commands(str(tmp_path))
    runs = [(tool.rsplit('/', 1)[1], flag_values(argv)['--out'][0])
            for tool, argv in commands]
    assert [out.rsplit('/', 1)[1] for _, out in runs] == [
        f'{part}-{precision}' for precision in PRECISIONS
        for part in PARTS]
    for tool, argv in commands:
        flags = flag_values(argv)
        assert flags['--device'] == ['cpu']
        bfloat16 = flags['--out'][0].endswith('bfloat16')
        assert flags.get('--amp-dtype') == (['bfloat16'] if bfloat16
                                            else None)
    tools = sorted({tool for tool, _ in commands})
    options = json.loads(run_tool(['tests/_tool_parsers.py'] + tools)
                         .stdout.strip().splitlines()[-1])
    for tool, argv in commands:
        known = {flag: o for o in options[tool] for flag in o['flags']}
        for flag, values in flag_values(argv).items():
            assert flag in known, (tool, flag)
            if known[flag]['choices']:
                assert set(values) <= set(known[flag]['choices']), (tool,
                                                                    flag)
            if known[flag]['nargs'] == 0:
                assert not values, (tool, flag)


def test_the_shared_sweep_writes_its_table_under_autocast(tmp_path):
    """What the report's shared-sweep runs add to the tool: ``--amp`` and
    a table in ``--out``."""
    skip_without_cpu_autocast(torch.bfloat16)
    out = tmp_path / 'sweep'
    run_tool(['tools/analysis_tools/benchmark_shared_encoder.py',
              dict(DEMO_MODELS)['cbsa'], '--num-images', '1', '--shape',
              '128', '160', '--settings', '2', '--threads', '1',
              '--amp-dtype', 'bfloat16', '--out', str(out)])
    report = json.loads((out / 'benchmark.json').read_text())
    row, = report['results']
    assert row['amp'] == 'bfloat16' and row['identical'] is True
    assert row['size'] == '128x160' and row['settings'] == 2
    assert report['machine']['torch'] == torch.__version__
    table = (out / 'benchmark.md').read_text().splitlines()
    assert table[0].startswith('| config | images | image | settings |')
    assert len(table) == 3 and table[2].startswith('| configs/')


def test_the_report_gathers_every_table(tmp_path):
    """Every benchmark's table in each precision, headed by the device,
    torch and date; the decode heads' slopes under their tables."""
    for part in PARTS:
        for precision in PRECISIONS:
            folder = tmp_path / f'{part}-{precision}'
            folder.mkdir()
            (folder / 'benchmark.json').write_text(json.dumps(dict(
                machine=dict(cpu='CPU', gpu='GPU X', torch='9.9',
                             date='2031-01-01T00:00:00'),
                slopes=dict(cbsa=dict(fwd_ms=1.0, mem_fwd=1.0),
                            segmenter=dict(fwd_ms=1.96)))))
            (folder / 'benchmark.md').write_text(
                f'| head | ms | note |\n|---|---|---|\n| {part} | 1 | |\n')
    proc = make('gpu-report', 'DEVICE=cpu', 'BENCH=true',
                f'GPU_REPORT_OUT={tmp_path}')
    assert proc.returncode == 0, proc.stdout + proc.stderr
    text = (tmp_path / 'gpu_report.md').read_text()
    assert text.startswith('# GPU report: GPU X\n\nGPU X, torch 9.9, '
                           '2031-01-01T00:00:00.\n')
    sections = text.split('\n## ')[1:]
    assert [s.split('\n', 1)[0] for s in sections] == [
        f'{part}, {precision}' for part in PARTS for precision in PRECISIONS]
    slopes = ('Slope of fwd_ms against tokens (log-log; 1 = linear): cbsa '
              '1.00, segmenter 1.96.')
    for section in sections:
        part = section.split(',', 1)[0]
        assert f'| {part} | 1 | |' in section
        assert (slopes in section) == part.startswith('decoders')


@pytest.mark.skipif(torch.cuda.is_available(), reason='a CUDA device exists')
def test_without_a_gpu_the_report_stops_in_one_line(tmp_path):
    out = tmp_path / 'out'
    proc = make('gpu-report', f'GPU_REPORT_OUT={out}')
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr.startswith('gpu-report: no CUDA GPU is visible')
    assert len(proc.stderr.strip().splitlines()) == 2  # and make's own
    assert not out.exists()
