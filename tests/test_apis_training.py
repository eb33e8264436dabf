"""``train_model`` and ``evaluate_checkpoint``: what tools/train.py and
tools/test.py do, called from Python in this process."""
import argparse
import glob
import json
import os.path as osp

from _helpers import DEMO_SEGMENTER, REPO, small_run_options
from mmseg_whitebox.apis.demo_models import DEMO_MODELS

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


def test_runs_of_one_config_started_in_one_second_log_apart(
        tiny_ade, tmp_path, monkeypatch):
    """mmengine names a run's logger after its config and the second it
    started, and gives a second Runner of that config started within the
    same second the first one's logger (its log in the first run's file):
    runner_config names a config's later runs in a process apart."""
    from mmengine.logging import MMLogger
    from mmengine.runner import Runner
    monkeypatch.setattr('time.time', lambda: 1.8e9)  # one second for both
    runners = [Runner.from_cfg(demo_config(tiny_ade, str(tmp_path / run)))
               for run in ('first', 'second')]
    assert runners[0].timestamp == runners[1].timestamp
    for runner, run in zip(runners, ('first', 'second')):
        logger = MMLogger.get_instance(runner.experiment_name)
        [log_file] = [h.baseFilename for h in logger.handlers
                      if hasattr(h, 'baseFilename')]
        assert log_file.startswith(str(tmp_path / run)), log_file


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


def test_auto_scale_lr_scales_the_lr_to_the_world_batch(tmp_path):
    """``train_model(..., auto_scale_lr=True)`` turns the config's
    ``auto_scale_lr`` on, and mmengine's Runner then scales every
    parameter group's learning rate (the CBSA demo's AdamW, lr 1e-3, with
    its paramwise groups) by the world batch over ``base_batch_size``: 1
    process x 2 crops for a base of 4 halves it. A config without a base
    batch size is a user's error."""
    import pytest
    from mmengine.config import Config
    from mmengine.runner import Runner
    from mmseg_whitebox.apis.training import enable_auto_scale_lr
    from mmseg_whitebox.utils.tool_error import ToolError

    def scaled_lrs(enable: bool) -> set:
        cfg = runner_config(osp.join(REPO, DEMO_MODELS['cbsa']), {
            'train_dataloader.batch_size': 2,
            'auto_scale_lr.base_batch_size': 4}, str(tmp_path / 'work'))
        assert cfg.auto_scale_lr == dict(enable=False, base_batch_size=4)
        if enable:
            enable_auto_scale_lr(cfg)
        runner = Runner.from_cfg(cfg)
        # what Runner.train does before it builds the schedulers
        wrapper = runner.build_optim_wrapper(runner.optim_wrapper)
        runner.scale_lr(wrapper, runner.auto_scale_lr)
        groups = wrapper.optimizer.param_groups
        assert len(groups) > 1
        return {group['lr'] for group in groups}

    assert scaled_lrs(False) == {1e-3}
    assert scaled_lrs(True) == {1e-3 * 2 / 4}
    with pytest.raises(ToolError, match='auto_scale_lr.base_batch_size'):
        enable_auto_scale_lr(Config(dict(optim_wrapper=dict())))


def test_auto_scale_lr_resume_on_another_world_batch_is_refused(
        tiny_ade, tmp_path):
    """--auto-scale-lr with --resume: mmengine scales the fresh optimizer's
    learning rate to the new world batch and logs so, then loads the
    checkpoint's optimizer and scheduler state, which keeps the old one.
    A checkpoint trained at world batch 2 (lr x 2/4) resumed at world batch
    1 is refused before any step, one line naming --auto-scale-lr; at its
    own world batch it resumes."""
    import pytest
    from mmengine.config import Config
    from mmseg_whitebox.utils.tool_error import InputError

    def config(batch: int, iters: int) -> Config:
        parser = argparse.ArgumentParser()
        add_cfg_options_arg(parser)
        options = parser.parse_args(['--cfg-options'] + small_run_options(
            tiny_ade, iters=iters, batch_size=batch) + [
                'auto_scale_lr.base_batch_size=4'])
        return runner_config(DEMO_SEGMENTER, options.cfg_options,
                             str(tmp_path))

    train_model(config(2, 2), auto_scale_lr=True)
    with pytest.raises(InputError) as refused:
        train_model(config(1, 4), resume=True, auto_scale_lr=True)
    line = str(refused.value)
    assert line.startswith('--auto-scale-lr with --resume: ') and \
        'iter_2.pth' in line and '\n' not in line, line
    assert 'was trained at learning rate 0.0005, --auto-scale-lr sets ' \
        "0.00025 for this run's world batch of 1" in line, line
    assert '(2 by its learning rate)' in line, line
    assert not (tmp_path / 'iter_4.pth').exists()
    train_model(config(2, 4), resume=True, auto_scale_lr=True)
    assert (tmp_path / 'iter_4.pth').exists()


def test_train_tool_passes_auto_scale_lr(tmp_path):
    """tools/train.py --auto-scale-lr reaches train_model: on a config
    without a base batch size it stops with the one-line error, exit 2,
    before any work."""
    from _helpers import run_tool
    proc = run_tool(['tools/train.py', DEMO_SEGMENTER, '--auto-scale-lr',
                     '--work-dir', str(tmp_path), '--cfg-options',
                     'auto_scale_lr=None'], check=False)
    assert proc.returncode == 2, proc.stderr[-3000:]
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith('train.py: error: --auto-scale-lr: the config '
                           'sets no auto_scale_lr.base_batch_size'), last
