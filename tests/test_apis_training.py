"""``train_model`` and ``evaluate_checkpoint``: what tools/train.py and
tools/test.py do, called from Python in this process."""
import argparse
import glob
import json
import os.path as osp

from _helpers import DEMO_SEGMENTER, small_run_options

from mmseg_whitebox.apis import evaluate_checkpoint, train_model
from mmseg_whitebox.engine.runner_config import runner_config
from mmseg_whitebox.cli import add_cfg_options_arg
from mmseg_whitebox.engine.hooks import main_process_logger_hook


def demo_config(tiny_ade: str, work_dir: str):
    parser = argparse.ArgumentParser()
    add_cfg_options_arg(parser)
    options = parser.parse_args(
        ['--cfg-options'] + small_run_options(tiny_ade, iters=2))
    return runner_config(DEMO_SEGMENTER, options.cfg_options, work_dir)


def _test_metrics_files(work_dir: str) -> list:
    return glob.glob(osp.join(work_dir, '*', '*.json'))


def test_train_then_evaluate_the_final_checkpoint(tiny_ade, tmp_path,
                                                  capsys, monkeypatch):
    """Two iterations, a cut-off checkpoint file of an earlier run removed
    first (with a note); the final checkpoint, named in last_checkpoint,
    tested with the config's metric.

    mmengine's LoggerHook writes a test's metrics file on every rank, to
    one path; the configs a tool runs use MainProcessLoggerHook, which
    leaves it to rank 0 (a non-main rank writes no file, logs the line)."""
    cut_off = tmp_path / '.iter_9.abcd1234.pth'
    cut_off.write_bytes(b'half a checkpoint')
    cfg = demo_config(tiny_ade, str(tmp_path))
    assert cfg.default_hooks.logger.type == 'MainProcessLoggerHook'
    assert cfg.default_hooks.logger.log_metric_by_epoch is False  # kept
    counter = train_model(cfg)
    assert f'note: removing {cut_off}' in capsys.readouterr().err
    assert not cut_off.exists()
    assert counter.summary() is None  # nothing non-finite
    final = tmp_path / 'iter_2.pth'
    assert (tmp_path / 'last_checkpoint').read_text() == str(final)
    assert not (tmp_path / '.lock').exists()  # the run's lock is released

    main = str(tmp_path / 'main')
    metrics = evaluate_checkpoint(demo_config(tiny_ade, main), str(final))
    assert 0 <= metrics['mIoU'] <= 100
    [written] = _test_metrics_files(main)
    with open(written) as f:
        assert json.load(f)['mIoU'] == metrics['mIoU']

    other = str(tmp_path / 'other-rank')
    monkeypatch.setattr(main_process_logger_hook, 'is_main_process',
                        lambda: False)
    evaluate_checkpoint(demo_config(tiny_ade, other), str(final))
    assert _test_metrics_files(other) == []
    [log] = glob.glob(osp.join(other, '*', '*.log'))
    with open(log) as f:
        assert 'Iter(test) [3/3]' in f.read()


def test_a_run_stops_its_dataloader_workers_when_it_ends(tiny_ade, tmp_path):
    """The demo config's persistent test workers (2) are stopped by
    ReleaseDataloaderWorkersHook when ``runner.test()`` returns, not left
    for the garbage collector (which, once another Runner has forked its
    workers, waits 5 s for each)."""
    from mmengine.hooks import Hook
    from mmengine.runner import Runner

    seen = []

    class RecordWorkers(Hook):
        def after_test_epoch(self, runner, metrics=None):
            seen.extend(runner.test_loop.dataloader._iterator._workers)

    cfg = demo_config(tiny_ade, str(tmp_path))
    assert cfg.test_dataloader.num_workers == 0  # small_run_options' ...
    cfg.test_dataloader.num_workers = 2  # ... the config's own
    cfg.test_dataloader.persistent_workers = True
    cfg.load_from = None
    runner = Runner.from_cfg(cfg)
    runner.register_hook(RecordWorkers())
    runner.test()
    assert len(seen) == 2
    assert not any(worker.is_alive() for worker in seen)
    assert runner.test_loop.dataloader._iterator is None
    runner.test()  # a loader used again starts new workers
    assert len(seen) == 4 and not any(w.is_alive() for w in seen)


def test_cut_off_checkpoints_are_removed_by_rank_0_alone(tmp_path, capsys,
                                                         monkeypatch):
    """Rank 0 removes the cut-off files (one already gone is skipped), the
    other ranks remove nothing; every rank then waits at the barrier."""
    import mmengine.dist
    from mmseg_whitebox.apis import training
    cut_off = tmp_path / '.iter_4.abcd1234.pth'
    cut_off.write_bytes(b'half a checkpoint')
    waited = []
    monkeypatch.setattr(mmengine.dist, 'barrier', lambda: waited.append(1))
    monkeypatch.setattr(mmengine.dist, 'get_rank', lambda: 1)
    training.remove_cut_off_checkpoints(str(tmp_path))
    assert cut_off.exists() and waited == [1]
    assert capsys.readouterr().err == ''

    gone = str(tmp_path / '.iter_2.wxyz9876.pth')  # removed meanwhile
    listed = training.stale_temporaries
    monkeypatch.setattr(training, 'stale_temporaries',
                        lambda *args: [gone] + listed(*args))
    monkeypatch.setattr(mmengine.dist, 'get_rank', lambda: 0)
    training.remove_cut_off_checkpoints(str(tmp_path))
    assert not cut_off.exists() and waited == [1, 1]
    err = capsys.readouterr().err
    assert f'note: removing {cut_off}' in err and gone not in err
