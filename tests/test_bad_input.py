"""Bad input never turns into silent wrong numbers or an obscure error:
each case is an error (or a loud warning) that names the file and the fix.

Most cases call the checks directly (datasets built from the project's own
dataset base, the checkpoint loader, the run checks); a handful run the
tools as a user would.
"""
import os
import os.path as osp
import shutil

import numpy as np
import pytest
import torch
from mmengine.config import Config
from mmengine.registry import init_default_scope
from PIL import Image

from mmseg_whitebox.apis.demo_models import command_line, data_options
from mmseg_whitebox.datasets.checks import checked_seg_dataset
from mmseg_whitebox.engine.config_checks import (check_data_roots,
                                                 check_param_schedulers,
                                                 check_tta,
                                                 num_classes_problem)
from mmseg_whitebox.engine.hooks import NonFiniteCounter
from mmseg_whitebox.engine.pretrained import (download_error_message,
                                             reported_errors)
from mmseg_whitebox.utils.checkpoint_checks import (check_state_dict,
                                                    init_model,
                                                    load_checkpoint)
from mmseg_whitebox.utils.input_checks import check_writable_folder
from mmseg_whitebox.utils.tool_error import InputError, ToolError

from _helpers import DEMO_SEGMENTER, REPO, run_tool

SYNTH_BASE = osp.join(REPO, 'configs', '_base_', 'datasets',
                      'synthetic_ade20k.py')
PASCAL_BASE = osp.join(REPO, 'configs', '_base_', 'datasets',
                       'pascal_context.py')


# ---------------------------------------------------------------- data

def write_pair(root, name, size=(12, 16), label=None, split='training',
               image=True):
    """One ADE-layout sample: an RGB JPEG and a label PNG (file values
    1..150, 0 ignored)."""
    h, w = size
    img_dir = osp.join(root, 'images', split)
    ann_dir = osp.join(root, 'annotations', split)
    os.makedirs(img_dir, exist_ok=True)
    os.makedirs(ann_dir, exist_ok=True)
    if image:
        Image.fromarray(np.full((h, w, 3), 90, np.uint8)).save(
            osp.join(img_dir, name + '.jpg'))
    if label is not False:
        if label is None:
            label = np.ones((h, w), np.uint8)
            label[: h // 2] = 3
            label[0, 0] = 0  # an ignored pixel
        Image.fromarray(label).save(osp.join(ann_dir, name + '.png'))
    return (osp.join(img_dir, name + '.jpg'),
            osp.join(ann_dir, name + '.png'))


@pytest.fixture
def ade(tmp_path):
    root = str(tmp_path / 'ADEChallengeData2016')
    for i in range(2):
        write_pair(root, f'ADE_train_{i:08d}')
    return root


@pytest.fixture(scope='module', autouse=True)
def mmseg_scope():
    init_default_scope('mmseg')


def build(root, loader='train_dataloader', base=SYNTH_BASE, **overrides):
    """The dataset of the project's dataset base config (so the checks as
    wired into the configs are tested), on ``root``."""
    cfg = Config.fromfile(base)
    dataset = dict(cfg[loader].dataset)
    if loader != 'train_dataloader':
        dataset['data_prefix'] = dict(img_path='images/training',
                                      seg_map_path='annotations/training')
    dataset.update(data_root=root, **overrides)
    assert dataset.pop('type') == 'CheckedSegDataset'
    return checked_seg_dataset(**dataset)


def raises_naming(exc_type, *words):
    """``pytest.raises`` that also checks the message names each word."""
    class Ctx:
        def __enter__(self):
            self.ctx = pytest.raises(exc_type)
            self.info = self.ctx.__enter__()
            return self.info

        def __exit__(self, *exc):
            suppressed = self.ctx.__exit__(*exc)
            message = str(self.info.value)
            for word in words:
                assert word in message, (word, message)
            return suppressed
    return Ctx()


def test_good_data_passes_the_checks(ade):
    """The control: a clean split builds and loads (file 0 -> 255)."""
    ds = build(ade)
    assert len(ds) == 2
    seg = ds[0]['data_samples'].gt_sem_seg.data
    assert set(seg.unique().tolist()) <= {0, 2, 255}


def test_empty_split(tmp_path):
    root = str(tmp_path / 'ADEChallengeData2016')
    os.makedirs(osp.join(root, 'images', 'training'))
    os.makedirs(osp.join(root, 'annotations', 'training'))
    with raises_naming(InputError, 'empty dataset split',
                       'images/training', 'data_root'):
        build(root)


def test_missing_image_folder(tmp_path):
    root = str(tmp_path / 'ADEChallengeData2016')
    os.makedirs(root)
    with raises_naming(InputError, 'images/training',
                       'does not exist', 'data_prefix'):
        build(root)


def test_image_without_label(ade):
    img, label = write_pair(ade, 'ADE_train_00000007', label=False)
    with raises_naming(InputError, 'have no label', img, label,
                       'Add the missing label'):
        build(ade)


def test_label_without_image(ade):
    _, label = write_pair(ade, 'ADE_train_00000009', image=False)
    with raises_naming(InputError, 'have no image',
                       'ADE_train_00000009.png', 'remove the stray'):
        build(ade)


def test_missing_label_folder(ade):
    shutil.rmtree(osp.join(ade, 'annotations'))
    with raises_naming(InputError, 'label folder',
                       'annotations/training', 'seg_map_path'):
        build(ade)


def pascal_like(tmp_path, names):
    root = str(tmp_path / 'VOC2010')
    os.makedirs(osp.join(root, 'JPEGImages'))
    os.makedirs(osp.join(root, 'SegmentationClassContext'))
    split = osp.join(root, 'ImageSets', 'SegmentationContext')
    os.makedirs(split)
    with open(osp.join(split, 'train.txt'), 'w') as f:
        f.write(''.join(n + '\n' for n in names))
    return root


def test_empty_split_file(tmp_path):
    root = pascal_like(tmp_path, [])
    with raises_naming(InputError, 'empty dataset split',
                       'train.txt', 'lists no samples'):
        build(root, base=PASCAL_BASE)


def test_split_file_lists_a_missing_image(tmp_path):
    root = pascal_like(tmp_path, ['2008_000001'])
    Image.fromarray(np.zeros((8, 8), np.uint8)).save(
        osp.join(root, 'SegmentationClassContext', '2008_000001.png'))
    with raises_naming(InputError, 'train.txt', "'2008_000001.jpg'",
                       'do not exist'):
        build(root, base=PASCAL_BASE)


@pytest.mark.parametrize('loader', ['train_dataloader', 'test_dataloader'])
def test_label_of_another_size(ade, loader):
    """Train pipeline (label next to the image) and test pipeline (label
    loaded after Resize: compared with the original size)."""
    img, label = write_pair(ade, 'ADE_train_00000000', size=(12, 16))
    Image.fromarray(np.ones((10, 16), np.uint8)).save(label)
    ds = build(ade, loader)
    with raises_naming(InputError, label, img, '10x16', '12x16',
                       're-export'):
        ds[0]


def test_rgb_label(ade):
    _, label = write_pair(ade, 'ADE_train_00000000',
                          label=np.ones((12, 16, 3), np.uint8))
    with raises_naming(InputError, label, '3 channels',
                       'single-channel', 'class indices'):
        build(ade)[0]


def test_label_value_above_num_classes(ade):
    label = np.ones((12, 16), np.uint8)
    label[3, 3] = 200  # class 199 after reduce_zero_label
    _, path = write_pair(ade, 'ADE_train_00000001', label=label)
    with raises_naming(InputError, path, '[199]', 'file values 200',
                       '150 classes', 'ignore index 255'):
        build(ade)[1]


def test_label_value_out_of_range_without_zero_reduction(tmp_path):
    """A dataset without reduce_zero_label (e.g. Cityscapes-like ids)."""
    root = str(tmp_path / 'ADEChallengeData2016')
    label = np.full((12, 16), 255, np.uint8)
    label[0, :4] = 151
    _, path = write_pair(root, 'ADE_train_00000000', label=label)
    pipeline = [dict(type='LoadImageFromFile'),
                dict(type='LoadAnnotations', reduce_zero_label=False),
                dict(type='CheckSegSample'), dict(type='PackSegInputs')]
    ds = build(root, pipeline=pipeline, reduce_zero_label=False)
    with raises_naming(InputError, path, '[151]', '0..149'):
        ds[0]


def test_out_of_range_label_in_the_tta_pipeline(ade):
    cfg = Config.fromfile(SYNTH_BASE)
    label = np.ones((12, 16), np.uint8)
    label[0, 0] = 180
    _, path = write_pair(ade, 'ADE_train_00000000', label=label)
    ds = build(ade, 'test_dataloader', pipeline=cfg.tta_pipeline)
    with raises_naming(InputError, path, '[179]'):
        ds[0]


@pytest.mark.parametrize('damage', ['truncated', 'empty', 'text'])
def test_unreadable_label(ade, damage):
    _, label = write_pair(ade, 'ADE_train_00000001')
    data = open(label, 'rb').read()
    with open(label, 'wb') as f:
        f.write({'truncated': data[:len(data) // 2], 'empty': b'',
                 'text': b'not a png\n'}[damage])
    with raises_naming(InputError, 'cannot read label', label,
                       'Replace it'):
        build(ade)[1]


def test_corrupt_image(ade):
    img, _ = write_pair(ade, 'ADE_train_00000000')
    with open(img, 'wb') as f:
        f.write(b'\xff\xd8 this is no jpeg')
    with raises_naming(InputError, 'cannot read image', img,
                       'Replace it'):
        build(ade)[0]


def test_label_deleted_after_the_build(ade):
    ds = build(ade)
    _, label = write_pair(ade, 'ADE_train_00000001')
    os.remove(label)
    with raises_naming(InputError, 'cannot read label', label):
        ds[1]


def test_every_dataset_base_is_checked():
    """Every dataset base wires the checks in: the checked dataset and a
    label check after every LoadAnnotations."""
    folder = osp.join(REPO, 'configs', '_base_', 'datasets')
    for name in sorted(os.listdir(folder)):
        cfg = Config.fromfile(osp.join(folder, name))
        for loader in ('train_dataloader', 'val_dataloader',
                       'test_dataloader'):
            assert cfg[loader].dataset.type == 'CheckedSegDataset', name
            types = [t['type'] for t in cfg[loader].dataset.pipeline]
            i = types.index('LoadAnnotations')
            assert types[i + 1] == 'CheckSegSample', (name, types)


# ---------------------------------------------------------- checkpoints

class Net(torch.nn.Module):
    def __init__(self, classes=3, extra=False):
        super().__init__()
        self.backbone = torch.nn.Linear(4, 8)
        self.cls = torch.nn.Linear(8, classes)
        if extra:
            self.neck = torch.nn.Linear(8, 8)


def save(path, state):
    torch.save({'state_dict': state, 'meta': {}}, path)
    return str(path)


def test_empty_checkpoint(tmp_path):
    from mmengine.runner.checkpoint import _load_checkpoint
    path = tmp_path / 'empty.pth'
    path.write_bytes(b'')
    with raises_naming(InputError, str(path), 'empty (0 bytes)',
                       'earlier iter_*.pth'):
        _load_checkpoint(str(path))


@pytest.mark.parametrize('content,looks', [
    (b'iteration 800: mIoU 31.2\n', 'a text file'),
    (b'<!DOCTYPE html><html><body>Not found', 'an HTML page')])
def test_non_checkpoint_file(tmp_path, content, looks):
    """Not "contains pickled Python objects": it is no checkpoint."""
    from mmengine.runner.checkpoint import _load_checkpoint
    path = tmp_path / 'model.pth'
    path.write_bytes(content)
    with raises_naming(InputError, str(path), 'not a PyTorch '
                       'checkpoint', looks, 'download the checkpoint again'):
        _load_checkpoint(str(path))


def test_checkpoint_of_another_num_classes(tmp_path):
    path = save(tmp_path / 'c.pth', Net(classes=19).state_dict())
    model = Net(classes=3)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    with raises_naming(InputError, path, '2 with another shape',
                       'cls.weight: checkpoint (19, 8) vs model (3, 8)',
                       'num_classes', 'allow_partial=True'):
        load_checkpoint(model, path)
    # nothing was loaded, not even the weights that would have fitted
    assert all(torch.equal(v, before[k])
               for k, v in model.state_dict().items())


def test_checkpoint_of_another_architecture(tmp_path):
    path = save(tmp_path / 'c.pth', Net(extra=True).state_dict())
    state = Net().state_dict()
    state.pop('backbone.bias')
    with raises_naming(InputError, '1 missing from the '
                       'checkpoint (backbone.bias)', '2 not in the model '
                       '(neck.weight, neck.bias)'):
        check_state_dict(Net(extra=False), dict(
            state, **{k: v for k, v in Net(extra=True).state_dict().items()
                      if k.startswith('neck')}), path)


def test_partial_load_needs_the_explicit_flag(tmp_path):
    path = save(tmp_path / 'c.pth', Net(classes=19).state_dict())
    model = Net(classes=3)
    load_checkpoint(model, path, allow_partial=True)
    saved = torch.load(path, weights_only=True)['state_dict']
    assert torch.equal(model.backbone.weight, saved['backbone.weight'])


@pytest.mark.parametrize('value', [float('nan'), float('inf')])
def test_nonfinite_weights(tmp_path, value):
    state = Net().state_dict()
    state['cls.weight'][0, 0] = value
    path = save(tmp_path / 'c.pth', state)
    with raises_naming(InputError, path, 'non-finite',
                       'cls.weight (1 of 24)', 'allow_nonfinite=True'):
        load_checkpoint(Net(), path)
    load_checkpoint(Net(), path, allow_nonfinite=True)


@pytest.fixture(scope='module')
def demo_checkpoints(tmp_path_factory):
    """Weights of the demo Segmenter (untrained) as a checkpoint, one with
    19 classes, and one with a NaN weight."""
    from mmseg.registry import MODELS
    out = tmp_path_factory.mktemp('ckpts')
    cfg = Config.fromfile(DEMO_SEGMENTER)
    init_default_scope('mmseg')
    paths = {}
    torch.manual_seed(0)
    for name, classes in (('good', 150), ('classes19', 19)):
        model_cfg = cfg.model.copy()
        model_cfg.decode_head.num_classes = classes
        state = MODELS.build(model_cfg).state_dict()
        paths[name] = save(out / f'{name}.pth', state)
        if name == 'good':
            state['decode_head.mask_norm.weight'][0] = float('nan')
            paths['nan'] = save(out / 'nan.pth', state)
    return paths


def test_init_model_refuses_another_num_classes(demo_checkpoints):
    """The package's init_model (mmseg.apis' logs and goes on)."""
    with raises_naming(InputError, 'classes19.pth',
                       'decode_head', 'allow_partial=True'):
        init_model(DEMO_SEGMENTER, demo_checkpoints['classes19'])
    model = init_model(DEMO_SEGMENTER, demo_checkpoints['good'])
    assert model.decode_head.num_classes == 150


def test_nonfinite_predictions_are_counted():
    from mmengine.structures import PixelData
    from mmseg.structures import SegDataSample
    counter = NonFiniteCounter()
    counter.before_test_epoch(None)
    samples = []
    for i, value in enumerate([0.0, float('nan')]):
        sample = SegDataSample(metainfo=dict(img_path=f'img{i}.jpg'))
        sample.seg_logits = PixelData(data=torch.full((2, 4, 4), value))
        samples.append(sample)
    inputs = [torch.zeros(3, 4, 4), torch.full((3, 4, 4), float('inf'))]
    counter.after_test_iter(None, 0, dict(inputs=inputs), samples)
    text = counter.summary()
    assert '1 of 2 images have non-finite (NaN/Inf) predictions (img1.jpg)' \
        in text and 'non-finite (NaN/Inf) inputs' in text
    assert 'metrics' in text and 'checkpoint' in text


# ------------------------------------------------------ configs and runs

def test_work_dir_under_a_file(tmp_path):
    blocker = tmp_path / 'file'
    blocker.write_text('x')
    with raises_naming(ToolError, str(blocker), 'is a file', '--work-dir'):
        check_writable_folder(str(blocker / 'run'), '--work-dir')


def test_work_dir_unwritable(tmp_path):
    if os.geteuid() == 0:
        target = '/sys/mmseg_whitebox_work_dir'  # read-only even for root
    else:
        locked = tmp_path / 'locked'
        locked.mkdir(mode=0o500)
        target = str(locked / 'run')
    with raises_naming(ToolError, target, 'not writable', '--work-dir'):
        check_writable_folder(target, '--work-dir')


def test_schedule_shortened_below_the_warm_up():
    """The demo schedule cut to 20 iterations by the old recipe."""
    cfg = Config.fromfile(DEMO_SEGMENTER)
    cfg.merge_from_dict({'train_cfg.max_iters': 20,
                         'param_scheduler.1.end': 20})
    with raises_naming(ToolError, 'param_scheduler[1] (PolyLR)', 'begin=50',
                       'end=20', 'param_scheduler.0.end=10 '
                       'param_scheduler.1.begin=10 param_scheduler.1.end=20'):
        check_param_schedulers(cfg)
    # the recipe of the schedule's comment passes
    cfg.merge_from_dict({'param_scheduler.0.end': 5,
                         'param_scheduler.1.begin': 5})
    check_param_schedulers(cfg)


def test_one_class_model():
    cfg = Config.fromfile(DEMO_SEGMENTER)
    assert num_classes_problem(cfg) is None
    cfg.model.decode_head.num_classes = 1
    text = num_classes_problem(cfg)
    for word in ('model.decode_head.num_classes=1', 'zero', 'num_classes=2',
                 'use_sigmoid=True'):
        assert word in text, word


def test_offline_pretrained_download():
    import urllib.error
    cfg = Config.fromfile(osp.join(
        REPO, 'configs', 'segmenter',
        'segmenter_vit-t_mask_8xb1-160k_ade20k-512x512.py'))
    url = cfg.model.pretrained
    assert url.startswith('https://')
    with raises_naming(ToolError, url, 'offline', 'model.pretrained=',
                       '--cfg-options'):
        with reported_errors(cfg):
            raise urllib.error.URLError('[Errno -3] name resolution failed')
    assert url in download_error_message(cfg, OSError('x'))


def test_tta_without_its_settings():
    cfg = Config.fromfile(DEMO_SEGMENTER)
    check_tta(cfg)  # the demo configs have both
    cfg = Config(dict(tta_model=cfg.tta_model))  # a config without one
    with raises_naming(ToolError, '--tta needs tta_pipeline'):
        check_tta(cfg)


def test_missing_data_root_names_the_key_to_set(tmp_path):
    """Inside dataset wrappers the advice names the wrapped dataset's key."""
    inner = [dict(type='ADE20KDataset', data_root=str(tmp_path)),
             dict(type='ADE20KDataset', data_root=str(tmp_path / 'absent'))]
    cfg = Config(dict(train_dataloader=dict(dataset=dict(
        type='RepeatDataset', times=2,
        dataset=dict(type='ConcatDataset', datasets=inner)))))
    with raises_naming(ToolError, 'train_dataloader: dataset folder',
                       str(tmp_path / 'absent'), '--cfg-options train_'
                       'dataloader.dataset.dataset.datasets.1.data_root='):
        check_data_roots(cfg, ['train_dataloader', 'val_dataloader'])
    inner[1]['data_root'] = str(tmp_path)
    check_data_roots(Config(dict(train_dataloader=dict(dataset=inner[1]))),
                     ['train_dataloader'])


def test_tta_with_the_bounded_memory_segmentor():
    cfg = Config.fromfile(DEMO_SEGMENTER)
    cfg.model.type = 'BoundedMemoryEncoderDecoder'
    with raises_naming(ToolError, 'BoundedMemoryEncoderDecoder',
                       'model.type=EncoderDecoder'):
        check_tta(cfg)


def test_rep_grid_larger_than_the_token_grid():
    from mmseg_whitebox.ops.cbsa import CBSA
    op = CBSA(16, num_heads=2, head_dim=4, rep_grid=(4, 4))
    op(torch.randn(1, 20, 16), (4, 5))
    with raises_naming(ValueError, 'rep_grid (4, 4)', '3x5 token grid',
                       'rep_grid=(3, 4)'):
        op(torch.randn(1, 15, 16), (3, 5))


# ----------------------------------------------- the tools, end to end

def assert_tool_error(proc, tool, *words):
    assert proc.returncode == 2, (proc.returncode, proc.stderr[-3000:])
    assert f'{tool}: error: ' in proc.stderr, proc.stderr[-3000:]
    assert 'Traceback' not in proc.stderr, proc.stderr[-3000:]
    for word in words:
        assert word in proc.stderr, (word, proc.stderr[-3000:])


def test_tool_test_refuses_another_num_classes(demo_checkpoints, tiny_ade,
                                               tmp_path):
    proc = run_tool(['tools/test.py', DEMO_SEGMENTER,
                     demo_checkpoints['classes19'], '--work-dir',
                     str(tmp_path), '--cfg-options',
                     f'test_dataloader.dataset.data_root={tiny_ade}',
                     'test_dataloader.num_workers=0',
                     'test_dataloader.persistent_workers=False'],
                    check=False)
    assert_tool_error(proc, 'test.py', 'classes19.pth', 'another shape',
                      'decode_head', '--allow-partial-checkpoint')


def test_tool_test_on_an_empty_checkpoint(tmp_path):
    empty = tmp_path / 'iter_800.pth'
    empty.write_bytes(b'')
    proc = run_tool(['tools/test.py', DEMO_SEGMENTER, str(empty)],
                    check=False)
    assert_tool_error(proc, 'test.py', str(empty), 'empty (0 bytes)')


def test_tool_test_names_a_bad_label(tiny_ade, demo_checkpoints, tmp_path):
    """Through the tool, with a DataLoader worker process: the file is
    named, the worker's traceback is not printed."""
    root = str(tmp_path / 'ADEChallengeData2016')
    shutil.copytree(tiny_ade, root)
    label = osp.join(root, 'annotations', 'validation',
                     'ADE_val_00000001.png')
    arr = np.array(Image.open(label))
    arr[0, 0] = 222
    Image.fromarray(arr).save(label)
    proc = run_tool(['tools/test.py', DEMO_SEGMENTER,
                     demo_checkpoints['good'], '--work-dir',
                     str(tmp_path / 'w'), '--cfg-options',
                     f'test_dataloader.dataset.data_root={root}',
                     'test_dataloader.num_workers=1',
                     'test_dataloader.persistent_workers=False'],
                    check=False)
    assert_tool_error(proc, 'test.py', label, '[221]', 'ignore index')


def test_tool_test_warns_about_nan_predictions(tiny_ade, demo_checkpoints,
                                               tmp_path):
    """Refused without the flag; with it, evaluated and the non-finite
    predictions repeated in the final summary."""
    args = ['tools/test.py', DEMO_SEGMENTER, demo_checkpoints['nan'],
            '--work-dir', str(tmp_path), '--cfg-options',
            f'test_dataloader.dataset.data_root={tiny_ade}',
            'test_dataloader.num_workers=0',
            'test_dataloader.persistent_workers=False']
    assert_tool_error(run_tool(args, check=False), 'test.py', 'nan.pth',
                      'decode_head.mask_norm.weight',
                      '--allow-nonfinite-weights')
    proc = run_tool(args + ['--allow-nonfinite-weights'])
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith('WARNING: 3 of 3 images have non-finite '
                           '(NaN/Inf) predictions'), proc.stderr[-2000:]


def test_tool_train_checks_before_training(tiny_ade, tmp_path):
    blocker = tmp_path / 'file'
    blocker.write_text('x')
    train = ['tools/train.py', DEMO_SEGMENTER, '--work-dir',
             str(blocker / 'run'), '--cfg-options'] + \
        command_line(data_options(tiny_ade))
    proc = run_tool(train + ['train_cfg.max_iters=20',
                             'param_scheduler.1.end=20'], check=False)
    assert_tool_error(proc, 'train.py', 'param_scheduler.0.end=10')
    proc = run_tool(train, check=False)
    assert_tool_error(proc, 'train.py', str(blocker), 'is a file')


def test_tool_noise_sweep_refuses_nan_weights(tiny_ade, demo_checkpoints,
                                              tmp_path):
    proc = run_tool(['tools/noise_robustness.py', DEMO_SEGMENTER,
                     demo_checkpoints['nan'], '--out', str(tmp_path / 'out'),
                     '--sigmas', '0.1', '--draws', '1', '--work-dir',
                     str(tmp_path / 'w'), '--cfg-options',
                     f'test_dataloader.dataset.data_root={tiny_ade}',
                     'test_dataloader.num_workers=0',
                     'test_dataloader.persistent_workers=False'],
                    check=False)
    assert_tool_error(proc, 'noise_robustness.py', 'nan.pth', 'non-finite',
                      '--allow-nonfinite-weights')
