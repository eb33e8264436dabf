"""``run_demo``: what ``make demo`` (tools/misc/demo.py) does, called from
Python on a small context dataset: every step's output, figures equal to
those the test loop and the sweep saved, and a second call that reuses
the finished runs."""
import json
import os.path as osp

import pytest

from mmseg_whitebox.apis.demo import (DemoOptions, format_demo_results,
                                      run_demo)
from mmseg_whitebox.datasets.synthetic_ade20k import SyntheticADE20KSpec
from mmseg_whitebox.utils.tool_error import InputError, ToolError


def small_demo(tmp_path, **kwargs) -> DemoOptions:
    return DemoOptions(
        out=str(tmp_path / 'demo'), data_root=str(tmp_path / 'data'),
        models=['cbsa'], iters=2, sigmas=[0.1], draws=1,
        dataset=SyntheticADE20KSpec(variant='context', num_train=4,
                                    num_val=2, image_size=(64, 64)),
        **kwargs)


def test_demo_trains_tests_draws_and_sweeps(tmp_path):
    lines = []
    summary = run_demo(small_demo(tmp_path), log=lines.append)
    out = tmp_path / 'demo'
    with open(out / 'summary.json') as f:
        assert json.load(f) == json.loads(json.dumps(summary))
    cbsa = summary['models']['cbsa']
    assert cbsa['checkpoint'] == str(out / 'cbsa' / 'iter_2.pth')
    assert osp.isfile(cbsa['inference']['overlay'])
    assert osp.isfile(summary['robustness_plot'])
    assert cbsa['decoder_params'] > 0 and cbsa['decoder_gflops_512'] > 0
    assert 0 < summary['chance_miou'] < 100

    # the figures are those the test loop and the sweep wrote
    [metrics] = list((out / 'cbsa' / 'test').glob('*/*.json'))
    with open(metrics) as f:
        assert json.load(f)['mIoU'] == cbsa['mIoU']
    with open(out / 'robustness' / 'cbsa' / 'results.json') as f:
        sweep = json.load(f)
    robustness = cbsa['robustness']
    assert robustness['clean'] == sweep['clean']['mIoU']
    assert list(robustness['curve']) == [0.1]
    assert len(robustness['usage']) == len(sweep['attention_usage'])

    table = format_demo_results(summary)
    assert f'{cbsa["mIoU"]:>8.2f}' in table
    assert f'overlay (cbsa): {cbsa["inference"]["overlay"]}' in table

    # a second call reuses the finished run and sweep
    again = run_demo(small_demo(tmp_path), log=lines.append)
    assert any(line.startswith('[cbsa] reusing finished run')
               for line in lines)
    assert again['models']['cbsa']['robustness'] == robustness


@pytest.mark.parametrize('kwargs, message', [
    (dict(models=['cbsa', 'nope']), '--models: no demo model nope'),
    (dict(sweep_models=['cbt2']), '--sweep-models: no demo model cbt2'),
    (dict(iters=0), '--iters must be >= 1'),
    (dict(draws=0), '--draws must be a whole number >= 1'),
    (dict(sigmas=[-1.0]), '--sigmas must be finite and >= 0'),
])
def test_demo_options_are_checked_before_any_work(tmp_path, kwargs, message):
    with pytest.raises(InputError, match=message):
        DemoOptions(out=str(tmp_path / 'demo'), **kwargs)
    assert not (tmp_path / 'demo').exists()


@pytest.mark.parametrize('option', ['out', 'data_root'])
def test_demo_refuses_an_output_folder_under_a_file(tmp_path, option):
    blocker = tmp_path / 'file'
    blocker.write_text('x')
    options = small_demo(tmp_path)
    setattr(options, option, str(blocker / option))
    flag = '--' + option.replace('_', '-')
    with pytest.raises(ToolError, match=f'{flag} .* is a file'):
        run_demo(options, log=lambda line: None)
    assert not (tmp_path / 'data').exists()  # nothing generated
