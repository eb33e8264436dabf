"""``torch.compile`` of every published model: each demo-sized model
traces its forward and its loss whole (no graph break), with gradients on
and under ``torch.no_grad()`` (the noise sweep, inference), with the
dynamo options a compiled run sets (``CompileHook``: mmseg's accuracy
beside the loss).

``torch._dynamo.explain`` traces without generating code, so these stay
cheap); then one demo model trained and tested with ``compile=True``
(inductor) against eager."""
import os
import os.path as osp
import re
import shutil

import numpy as np
import pytest
import torch
from PIL import Image
from mmengine.config import Config
from mmengine.registry import init_default_scope
from mmengine.structures import PixelData
from mmseg.structures import SegDataSample

from _helpers import REPO, demo_configs, run_tool, small_run_options
from mmseg_whitebox.engine.hooks.compile_hook import DYNAMO_OPTIONS

pytestmark = pytest.mark.skipif(
    not hasattr(torch, '_dynamo'), reason='torch without dynamo')

# the encoders without a demo config of their own, as tests/test_backbones
# builds them: the CBT demo model with their layers
ENCODER_LAYERS = {
    'crate+cbt': dict(
        attn_cfg=[dict(type='MSSA', num_heads=3, head_dim=32),
                  dict(type='CBSA', num_heads=3, head_dim=32,
                       rep_grid=(4, 4))],
        ffn_cfg=dict(type='ISTA'), num_layers=2),
    'cbsa-vit': dict(attn_cfg=dict(type='QKVCBSA', num_heads=3, head_dim=32,
                                   rep_grid=(4, 4)),
                     ffn_cfg=dict(type='MLP', mlp_ratio=4)),
    # the MiTA demo encoder's layer (configs/mita); a list, so that the CBT
    # layer's settings are replaced rather than merged
    'mita': dict(attn_cfg=[dict(type='MiTA', num_heads=3, pool_size=4)],
                 ffn_cfg=dict(type='MLP', mlp_ratio=4)),
}
MODELS_TRACED = list(demo_configs()) + list(ENCODER_LAYERS)
SIZE = 64
#: the one place a training step's graph breaks: mmseg's code
MMSEG_ACCURACY = osp.join('mmseg', 'models', 'losses', 'accuracy.py')
#: torch 2.1's dynamo cannot trace ``inspect.getfullargspec``, which
#: mmengine's ``deprecated_api_warning`` calls around mmcv's
#: ``MultiheadAttention`` (mmseg's ViT encoder), and its inductor cannot
#: compile the loss's captured pixel count (``DYNAMO_OPTIONS`` is empty
#: there: the count's ``.item()`` in mmseg's cross-entropy breaks); later
#: torch traces both
TORCH_BREAKS = () if DYNAMO_OPTIONS else (
    'getfullargspec', osp.join('losses', 'cross_entropy_loss.py'))


def build_segmentor(name: str) -> torch.nn.Module:
    from mmseg.registry import MODELS
    init_default_scope('mmseg')
    configs = demo_configs()
    cfg = Config.fromfile(osp.join(REPO, configs.get(name, configs['cbt'])))
    # one layer of each kind: the layers of a model are alike, and the
    # trace's time grows with their number
    for part in (cfg.model.backbone, cfg.model.decode_head):
        if 'num_layers' in part:
            part.num_layers = 1
    if name in ENCODER_LAYERS:
        cfg.model.backbone.update(ENCODER_LAYERS[name])
    # the published configs' loss (the demo's divides by every pixel)
    cfg.model.decode_head.loss_decode.avg_non_ignore = True
    torch.manual_seed(0)
    model = MODELS.build(cfg.model)
    model.init_weights()
    return model


def batch(num: int = 2):
    gen = torch.Generator().manual_seed(0)
    inputs = torch.randn(num, 3, SIZE, SIZE, generator=gen)
    samples = []
    for _ in range(num):
        sample = SegDataSample(metainfo=dict(
            img_shape=(SIZE, SIZE), pad_shape=(SIZE, SIZE),
            ori_shape=(SIZE, SIZE)))
        sample.gt_sem_seg = PixelData(data=torch.randint(
            0, 150, (1, SIZE, SIZE), generator=gen))
        samples.append(sample)
    return inputs, samples


def graph_breaks(fn, *args, **kwargs):
    """Dynamo's graph breaks while tracing ``fn(*args, **kwargs)``: their
    count and reasons."""
    torch._dynamo.reset()
    explained = torch._dynamo.explain(fn)(*args, **kwargs)
    reasons = []
    for reason in explained.break_reasons:
        where = reason.user_stack[-1] if reason.user_stack else None
        at = f'{osp.relpath(where.filename, REPO)}:{where.lineno}' if where \
            else '?'
        reasons.append(f'{at}: {reason.reason.splitlines()[0]}')
    return explained.graph_break_count, reasons


@pytest.mark.parametrize('name', MODELS_TRACED)
def test_forward_and_loss_trace_whole(name):
    """Under ``no_grad`` the forward (inference, the noise sweep); with
    gradients the loss, whose trace holds the forward too."""
    model = build_segmentor(name)
    inputs, samples = batch()
    with torch.no_grad():
        _, reasons = graph_breaks(model.eval(), inputs, mode='tensor')
    assert not_torchs(reasons) == []
    with torch._dynamo.config.patch(**DYNAMO_OPTIONS):  # as compiled
        _, reasons = graph_breaks(model.train(), inputs, samples,
                                  mode='loss')
    assert not_torchs(reasons) and all(
        MMSEG_ACCURACY in r for r in not_torchs(reasons)), reasons


def packed_labels(flipped: bool) -> torch.Tensor:
    """A label map as mmseg's ``PackSegInputs`` packs it, after mmcv's
    horizontal flip (a view) or not."""
    from mmseg.datasets.transforms import PackSegInputs
    labels = np.random.default_rng(0).integers(0, 150, (SIZE, SIZE),
                                               dtype=np.uint8)
    if flipped:
        labels = np.flip(labels, axis=1)
    packed = PackSegInputs(meta_keys=())(dict(
        img=np.zeros((SIZE, SIZE, 3), np.uint8), gt_seg_map=labels))
    return packed['data_samples'].gt_sem_seg.data


def test_flipped_label_maps_do_not_compile_the_loss_again():
    """mmseg packs a flipped label map with another stride along its first
    (size-1) dimension; a compiled run's loss takes every pattern of flips
    in a batch with the graphs of the first (dynamo's own count; the
    'eager' backend: no code generated)."""
    from torch._dynamo.utils import counters

    from mmseg_whitebox.engine.hooks.compile_hook import compile_segmentor
    assert packed_labels(True).stride() != packed_labels(False).stride()
    model = build_segmentor('cbsa').train()
    compile_segmentor(model, dict(backend='eager'))
    inputs, samples = batch()
    torch._dynamo.reset()
    counters.clear()
    graphs = []
    for flips in ((False, False), (True, False), (False, True), (True, True)):
        for sample, flipped in zip(samples, flips):
            sample.gt_sem_seg.data = packed_labels(flipped)
        model.loss(inputs, samples)
        graphs.append(counters['stats']['unique_graphs'])
    assert graphs[0] >= 1 and graphs == graphs[:1] * 4, graphs


def not_torchs(reasons):
    """The graph breaks that are not the installed torch's limits."""
    return [r for r in reasons if not any(t in r for t in TORCH_BREAKS)]


def train_losses(log: str) -> list:
    return [float(v) for v in re.findall(
        r'Iter\(train\) \[\s*\d+/\d+\].*?\bloss: ([\d.]+)', log)]


def label_maps(folder) -> dict:
    return {p.name: np.asarray(Image.open(p))
            for p in sorted(folder.glob('**/*.png'))}


@pytest.mark.skipif(shutil.which(os.environ.get('CXX', 'g++')) is None,
                    reason='inductor needs a C++ compiler (g++) on the CPU')
@pytest.mark.slow
def test_compile_true_trains_and_tests_as_eager(tiny_ade, tmp_path):
    """``--cfg-options compile=True``: mmengine compiles the training step
    (inductor), the CompileHook the inference; 3 iterations from the same
    seed give the eager losses within 1e-3 relative (float32 sums in
    another order), also where ``CI`` is set, and the compiled test of
    the eager checkpoint the same label maps."""
    config = demo_configs()['cbsa']
    # one encoder and one decoder layer: the same code, a quarter of the
    # graph to compile (inductor's C++ compilation is the test's time);
    # no validation during training, one test image (each new image size
    # is compiled anew)
    # the published configs' loss, whose count of non-ignored pixels
    # dynamo captures as a scalar
    opts = small_run_options(tiny_ade, iters=3) + [
        'model.backbone.num_layers=1', 'model.decode_head.num_layers=1',
        'model.decode_head.loss_decode.avg_non_ignore=True',
        'train_cfg.val_begin=4', 'test_dataloader.dataset.indices=1']
    runs = {}
    # compiled with CI set, as CI services set it: torch 2.1's inductor
    # then refuses a fallback for an op that has a decomposition
    for name, extra, env in (('eager', [], None),
                             ('compiled', ['compile=True'], {'CI': 'true'})):
        proc = run_tool(['tools/train.py', config, '--work-dir',
                         str(tmp_path / name), '--cfg-options']
                        + opts + extra, env=env)
        runs[name] = train_losses(proc.stdout + proc.stderr)
    assert len(runs['eager']) == 3, runs
    assert runs['compiled'] == pytest.approx(runs['eager'], rel=1e-3)
    if not hasattr(torch, 'get_autocast_dtype'):
        pytest.skip('torch < 2.4 (the legacy stack\'s 2.1): its inductor '
                    'fails compiling the inference (AssertionError: '
                    'expected size 3==3, stride 32==800); training passed')
    checkpoint = str(tmp_path / 'eager' / 'iter_3.pth')
    for name, extra in (('eager', []), ('compiled', ['compile=True'])):
        run_tool(['tools/test.py', config, checkpoint, '--out',
                  str(tmp_path / f'pred_{name}'), '--work-dir',
                  str(tmp_path / f'test_{name}'), '--cfg-options']
                 + opts + extra)
    eager, compiled = (label_maps(tmp_path / f'pred_{n}')
                       for n in ('eager', 'compiled'))
    assert eager and list(eager) == list(compiled)
    for key in eager:
        assert (eager[key] == compiled[key]).all(), key


def test_noise_sweep_of_a_compiled_model_compiles_once(tiny_ade,
                                                        tiny_checkpoint,
                                                        tmp_path):
    """A perturbation changes weights in place, not shapes: however many
    noise settings and draws, the compiled inference is compiled as often
    as for one evaluation (dynamo's own count of the graphs it made;
    the 'eager' backend: no code generated)."""
    from torch._dynamo.utils import counters

    from mmseg_whitebox.apis.demo_models import data_options
    from mmseg_whitebox.robustness import NoiseSweepOptions, run_noise_sweep
    config = demo_configs()['cbsa']
    checkpoint = tiny_checkpoint(config)
    cfg_options = dict(data_options(tiny_ade), compile=dict(backend='eager'))
    cfg_options.update({'test_dataloader.num_workers': 0,
                        'test_dataloader.persistent_workers': False,
                        'test_dataloader.dataset.indices': 1})
    graphs = {}
    for name, sigmas, draws in (('one', [0.1], 1), ('many', [0.01, 0.1], 3)):
        torch._dynamo.reset()
        counters.clear()
        results = run_noise_sweep(config, checkpoint, NoiseSweepOptions(
            sigmas=sigmas, draws=draws, shared_encoder=False,
            ablation=False, progress=False, out=str(tmp_path / name),
            work_dir=str(tmp_path / f'w_{name}'), cfg_options=cfg_options),
            log=lambda msg: None)
        assert [len(p['draws']) for p in results['points']] == \
            [draws] * len(sigmas)
        graphs[name] = counters['stats']['unique_graphs']
    assert graphs['one'] >= 1 and graphs['many'] == graphs['one'], graphs
