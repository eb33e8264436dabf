"""End to end through the tools, as a user runs them: train a few
iterations, checkpoint, resume, test, and infer with mmseg.apis."""
import glob
import json
import os
import os.path as osp
import subprocess
import sys

import pytest
import torch

from _helpers import DEMO_SEGMENTER, REPO, run_tool, small_run_options


@pytest.fixture(scope='module')
def trained(tiny_ade, tmp_path_factory):
    """Train 2 iterations, then resume the run to 4."""
    work_dir = str(tmp_path_factory.mktemp('e2e'))
    opts = small_run_options(tiny_ade, iters=2)
    run_tool(['tools/train.py', DEMO_SEGMENTER, '--work-dir', work_dir,
              '--cfg-options'] + opts)
    first = torch.load(osp.join(work_dir, 'iter_2.pth'), weights_only=True)
    opts = small_run_options(tiny_ade, iters=4) + [
        'default_hooks.checkpoint.max_keep_ckpts=-1']
    resumed = run_tool(['tools/train.py', DEMO_SEGMENTER, '--work-dir',
                        work_dir, '--resume', '--cfg-options'] + opts)
    return dict(work_dir=work_dir, data_root=tiny_ade, first=first,
                resume_log=resumed.stdout + resumed.stderr,
                ckpt=osp.join(work_dir, 'iter_4.pth'))


def test_checkpoints_load_weights_only(trained):
    ckpt = torch.load(trained['ckpt'], weights_only=True)
    assert ckpt['meta']['iter'] == 4
    assert trained['first']['meta']['iter'] == 2
    assert {'state_dict', 'optimizer', 'message_hub',
            'param_schedulers'} <= set(ckpt)


def test_resume_continues_from_the_checkpoint(trained):
    log = trained['resume_log']
    assert 'resumed from' in log.lower() or 'Auto resumed' in log
    assert 'Iter(train) [3/4]' in log and 'Iter(train) [1/4]' not in log
    # the optimizer state came along: momentum buffers exist at iter 4
    ckpt = torch.load(trained['ckpt'], weights_only=True)
    assert ckpt['optimizer']['state']
    with open(osp.join(trained['work_dir'], 'last_checkpoint')) as f:
        assert f.read().strip().endswith('iter_4.pth')


def test_test_tool_reports_and_saves(trained, tmp_path):
    # only the test data exist: testing never reads the training folder,
    # --show-dir included (mmseg's visualization hook asks for the
    # runner's iteration, which would build the training loop)
    opts = small_run_options(trained['data_root'], iters=4) + [
        f'train_dataloader.dataset.data_root={tmp_path / "absent"}']
    proc = run_tool(['tools/test.py', DEMO_SEGMENTER, trained['ckpt'],
                     '--work-dir', str(tmp_path), '--show-dir', 'vis',
                     '--out', str(tmp_path / 'preds'), '--cfg-options'] +
                    opts)
    assert 'mIoU' in proc.stdout + proc.stderr
    metrics = glob.glob(str(tmp_path / '*' / '*.json'))
    assert metrics
    with open(metrics[0]) as f:
        result = json.load(f)
    assert 0 <= result['mIoU'] <= 100 and 'aAcc' in result
    assert len(os.listdir(tmp_path / 'preds')) == 3
    painted = glob.glob(str(tmp_path / 'vis' / '**' / '*.png'),
                        recursive=True)
    assert len(painted) == 3


def assert_bad_input(proc, tool: str, *words: str) -> None:
    """Bad input: exit status 2 and one line ``<tool>: error: ...`` naming
    what was wrong, no traceback (mmseg_whitebox.cli.run_tool)."""
    assert proc.returncode == 2, (proc.returncode, proc.stderr[-3000:])
    assert f'{tool}: error: ' in proc.stderr, proc.stderr[-3000:]
    assert 'Traceback' not in proc.stderr, proc.stderr[-3000:]
    for word in words:
        assert word in proc.stderr, (word, proc.stderr[-3000:])


def test_tools_fail_clearly_on_bad_input(trained, tmp_path):
    missing = run_tool(['tools/test.py', DEMO_SEGMENTER,
                        str(tmp_path / 'nope.pth')], check=False)
    assert_bad_input(missing, 'test.py', 'nope.pth', 'does not exist')
    no_data = run_tool(['tools/train.py', DEMO_SEGMENTER, '--work-dir',
                        str(tmp_path), '--cfg-options',
                        'train_dataloader.dataset.data_root='
                        'data/synthetic-missing/ADEChallengeData2016'],
                       check=False)
    assert_bad_input(no_data, 'train.py',
                     'tools/dataset_converters/synthetic_ade20k.py')
    no_cfg = run_tool(['tools/train.py', 'configs/nope.py'], check=False)
    assert_bad_input(no_cfg, 'train.py', 'configs/nope.py', 'does not exist')
    no_cfg = run_tool(['tools/analysis_tools/coding_rate.py',
                       'configs/nope.py', trained['ckpt']], check=False)
    assert_bad_input(no_cfg, 'coding_rate.py', 'configs/nope.py',
                     'does not exist')


def test_sweep_and_plot_tools_check_arguments_before_any_work(tmp_path):
    """Settings the sweep would refuse are refused before a model is
    built, with the package's own checks (no config or checkpoint is
    read: they do not exist)."""
    sweep = ['tools/noise_robustness.py', 'configs/nope.py', 'nope.pth',
             '--out', str(tmp_path / 'sweep')]
    assert_bad_input(run_tool(sweep + ['--draws', '0'], check=False),
                     'noise_robustness.py', '--draws')
    assert_bad_input(run_tool(sweep + ['--compare', str(tmp_path / 'x')],
                              check=False),
                     'noise_robustness.py', 'results.json')
    (tmp_path / 'sweep').mkdir()
    (tmp_path / 'sweep' / 'results.json').write_text('{}')
    assert_bad_input(run_tool(sweep, check=False), 'noise_robustness.py',
                     '--resume')
    # errors of the argument parser have the same form and status
    assert_bad_input(run_tool(sweep + ['--layers', 'each', '1'],
                              check=False), 'noise_robustness.py', 'each')
    plot = ['tools/analysis_tools/plot_robustness.py',
            str(tmp_path / 'sweep'), '--out-file', str(tmp_path / 'p.png')]
    assert_bad_input(run_tool(plot + ['--labels', 'a', 'b'], check=False),
                     'plot_robustness.py', '--labels')
    assert_bad_input(run_tool(plot[:1] + [str(tmp_path / 'x')] + plot[2:],
                              check=False),
                     'plot_robustness.py', 'results.json')


TOOLS = sorted(osp.relpath(p, REPO) for p in glob.glob(
    osp.join(REPO, 'tools', '**', '*.py'), recursive=True))


@pytest.mark.parametrize('tool', TOOLS)
def test_tools_are_thin_and_fail_one_way(tool):
    """Every tool imports the installed package (no sys.path edits) and
    reports bad input as a ToolError through run_tool (status 2)."""
    with open(osp.join(REPO, tool)) as f:
        source = f.read()
    assert 'sys.path' not in source
    assert "raise SystemExit('error" not in source
    assert "raise SystemExit(f'error" not in source
    assert source.rstrip().endswith(
        "if __name__ == '__main__':\n    run_tool(main)"), tool


def test_mmseg_apis_on_saved_checkpoint(trained, tmp_path):
    from mmseg.apis import MMSegInferencer, inference_model, init_model
    img = osp.join(trained['data_root'], 'images', 'validation',
                   'ADE_val_00000000.jpg')
    model = init_model(DEMO_SEGMENTER, trained['ckpt'], device='cpu')
    assert len(model.dataset_meta['classes']) == 150
    result = inference_model(model, img)
    pred = result.pred_sem_seg.data
    assert pred.shape[0] == 1 and pred.shape[1:] == result.ori_shape
    inferencer = MMSegInferencer(model=DEMO_SEGMENTER,
                                 weights=trained['ckpt'], device='cpu')
    out = inferencer(img, out_dir=str(tmp_path))
    assert out['predictions'].shape == tuple(result.ori_shape)
    assert os.listdir(tmp_path / 'vis')


@pytest.mark.slow
def test_mmsegs_own_train_tool_uses_the_configs(tiny_ade, tmp_path):
    """custom_imports lets mmseg's own tools/train.py run our configs: the
    config imports mmseg_whitebox (and so applies the compat layer) before
    anything needs it."""
    import mmseg
    tool = osp.join(osp.dirname(mmseg.__file__), '.mim', 'tools',
                    'train.py')
    if not osp.isfile(tool):
        pytest.skip('mmseg was installed without its tools')
    opts = small_run_options(tiny_ade, iters=2)
    proc = subprocess.run(
        [sys.executable, tool, DEMO_SEGMENTER, '--work-dir',
         str(tmp_path / 'run'), '--cfg-options'] + opts,
        cwd=str(tmp_path), capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    torch.load(tmp_path / 'run' / 'iter_2.pth', weights_only=True)


def test_interrupted_tools_keep_what_is_done_and_say_how_to_resume(capsys):
    """Ctrl-C in a sweep or corruption run (``resumable``): what is done is
    plotted, one line says where it is and how to continue, exit 130."""
    from mmseg_whitebox.cli import INTERRUPTED, resumable
    calls = []
    with resumable('work_dirs/run', 'draws', lambda: calls.append('plot')):
        calls.append('work')
    assert calls == ['work']  # no interruption: nothing else happens
    with pytest.raises(SystemExit) as stop:
        with resumable('work_dirs/run', 'draws',
                       lambda: calls.append('plot')):
            raise KeyboardInterrupt
    assert stop.value.code == INTERRUPTED == 130
    assert calls == ['work', 'plot']
    err = capsys.readouterr().err
    assert ('interrupted: finished draws are saved in work_dirs/run; rerun '
            'with --resume to continue') in err
