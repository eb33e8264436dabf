"""Input-corruption benchmark: the ImageCorruption transform, mPC/rPC, and
tools/analysis_tools/test_corruption_robustness.py (a reduced grid on the
tiny synthetic data; the full grid is documented in docs/robustness.md)."""
import copy
import glob
import json
import os.path as osp

import numpy as np
import pytest
import torch
from _helpers import REPO, StubRunner, run_tool
from mmengine.config import Config
from mmengine.registry import init_default_scope

from mmseg_whitebox.apis.demo_models import DEMO_MODELS
from mmseg_whitebox.robustness.corruptions import (CorruptionOptions,
                                                   ImageCorruption,
                                                   check_severities,
                                                   corrupt_image,
                                                   corruption_names,
                                                   corruption_summary,
                                                   find_corruption_transforms,
                                                   insert_corruption_transform,
                                                   markdown_table,
                                                   resolve_corruptions,
                                                   run_corruption_benchmark)
from mmseg_whitebox.utils.tool_error import InputError, ToolError

TOOL = 'tools/analysis_tools/test_corruption_robustness.py'
CONFIG = DEMO_MODELS['cbsa']


def sample(path='data/images/validation/img_0001.jpg', seed=0):
    rng = np.random.RandomState(seed)
    return dict(img=rng.randint(0, 256, (96, 112, 3), dtype=np.uint8),
                gt_seg_map=rng.randint(0, 150, (96, 112), dtype=np.uint8),
                img_path=path, seg_fields=['gt_seg_map'])


# -- the transform -----------------------------------------------------------
def test_transform_is_registered_deterministic_and_leaves_labels():
    from mmseg.registry import TRANSFORMS
    t = TRANSFORMS.build(dict(type='ImageCorruption',
                              corruption='gaussian_noise', severity=3,
                              seed=7))
    assert isinstance(t, ImageCorruption)
    src = sample()
    a, b = t(copy.deepcopy(src)), t(copy.deepcopy(src))
    assert np.array_equal(a['img'], b['img'])  # same image, same result
    assert a['img'].shape == src['img'].shape and a['img'].dtype == np.uint8
    assert not np.array_equal(a['img'], src['img'])
    assert np.array_equal(a['gt_seg_map'], src['gt_seg_map'])
    # another image (file name) or base seed draws other noise
    other = t(dict(copy.deepcopy(src), img_path='x/img_0002.jpg'))
    assert not np.array_equal(other['img'], a['img'])
    t2 = ImageCorruption('gaussian_noise', 3, seed=8)
    assert not np.array_equal(t2(copy.deepcopy(src))['img'], a['img'])
    # the file name, not the folder, identifies the image
    moved = t(dict(copy.deepcopy(src), img_path='/elsewhere/img_0001.jpg'))
    assert np.array_equal(moved['img'], a['img'])
    # clean: untouched; numpy's global generator is left as it was
    state = np.random.get_state()[1].copy()
    clean = ImageCorruption(None)(copy.deepcopy(src))
    assert np.array_equal(clean['img'], src['img'])
    t(copy.deepcopy(src))
    assert np.array_equal(np.random.get_state()[1], state)


@pytest.mark.parametrize('name', ['impulse_noise', 'glass_blur', 'fog',
                                  'frost', 'contrast', 'saturate'])
def test_library_corruptions_run_deterministically(name):
    """Names whose upstream code needed the adapter (skimage's gaussian and
    random_noise, numpy.float_, the frost images) or colour order."""
    img = sample()['img'][:48, :64]
    a = corrupt_image(img, name, 2, seed=3)
    assert np.array_equal(a, corrupt_image(img, name, 2, seed=3))
    assert a.shape == img.shape and not np.array_equal(a, img)
    f = corrupt_image(img.astype(np.float32), name, 2, seed=3)
    assert f.dtype == np.float32 and np.array_equal(f, a)
    gray = corrupt_image(img[..., 0], name, 2, seed=3)
    assert gray.shape == img.shape[:2]


def test_names_severities_and_their_errors():
    assert len(corruption_names('benchmark')) == 15
    assert len(corruption_names('all')) == 19
    assert resolve_corruptions(['fog', 'noise', 'fog']) == [
        'fog', 'gaussian_noise', 'shot_noise', 'impulse_noise']
    with pytest.raises(InputError,
                       match=r"'gauss'.*valid names: gaussian_noise"):
        resolve_corruptions(['gauss', 'fog'])
    assert check_severities([3, 1, 3]) == [1, 3]
    for bad in ([0], [6], [2.5], [True], []):
        with pytest.raises(InputError, match='1..5'):
            check_severities(bad)
    with pytest.raises(InputError, match='severities'):
        ImageCorruption('fog', severity=9)
    with pytest.raises(InputError, match='unknown corruption'):
        ImageCorruption('rain')
    with pytest.raises(InputError, match='at least 32'):
        corrupt_image(np.zeros((16, 64, 3), np.uint8), 'fog', 1)


def test_missing_library_says_how_to_install(monkeypatch):
    from mmseg_whitebox.robustness import corruptions
    corruptions.load_imagecorruptions.cache_clear()
    monkeypatch.setitem(__import__('sys').modules, 'imagecorruptions', None)
    try:
        with pytest.raises(ToolError, match=r"\.\[corruptions\]"):
            corruptions.load_imagecorruptions()
        # the clean transform needs no library
        src = sample()
        assert ImageCorruption(None)(dict(src))['img'] is src['img']
    finally:
        monkeypatch.undo()
        corruptions.load_imagecorruptions.cache_clear()
    assert corruptions.load_imagecorruptions().corrupt


# -- mPC / rPC ---------------------------------------------------------------
def test_mpc_rpc_known_answers():
    results = {'a': {1: 30.0, 2: 20.0}, 'b': {'1': 40.0, '2': 10.0}}
    s = corruption_summary(40.0, results)
    assert s['mPC'] == pytest.approx(25.0)  # (30 + 20 + 40 + 10) / 4
    assert s['rPC'] == pytest.approx(0.625)  # 25 / 40
    assert s['per_corruption'] == {'a': 25.0, 'b': 25.0}
    assert s['per_severity'] == {1: 35.0, 2: 15.0}
    assert s['complete'] and s['evaluated'] == 4
    # mmdetection's definition: the mean over the whole grid
    grid = {'a': {1: 50.0, 2: 40.0, 3: 30.0}, 'b': {1: 20.0, 2: 20.0,
                                                    3: 20.0}}
    s = corruption_summary(60.0, grid)
    assert s['mPC'] == pytest.approx(30.0)
    assert s['rPC'] == pytest.approx(0.5)
    # only the grid asked for counts; a missing point is reported
    s = corruption_summary(60.0, grid, ['a', 'c'], [1, 3])
    assert s['mPC'] == pytest.approx(40.0)
    assert not s['complete'] and (s['evaluated'], s['expected']) == (2, 4)
    assert s['per_corruption']['c'] is None
    assert corruption_summary(0.0, grid)['rPC'] is None
    text = markdown_table(corruption_summary(40.0, results), results,
                          [1, 2])
    assert '| a | 30.00 | 20.00 | 25.00 |' in text
    assert '| mean (mPC) | 35.00 | 15.00 | 25.00 |' in text
    assert 'mPC: 25.00; rPC: 0.6250 (62.5%)' in text


# -- the pipeline ------------------------------------------------------------
def test_transform_goes_after_loading_in_every_config():
    # the test pipeline comes with the dataset: one config per dataset
    # (the suffix after the last '_', e.g. ade20k-512x512), both families
    configs = {}
    for path in sorted(glob.glob(osp.join(REPO, 'configs', '*', '*.py'))):
        family = osp.basename(osp.dirname(path)) == 'segmenter'
        configs.setdefault((path.rsplit('_', 1)[-1], family), path)
    assert len(configs) >= 8
    for path in configs.values():
        cfg = Config.fromfile(path)
        if not cfg.get('test_dataloader', None):
            continue
        assert insert_corruption_transform(cfg, seed=5) >= 1, path
        pipeline = cfg.test_dataloader.dataset.pipeline
        types = [str(step['type']).rsplit('.', 1)[-1] for step in pipeline]
        i = types.index('LoadImageFromFile')
        assert pipeline[i + 1] == dict(type='ImageCorruption',
                                       corruption=None, seed=5), path
        assert cfg.test_dataloader.persistent_workers is False
        with pytest.raises(InputError, match='already has'):
            insert_corruption_transform(cfg)
    cfg = Config(dict(test_dataloader=dict(dataset=dict(
        pipeline=[dict(type='LoadAnnotations')]))))
    with pytest.raises(InputError, match='no LoadImageFromFile'):
        insert_corruption_transform(cfg)


def test_built_pipeline_is_found_and_switched(tiny_ade):
    from mmseg.registry import DATASETS
    init_default_scope('mmseg')
    cfg = Config.fromfile(osp.join(REPO, CONFIG))
    cfg.test_dataloader.dataset.data_root = tiny_ade
    insert_corruption_transform(cfg, seed=1)
    dataset = DATASETS.build(cfg.test_dataloader.dataset)
    clean = dataset[0]['inputs'].clone()
    (t, ) = find_corruption_transforms(dataset)
    t.set('gaussian_blur', 2)
    blurred = dataset[0]
    assert not torch.equal(blurred['inputs'], clean)
    t.set(None)
    assert torch.equal(dataset[0]['inputs'], clean)


# -- the tool ----------------------------------------------------------------
@pytest.fixture(scope='module')
def checkpoint(tmp_path_factory):
    """A randomly initialised demo model saved as a weights-only mmengine
    checkpoint; its class-0 logit raised so the clean mIoU is not 0."""
    from mmseg.registry import MODELS
    init_default_scope('mmseg')
    torch.manual_seed(0)
    model = MODELS.build(Config.fromfile(osp.join(REPO, CONFIG)).model)
    model.init_weights()
    state = model.state_dict()
    state['decode_head.mask_norm.bias'][0] = 2.0
    path = str(tmp_path_factory.mktemp('corr') / 'random.pth')
    torch.save(dict(meta={}, state_dict=state), path)
    return path


def data_opts(data_root):
    return ['--cfg-options', f'test_dataloader.dataset.data_root={data_root}',
            'test_dataloader.num_workers=0',
            'test_dataloader.persistent_workers=False']


def data_cfg_options(data_root):
    """:func:`data_opts` as the library takes them."""
    return {'test_dataloader.dataset.data_root': data_root,
            'test_dataloader.num_workers': 0,
            'test_dataloader.persistent_workers': False}


def test_tool_reduced_grid_matches_test_tool_and_resumes(tiny_ade,
                                                         checkpoint,
                                                         tmp_path):
    out = tmp_path / 'out'
    cmd = [TOOL, CONFIG, checkpoint, '--corruptions', 'gaussian_noise',
           'contrast', '--severities', '1', '3', '--out', str(out)]
    proc = run_tool(cmd + data_opts(tiny_ade))
    assert '5 evaluation(s) to run' in proc.stdout
    with open(out / 'results.json') as f:
        data = json.load(f)
    values = [data['results'][c][s]['mIoU']
              for c in ('gaussian_noise', 'contrast') for s in ('1', '3')]
    summary = data['summary']
    clean = data['clean']['mIoU']
    assert clean > 0
    assert summary['mPC'] == pytest.approx(np.mean(values))
    assert summary['rPC'] == pytest.approx(summary['mPC'] / clean)
    assert summary['complete']
    assert 'mPC:' in proc.stdout and 'rPC:' in proc.stdout
    # the corruptions change the predictions
    assert any(data['results'][c][s]['aAcc'] != data['clean']['aAcc']
               for c in data['results'] for s in data['results'][c])
    for name in ('results.csv', 'table.md', 'table.csv',
                 'corruption_robustness.png'):
        assert (out / name).is_file(), name
    assert '| mean (mPC) |' in (out / 'table.md').read_text()
    # clean is exactly the number of a Runner built as tools/test.py
    # builds it (same pipeline but for the identity transform, same loop
    # and metric)
    from mmseg_whitebox.engine.runner_config import (build_test_runner,
                                                   runner_config)
    from mmseg_whitebox.robustness import RunnerEvaluation
    runner = build_test_runner(runner_config(
        CONFIG, data_cfg_options(tiny_ade), str(tmp_path / 'test')),
        checkpoint)
    evaluation = RunnerEvaluation(runner)
    assert evaluation()['mIoU'] == clean
    evaluation.close()
    # resume with one more severity: only the new points are evaluated
    # (the library call behind the tool: the subprocess above already
    # covers the entry point)
    lines = []
    run_corruption_benchmark(CONFIG, checkpoint, CorruptionOptions(
        corruptions=['gaussian_noise', 'contrast'],
        severities=['1', '3', '2'], out=str(out), resume=True,
        work_dir=str(tmp_path / 'w'),
        cfg_options=data_cfg_options(tiny_ade)), log=lines.append)
    assert '2 evaluation(s) to run (5 done before)' in lines[0], lines
    with open(out / 'results.json') as f:
        again = json.load(f)
    assert again['clean'] == data['clean']
    for c in data['results']:
        for s in data['results'][c]:
            assert again['results'][c][s] == data['results'][c][s]
        assert set(again['results'][c]) == {'1', '2', '3'}
    assert again['summary']['expected'] == 6 and again['summary']['complete']


def test_tool_bad_input(tiny_ade, checkpoint, tmp_path, monkeypatch):
    proc = run_tool([TOOL, CONFIG, checkpoint, '--corruptions', 'rain'],
                    check=False)
    assert proc.returncode == 2
    assert 'test_corruption_robustness.py: error: --corruptions' in \
        proc.stderr
    assert "'rain'" in proc.stderr and 'gaussian_noise' in proc.stderr
    def run(config=CONFIG, ckpt=checkpoint, **options):
        options = dict(dict(corruptions=['fog'], out=str(tmp_path / 'x')),
                       **options)
        return run_corruption_benchmark(config, ckpt,
                                        CorruptionOptions(**options))

    cases = [
        (dict(severities=['0']), '--severities must be integers in 1..5'),
        (dict(corruptions=['rain']), "--corruptions: unknown .*'rain'"),
        (dict(severities=['high']), 'integers in 1..5'),
        (dict(severities=['2.5']), 'integers in 1..5'),
        (dict(config='missing.py'), "config file 'missing.py' does not"),
        (dict(ckpt='missing.pth'), "checkpoint 'missing.pth' does not"),
    ]
    for kwargs, message in cases:
        with pytest.raises(ToolError, match=message):
            run(**kwargs)
    (tmp_path / 'done').mkdir()
    (tmp_path / 'done' / 'results.json').write_text('{}')
    with pytest.raises(ToolError, match='--resume'):
        run(out=str(tmp_path / 'done'))
    # a folder made with other settings is not mixed in
    (tmp_path / 'other').mkdir()
    (tmp_path / 'other' / 'results.json').write_text(json.dumps(dict(
        setup=dict(config=CONFIG, checkpoint=checkpoint, seed=1),
        clean=None, results={})))
    with pytest.raises(ToolError, match='different settings.*seed'):
        run(out=str(tmp_path / 'other'), resume=True,
            cfg_options=data_cfg_options(tiny_ade))
    # any other error is not the user's: raised as it is (a tool exits 1
    # with its traceback), not turned into a ToolError; here from the
    # evaluation, on a stub Runner
    from mmseg_whitebox.robustness.corruptions import corruption_robustness
    from mmseg_whitebox.robustness.evaluation import RunnerEvaluation
    stub = StubRunner(torch.nn.Linear(1, 1), [ImageCorruption()])
    monkeypatch.setattr(corruption_robustness, 'build_corruption_runner',
                        lambda *args: stub)

    def boom(self):
        raise ValueError('boom')

    monkeypatch.setattr(RunnerEvaluation, '__call__', boom)
    with pytest.raises(ValueError, match='^boom$') as raised:
        run(out=str(tmp_path / 'bug'))
    assert type(raised.value) is ValueError


def test_a_launched_benchmark_without_a_gpu_needs_device_cpu(checkpoint,
                                                             tmp_path,
                                                             monkeypatch):
    """--launcher and --device are the noise sweep's (run_device): a
    launched benchmark where torch sees no GPU stops before any model is
    built, unless --device cpu asks for CPU processes."""
    monkeypatch.setattr('torch.cuda.is_available', lambda: False)
    with pytest.raises(ToolError, match='--launcher pytorch without '
                       '--device: no CUDA device is visible'):
        run_corruption_benchmark(CONFIG, checkpoint, CorruptionOptions(
            corruptions=['fog'], out=str(tmp_path / 'out'),
            launcher='pytorch'))
    assert not (tmp_path / 'out' / 'results.json').exists()
