"""Shared-encoder sweeps give exactly the one-setting-at-a-time results (all
demo heads, whole and slide inference), never touch the real model (also
after an exception or Ctrl-C mid-sweep), resume per draw, and fall back
with a message when a perturbed parameter lies in the encoder."""
import math
import os.path as osp

import pytest
import torch
from mmengine.config import Config, ConfigDict
from mmseg.evaluation import IoUMetric

from mmseg_whitebox.robustness import (LoopEvaluation, NoiseSweep,
                                       NoiseSweepOptions, ResultStore,
                                       select_parameters)

from _helpers import REPO, demo_configs
from test_robustness import build_model, snapshot

CONFIGS = demo_configs()
SIGMAS = [0.0, 0.05, 0.5]  # 1 + 2 + 2 draws: chunks of 2 split a point


# the tiny demo models run ~10x faster on one intra-op thread on a
# shared 2-core machine, both paths alike (conftest.py)
pytestmark = pytest.mark.usefixtures('one_thread')


@pytest.fixture
def per_class(monkeypatch):
    """The summed per-class areas (intersection, union, prediction,
    label) of every evaluation, in order: equal areas, equal per-class
    IoU."""
    areas = []
    compute = IoUMetric.compute_metrics

    def recording(self, results):
        areas.append(torch.stack([sum(r[i] for r in results)
                                  for i in range(4)]))
        return compute(self, results)

    monkeypatch.setattr(IoUMetric, 'compute_metrics', recording)
    return areas


def evaluation(name, data_root, **test_cfg):
    from mmengine.runner import Runner
    cfg = Config.fromfile(osp.join(REPO, CONFIGS[name]))
    cfg.test_dataloader.dataset.data_root = data_root
    cfg.test_dataloader.num_workers = 0
    cfg.test_dataloader.persistent_workers = False
    model = build_model(name)
    if test_cfg:
        model.test_cfg = ConfigDict(test_cfg)
    loader = Runner.build_dataloader(cfg.test_dataloader)
    return model, LoopEvaluation(model, loader, cfg.test_evaluator)


def sweep(model, evaluate, target='decoder-attention', shared=True,
          store=None, log=None):
    sel = select_parameters(model, target)
    return NoiseSweep(model, evaluate, [sel],
                      NoiseSweepOptions(sigmas=SIGMAS, draws=2,
                                        ablation=False),
                      store=store, log=log or print,
                      shared=evaluate.shared_encoder(2) if shared else None)


def both_paths(model, evaluate, per_class, target='decoder-attention'):
    before = snapshot(model)
    one = sweep(model, evaluate, target, shared=False).run()
    n = len(per_class)
    messages = []
    shared = sweep(model, evaluate, target, log=messages.append).run()
    assert snapshot(model) == before
    assert messages and 'shared-encoder sweep: 5 noise settings in 3' in \
        messages[0]
    return one, shared, per_class[:n], per_class[n:]


@pytest.mark.parametrize('name', list(CONFIGS))
def test_shared_encoder_equals_one_at_a_time(name, tiny_ade, per_class):
    model, evaluate = evaluation(name, tiny_ade)
    one, shared, areas_one, areas_shared = both_paths(model, evaluate,
                                                      per_class)
    assert shared['points'] == one['points']
    for a, b in zip(areas_one, areas_shared):
        assert torch.equal(a, b)
    assert len(areas_one) == len(areas_shared) == 1 + 5
    # the noise did change the predictions: the check is not vacuous
    assert len({float(p['mIoU_mean']) for p in one['points']}) > 1 or \
        len({tuple(a.flatten().tolist()) for a in areas_one}) > 1


def test_slide_inference_equal(tiny_ade, per_class):
    model, evaluate = evaluation('segmenter', tiny_ade, mode='slide',
                                 crop_size=(64, 64), stride=(40, 40))
    windows = []
    handle = model.backbone.register_forward_hook(
        lambda m, args, out: windows.append(args[0].shape[-2:]))
    evaluate()
    per_eval = len(windows)  # encoder calls of one evaluation
    windows.clear()
    per_class.clear()
    one, shared, areas_one, areas_shared = both_paths(model, evaluate,
                                                      per_class, 'decoder')
    handle.remove()
    assert shared['points'] == one['points']
    for a, b in zip(areas_one, areas_shared):
        assert torch.equal(a, b)
    # several windows per image; the sequential sweep ran the encoder in
    # 1 + 5 evaluations, the shared one once per window in each of its
    # 1 + 3 passes (instead of once per setting: 1 + 5)
    assert per_eval > 2 and set(windows) == {(64, 64)}
    assert len(windows) == (1 + 5 + 1 + 3) * per_eval


def test_fallback_when_a_parameter_is_in_the_encoder(tiny_ade):
    model, evaluate = evaluation('cbsa', tiny_ade)
    messages = []
    s = sweep(model, evaluate, r'backbone\.layers\.3\.attn\.|'
              r'decode_head\.layers\.0\.attn\.', log=messages.append)
    before = snapshot(model)
    data = s.run()
    assert snapshot(model) == before
    assert len(messages) == 1
    assert messages[0].startswith('shared-encoder sweep off: perturbed '
                                  'parameters outside the decode head: '
                                  'backbone.layers.3.attn.')
    assert len(data['points']) == 3


class Boom(Exception):
    pass


@pytest.mark.parametrize('failure', [Boom, KeyboardInterrupt])
def test_model_unchanged_after_failure_and_resume_completes(
        failure, tiny_ade, tmp_path):
    model, evaluate = evaluation('cbsa', tiny_ade)
    reference = sweep(model, evaluate, shared=False).run()
    before = snapshot(model)
    loader = evaluate.dataloader
    batches = []

    class Failing:
        """The loader, failing in the second pass's second batch."""
        dataset = loader.dataset

        def __iter__(self):
            for batch in loader:
                batches.append(1)
                if len(batches) == len(loader) + 2:
                    raise failure('injected')
                yield batch

        def __len__(self):
            return len(loader)

    setup = dict(mode='absolute', num_seeds=2, target='decoder-attention')
    store = ResultStore(str(tmp_path), setup)
    s = sweep(model, evaluate, store=store, log=lambda msg: None)
    s.shared.dataloader = Failing()
    with pytest.raises(failure):
        s.run()
    assert snapshot(model) == before
    # clean and the first pass (two draws) are saved, nothing after them
    assert [p['sigma'] for p in store.data['points']] == [0.0]
    assert len(store.partial_draws('decoder-attention', 0.05)) == 1
    resumed = sweep(model, evaluate,
                    store=ResultStore(str(tmp_path), setup, resume=True),
                    log=lambda msg: None).run()
    assert snapshot(model) == before
    assert resumed['points'] == reference['points']


def random_samples(inputs, case):
    """Data samples of ``inputs`` as the test pipeline would pack them:
    labels of the network's size, or larger, or padded and flipped."""
    from mmseg.structures import SegDataSample
    _, _, height, width = inputs.shape
    samples = []
    for _ in range(inputs.shape[0]):
        meta = dict(img_shape=(height, width), pad_shape=(height, width),
                    ori_shape=(height, width))
        if case == 'resized':
            meta['ori_shape'] = (height + 27, width + 45)
        elif case == 'padded-flipped':
            meta.update(padding_size=[0, 7, 0, 5], flip=True,
                        flip_direction='horizontal',
                        ori_shape=(height - 5 + 11, width - 7 - 13))
        samples.append(SegDataSample(metainfo=meta))
    return samples


@pytest.mark.parametrize('mode', ['whole', 'slide'])
@pytest.mark.parametrize('case', ['same-size', 'resized', 'padded-flipped',
                                  'nonfinite', 'bounded', 'autocast'])
def test_head_inference_is_mmsegs_prediction(mode, case):
    """The shared sweep's inference after the encoder gives mmseg's
    prediction bit for bit, and the non-finite count of the logits mmseg
    keeps."""
    import copy

    from mmseg_whitebox.engine.hooks import count_nonfinite
    from mmseg_whitebox.robustness.shared_inference import HeadInference
    from _helpers import created_tensors
    model = build_model('segmenter')
    if case == 'bounded':
        from mmseg_whitebox.models.segmentors import \
            BoundedMemoryEncoderDecoder
        model.__class__ = BoundedMemoryEncoderDecoder
        model.tile_bytes = 4096  # several bands
    model.test_cfg = ConfigDict(mode='whole') if mode == 'whole' else \
        ConfigDict(mode='slide', crop_size=(64, 64), stride=(40, 40))
    head = copy.deepcopy(model.decode_head)
    if case == 'nonfinite':
        with torch.no_grad():
            head.mask_norm.bias[3] = float('inf')  # class 3: inf or NaN
    model.decode_head = head
    gen = torch.Generator().manual_seed(2)
    inputs = torch.randn(2, 3, 96, 130, generator=gen)
    samples = random_samples(inputs, case)
    amp = torch.autocast('cpu', torch.bfloat16, enabled=case == 'autocast')
    with torch.no_grad(), amp:
        expected = model.predict(inputs, copy.deepcopy(samples))
        fast = HeadInference(model)
        windows = fast.windows(inputs)
        features = [model.extract_feat(
            inputs if w is None else inputs[:, :, w[0]:w[1], w[2]:w[3]])
            for w in windows]
        metas = [s.metainfo for s in samples]

        def infer():
            logits = fast.seg_logits(head, inputs, metas, windows, features)
            return fast.predictions(logits, samples)

        infer()  # the map is allocated once, then reused
        got, created = created_tensors(infer)
    assert len(windows) == (6 if mode == 'slide' else 1)
    for want, (pred, bad, total) in zip(expected, got):
        assert torch.equal(pred, want.pred_sem_seg.data)
        assert bad == count_nonfinite(want.seg_logits.data)
        assert total == want.seg_logits.data.numel()
    if case == 'nonfinite':
        assert bad > 0
    full = model.out_channels * 96 * 130
    big = [s for s, dtype in created
           if dtype.is_floating_point and math.prod(s) >= full]
    if mode == 'slide' and case in ('same-size', 'bounded'):
        assert big == []  # no fresh map of the whole image
    elif case == 'resized':
        assert big  # the label's size needs mmseg's resize of the map
