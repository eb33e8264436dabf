"""Shared-encoder sweeps give exactly the one-setting-at-a-time results (all
demo heads, whole and slide inference), never touch the real model (also
after an exception or Ctrl-C mid-sweep), resume per draw, and fall back
with a message when a perturbed parameter lies in the encoder."""
import os.path as osp

import pytest
import torch
from mmengine.config import Config, ConfigDict
from mmseg.evaluation import IoUMetric

from mmseg_whitebox.robustness import (LoopEvaluation, NoiseSweep,
                                       ResultStore, select_parameters)

from _helpers import REPO, demo_configs
from test_robustness import build_model, snapshot

CONFIGS = demo_configs()
SIGMAS = [0.0, 0.05, 0.5]  # 1 + 2 + 2 draws: chunks of 2 split a point


@pytest.fixture(autouse=True, scope='module')
def one_thread():
    """One intra-op thread: on a shared 2-core machine the tiny demo
    models run ~10x faster so (both paths alike)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


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
    return NoiseSweep(model, evaluate, [sel], SIGMAS, num_seeds=2,
                      ablation=False, store=store, log=log or print,
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
