"""``run_demo``: what ``make demo`` (tools/misc/demo.py) does, called from
Python on a small context dataset: every step's output, figures equal to
those the test loop and the sweep saved, and a second call that reuses
the finished runs."""
import json
import os.path as osp

import pytest

from mmseg_whitebox.apis.demo import (DemoOptions, format_demo_results,
                                      removal_verdict, run_demo)
from mmseg_whitebox.apis.demo_models import MMSEG_ATTENTION_HEADS
from mmseg_whitebox.datasets.synthetic_ade20k import SyntheticADE20KSpec
from mmseg_whitebox.utils.tool_error import InputError, ToolError


def small_demo(tmp_path, **kwargs) -> DemoOptions:
    return DemoOptions(
        out=str(tmp_path / 'demo'), data_root=str(tmp_path / 'data'),
        models=['cbsa'], iters=2, sigmas=[0.1], draws=1,
        dataset=SyntheticADE20KSpec(variant='context', num_train=4,
                                    num_val=2, image_size=(64, 64)),
        **kwargs)


@pytest.mark.slow
def test_demo_trains_tests_draws_and_sweeps(tmp_path):
    lines = []
    summary = run_demo(small_demo(tmp_path), log=lines.append)
    out = tmp_path / 'demo'
    with open(out / 'summary.json') as f:
        assert json.load(f) == json.loads(json.dumps(summary))
    cbsa = summary['models']['cbsa']
    assert cbsa['checkpoint'] == str(out / 'cbsa' / 'iter_2.pth')
    assert osp.isfile(cbsa['inference']['overlay'])
    assert osp.isfile(summary['robustness_plot'])
    assert cbsa['decoder_params'] > 0 and cbsa['decoder_gflops_512'] > 0
    assert 0 < summary['chance_miou'] < 100

    # the figures are those the test loop and the sweep wrote
    [metrics] = list((out / 'cbsa' / 'test').glob('*/*.json'))
    with open(metrics) as f:
        assert json.load(f)['mIoU'] == cbsa['mIoU']
    with open(out / 'robustness' / 'cbsa' / 'results.json') as f:
        sweep = json.load(f)
    robustness = cbsa['robustness']
    assert robustness['clean'] == sweep['clean']['mIoU']
    assert list(robustness['curve']) == [0.1]
    assert len(robustness['usage']) == len(sweep['attention_usage'])

    table = format_demo_results(summary)
    assert f'{cbsa["mIoU"]:>8.2f}' in table
    assert removal_verdict('cbsa', robustness, [0.1]) in table
    assert f'overlay (cbsa): {cbsa["inference"]["overlay"]}' in table

    # a second call reuses the finished run and sweep
    again = run_demo(small_demo(tmp_path), log=lines.append)
    assert any(line.startswith('[cbsa] reusing finished run')
               for line in lines)
    assert again['models']['cbsa']['robustness'] == robustness


@pytest.mark.slow
def test_demo_keeps_the_encoder_at_its_initialisation_by_default(tmp_path):
    """The default demo trains with the encoder frozen (its hook), so the
    decoders' attention must gather the context; ``train_encoder`` trains
    it as before, and a run of the other setting is not reused."""
    from mmengine.config import Config
    assert DemoOptions().train_encoder is False
    summary = run_demo(small_demo(tmp_path, sweep=False),
                       log=lambda line: None)
    assert summary['frozen_encoder'] is True
    [dumped] = (tmp_path / 'demo' / 'cbsa').glob('*.py')
    hooks = [h['type'] for h in Config.fromfile(str(dumped)).custom_hooks]
    assert 'FreezeBackboneHook' in hooks
    [log] = (tmp_path / 'demo' / 'cbsa').glob('*/*.log')
    assert 'encoder parameters frozen at their initialisation' in \
        log.read_text()
    with pytest.raises(InputError, match='holds runs with the encoder '
                       'frozen; use another --out'):
        run_demo(small_demo(tmp_path, sweep=False, train_encoder=True),
                 log=lambda line: None)


def demo_config(name):
    from mmengine.config import Config

    from _helpers import REPO
    from mmseg_whitebox.apis.demo_models import DEMO_MODELS
    return Config.fromfile(osp.join(REPO, DEMO_MODELS[name]))


def frozen_demo_model(cfg):
    """The demo model of ``cfg`` built (seed 0) with its encoder frozen,
    and the demo's optimizer wrapper for it."""
    import torch
    from mmengine.optim import build_optim_wrapper
    from mmengine.registry import init_default_scope
    from mmseg.registry import MODELS

    from mmseg_whitebox.engine.hooks import freeze_backbone
    init_default_scope('mmseg')
    torch.manual_seed(0)
    model = MODELS.build(cfg.model)
    model.init_weights()
    assert freeze_backbone(model) > 0
    return model, build_optim_wrapper(model, cfg.optim_wrapper)


@pytest.mark.parametrize('name', ['cbsa', 'cbt'])
def test_freeze_backbone_keeps_every_encoder_weight_through_adamw_steps(name):
    """A 0 learning rate would not do it (PolyLR lifts it towards eta_min):
    with the hook's frozen gradients, AdamW steps under the demo schedule
    leave every encoder weight bitwise as initialised, and move the
    decoder's."""
    import torch
    model, wrapper = frozen_demo_model(demo_config(name))
    for group in wrapper.optimizer.param_groups:
        group['lr'] = 1e-3  # what no schedule gives a frozen encoder
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    for _ in range(2):
        image = torch.randn(2, 3, 64, 64)
        logits = model(image, mode='tensor')
        wrapper.update_params(logits.square().mean())
    for n, p in model.named_parameters():
        if n.startswith('backbone.'):
            assert torch.equal(p, before[n]), n
            assert not p.requires_grad
    assert any(not torch.equal(p, before[n])
               for n, p in model.named_parameters()
               if n.startswith('decode_head.'))


@pytest.mark.parametrize('name', MMSEG_ATTENTION_HEADS)
def test_mmseg_attention_heads_train_and_predict_on_the_demo_encoder(name):
    """mmseg's attention heads among the demo models (configs/
    attention_heads): the config builds, one AdamW step of the demo's
    optimizer with the encoder frozen gives every head parameter a finite
    gradient (DANet: its three losses) and moves the head alone, the
    model predicts one label map per image (DANet: from its first
    logits), and the decoder size the demo reports is the head's (ANN: on
    the encoder's two levels)."""
    import torch

    from _helpers import labelled_batch
    from mmseg_whitebox.apis.demo import _decoder_complexity
    cfg = demo_config(name)
    assert 'auxiliary_head' not in cfg.model
    assert cfg.model.decode_head.norm_cfg.type == 'BN'
    model, wrapper = frozen_demo_model(cfg)
    size = 64
    inputs, samples = labelled_batch(2, size)
    model.train()
    losses = model.loss(inputs, samples)
    assert len([k for k in losses if 'loss' in k]) == (
        3 if name == 'danet' else 1)
    loss, _ = model.parse_losses(losses)
    assert torch.isfinite(loss)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    wrapper.backward(loss)
    head = dict(model.decode_head.named_parameters())
    assert [n for n, p in head.items() if p.grad is None or
            not torch.isfinite(p.grad).all()] == []
    assert all(p.grad is None for p in model.backbone.parameters())
    wrapper.step()
    moved = {n for n, p in model.named_parameters()
             if not torch.equal(p, before[n])}
    # the head's (a key projection's bias may not: softmax over the keys
    # ignores it), never the encoder's
    assert 'decode_head.conv_seg.weight' in moved
    assert not [n for n in moved if not n.startswith('decode_head.')]

    model.eval()
    with torch.no_grad():
        predicted = model.predict(inputs, samples)
    assert [p.pred_sem_seg.data.shape for p in predicted] == [
        (1, size, size)] * 2
    size_512 = _decoder_complexity(model)
    assert size_512['decoder_params'] == sum(p.numel() for p in head.values())
    assert size_512['decoder_gflops_512'] > 0


def test_demo_headline_states_each_attentions_removal_cost():
    sigmas = [0.01, 0.1, 1.0]
    used = dict(clean=60.0, ablated=12.5,
                curve={0.01: 58.0, 0.1: 20.0, 1.0: 3.0})
    assert removal_verdict('segmenter', used, sigmas) == (
        'segmenter: removing its decoder attention costs 47.50 mIoU '
        '(60.00 -> 12.50): it is in use, so its robustness is informative: '
        'sigma_50 0.0546')
    unused = dict(clean=85.0, ablated=84.42, curve={0.01: 85.0})
    assert removal_verdict('cbsa', unused, sigmas) == (
        'note: removing cbsa\'s decoder attention changes mIoU by -0.58: it '
        'is unused, so its robustness is not informative')
    harmful = dict(clean=20.0, ablated=22.64, curve={0.01: 20.0})
    assert removal_verdict('isanet', harmful, sigmas) == (
        'isanet: removing its decoder attention raises mIoU by 2.64 '
        '(20.00 -> 22.64): it is in use but lowers mIoU here, so its noise '
        'curve is not a robustness of something useful: sigma_50 > 1 (not '
        'reached)')


@pytest.mark.parametrize('kwargs, message', [
    (dict(models=['cbsa', 'nope']), '--models: no demo model nope'),
    (dict(sweep_models=['cbt2']), '--sweep-models: no demo model cbt2'),
    (dict(iters=0), '--iters must be >= 1'),
    (dict(draws=0), '--draws must be a whole number >= 1'),
    (dict(sigmas=[-1.0]), '--sigmas must be finite and >= 0'),
])
def test_demo_options_are_checked_before_any_work(tmp_path, kwargs, message):
    with pytest.raises(InputError, match=message):
        DemoOptions(out=str(tmp_path / 'demo'), **kwargs)
    assert not (tmp_path / 'demo').exists()


@pytest.mark.parametrize('option', ['out', 'data_root'])
def test_demo_refuses_an_output_folder_under_a_file(tmp_path, option):
    blocker = tmp_path / 'file'
    blocker.write_text('x')
    options = small_demo(tmp_path)
    setattr(options, option, str(blocker / option))
    flag = '--' + option.replace('_', '-')
    with pytest.raises(ToolError, match=f'{flag} .* is a file'):
        run_demo(options, log=lambda line: None)
    assert not (tmp_path / 'data').exists()  # nothing generated
