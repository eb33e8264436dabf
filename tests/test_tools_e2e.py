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

from _helpers import DEMO_SEGMENTER, run_tool, small_run_options


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
    opts = small_run_options(trained['data_root'], iters=4)
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


def test_tools_fail_clearly_on_bad_input(trained, tmp_path):
    missing = run_tool(['tools/test.py', DEMO_SEGMENTER,
                        str(tmp_path / 'nope.pth')], check=False)
    assert missing.returncode != 0
    assert 'nope.pth' in missing.stderr and 'does not exist' in \
        missing.stderr and 'Traceback' not in missing.stderr
    no_data = run_tool(['tools/train.py', DEMO_SEGMENTER, '--work-dir',
                        str(tmp_path), '--cfg-options',
                        'train_dataloader.dataset.data_root='
                        'data/synthetic-missing/ADEChallengeData2016'],
                       check=False)
    assert no_data.returncode != 0
    assert 'tools/dataset_converters/synthetic_ade20k.py' in no_data.stderr
    no_cfg = run_tool(['tools/train.py', 'configs/nope.py'], check=False)
    assert no_cfg.returncode != 0 and 'does not exist' in no_cfg.stderr


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


def test_mmsegs_own_train_tool_uses_the_configs(tiny_ade, tmp_path):
    """custom_imports lets mmseg's own tools/train.py run our configs."""
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


def test_demo_freeze_encoder_zeroes_every_encoder_step():
    """``demo.py --freeze-encoder``: the optimiser built from the config
    with its options gives every backbone parameter lr 0 and decay 0, and
    leaves the decoder's as configured."""
    from mmengine.config import Config
    from mmengine.optim import build_optim_wrapper
    from mmengine.registry import init_default_scope
    from mmseg.registry import MODELS

    from _helpers import REPO, demo_configs, import_tool
    demo = import_tool('tools/misc/demo.py')
    assert demo.freeze_options(False) == []
    cfg = Config.fromfile(osp.join(REPO, demo_configs()['cbsa']))
    cfg.merge_from_dict({key: float(value) for key, value in (
        item.split('=') for item in demo.freeze_options(True))})
    init_default_scope('mmseg')
    model = MODELS.build(cfg.model)
    wrapper = build_optim_wrapper(model, cfg.optim_wrapper)
    base_lr = cfg.optim_wrapper.optimizer.lr
    names = {id(p): n for n, p in model.named_parameters()}
    seen = set()
    for group in wrapper.optimizer.param_groups:
        for param in group['params']:
            name = names[id(param)]
            seen.add(name)
            if name.startswith('backbone.'):
                assert group['lr'] == 0.0 and group['weight_decay'] == 0.0
            else:
                assert group['lr'] == base_lr, name
    assert any(n.startswith('backbone.') for n in seen)
    assert any(n.startswith('decode_head.') for n in seen)
