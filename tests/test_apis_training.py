"""``train_model`` and ``evaluate_checkpoint``: what tools/train.py and
tools/test.py do, called from Python in this process."""
import argparse

from _helpers import DEMO_SEGMENTER, small_run_options

from mmseg_whitebox.apis import evaluate_checkpoint, train_model
from mmseg_whitebox.apis.runner_config import runner_config
from mmseg_whitebox.cli import add_cfg_options_arg


def demo_config(tiny_ade: str, work_dir: str):
    parser = argparse.ArgumentParser()
    add_cfg_options_arg(parser)
    options = parser.parse_args(
        ['--cfg-options'] + small_run_options(tiny_ade, iters=2))
    return runner_config(DEMO_SEGMENTER, options.cfg_options, work_dir)


def test_train_then_evaluate_the_final_checkpoint(tiny_ade, tmp_path,
                                                  capsys):
    """Two iterations, a cut-off checkpoint file of an earlier run removed
    first (with a note); the final checkpoint, named in last_checkpoint,
    tested with the config's metric."""
    cut_off = tmp_path / '.iter_9.abcd1234.pth'
    cut_off.write_bytes(b'half a checkpoint')
    counter = train_model(demo_config(tiny_ade, str(tmp_path)))
    assert f'note: removing {cut_off}' in capsys.readouterr().err
    assert not cut_off.exists()
    assert counter.summary() is None  # nothing non-finite
    final = tmp_path / 'iter_2.pth'
    assert (tmp_path / 'last_checkpoint').read_text() == str(final)
    assert not (tmp_path / '.lock').exists()  # the run's lock is released

    metrics = evaluate_checkpoint(demo_config(tiny_ade, str(tmp_path)),
                                  str(final))
    assert 0 <= metrics['mIoU'] <= 100
