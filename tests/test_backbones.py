"""The white-box backbone: every operator and feed-forward as an mmseg
backbone, any input size, CLS token or none, activation checkpointing,
frozen stages, and the same operator classes as the decode heads."""
import pytest
import torch
from mmengine.registry import init_default_scope

from mmseg_whitebox.models.layers import PreNormResidual, WhiteBoxBlock
from mmseg_whitebox.ops import CBSA, ISTA, MSSA, TSSA
from mmseg_whitebox.robustness.sites import find_attention_sites

SMALL = dict(num_heads=2, head_dim=8)
VARIANTS = {
    'crate': dict(attn_cfg=dict(SMALL, type='MSSA'), ffn_cfg=dict(
        type='ISTA')),
    'tost': dict(attn_cfg=dict(SMALL, type='TSSA'),
                 ffn_cfg=dict(type='MLP', mlp_ratio=2)),
    'cbt': dict(attn_cfg=dict(SMALL, type='CBSA', rep_grid=(2, 3)),
                ffn_cfg=dict(type='ISTA')),
    'crate+cbt': dict(attn_cfg=[dict(SMALL, type='MSSA'),
                                dict(SMALL, type='CBSA', rep_grid=2)],
                      ffn_cfg=dict(type='ISTA')),
}
OPERATORS = {'crate': [MSSA, MSSA], 'tost': [TSSA, TSSA],
             'cbt': [CBSA, CBSA], 'crate+cbt': [MSSA, CBSA]}


def build(name, **kw):
    from mmseg.registry import MODELS
    init_default_scope('mmseg')
    torch.manual_seed(0)
    cfg = dict(type='WhiteBoxViT', img_size=64, patch_size=8, embed_dims=32,
               num_layers=2, **VARIANTS[name])
    cfg.update(kw)
    model = MODELS.build(cfg)
    model.init_weights()
    return model


@pytest.mark.parametrize('name', list(VARIANTS))
@pytest.mark.parametrize('with_cls_token', [True, False])
def test_backbones_run_on_non_square_inputs(name, with_cls_token):
    model = build(name, with_cls_token=with_cls_token, out_indices=(0, 1),
                  final_norm=True)
    outs = model(torch.randn(2, 3, 40, 72))  # a 5x9 token grid
    assert [tuple(o.shape) for o in outs] == [(2, 32, 5, 9)] * 2
    assert all(torch.isfinite(o).all() for o in outs)
    ops = [layer.attn for layer in model.layers]
    assert [type(op) for op in ops] == OPERATORS[name]
    ffn = model.layers[0].ffn
    assert isinstance(ffn, ISTA) == (name != 'tost')


def test_cbsa_pools_the_patch_grid_not_the_cls_token():
    """With a CLS token first, CBSA's representatives come from the patch
    grid alone: changing the CLS token's value does not move them."""
    model = build('cbt').eval()
    layer = model.layers[0]
    seen = []
    handle = layer.attn.register_forward_pre_hook(
        lambda m, args, kwargs: seen.append(kwargs), with_kwargs=True)
    model(torch.randn(1, 3, 40, 72))
    handle.remove()
    assert seen[0]['hw'] == (5, 9) and seen[0]['grid_start'] == 1
    x = torch.randn(1, 1 + 45, 32)
    z = layer.attn.project(x)
    pooled = layer.attn.initial_representatives(z, (5, 9), 1)
    x2 = x.clone()
    x2[:, 0] += 100
    torch.testing.assert_close(
        layer.attn.initial_representatives(layer.attn.project(x2), (5, 9),
                                           1), pooled)


@pytest.mark.parametrize('name', list(VARIANTS))
def test_checkpointing_gives_the_same_gradients(name):
    image = torch.randn(2, 3, 40, 56)
    grads = []
    for with_cp in (False, True):
        model = build(name, with_cp=with_cp, drop_path_rate=0.0).train()
        out = model(image)[0]
        (out * torch.linspace(-1, 1, out.numel()).view_as(out)).sum(
        ).backward()
        grads.append({n: p.grad.clone() for n, p in model.named_parameters()
                      if p.grad is not None})
    assert grads[0].keys() == grads[1].keys()
    for key in grads[0]:
        torch.testing.assert_close(grads[1][key], grads[0][key])


def test_frozen_stages_and_drop_path():
    model = build('cbt', frozen_stages=1, drop_path_rate=0.2).train()
    frozen = [n for n, p in model.named_parameters() if not p.requires_grad]
    assert 'cls_token' in frozen and 'pos_embed' in frozen
    assert any(n.startswith('patch_embed.') for n in frozen)
    assert all(not n.startswith('layers.1.') for n in frozen)
    assert any(n.startswith('layers.0.') for n in frozen)
    assert not model.layers[0].training and model.layers[1].training
    assert model.layers[0].drop_path.__class__.__name__ == 'Identity'
    assert model.layers[1].drop_path.drop_prob == pytest.approx(0.2)
    with pytest.raises(ValueError, match='exceeds'):
        build('cbt', frozen_stages=3)


def test_layer_configs_are_checked():
    with pytest.raises(ValueError, match='1 configs for 2 layers'):
        build('cbt', attn_cfg=[dict(SMALL, type='CBSA')])
    with pytest.raises(ValueError, match='outside'):
        build('cbt', out_indices=(2, ))
    with pytest.raises(KeyError, match="'ISTA' or 'MLP'"):
        build('cbt', ffn_cfg=dict(type='Conv'))


def test_encoder_attention_sites_are_the_blocks():
    model = build('crate+cbt')
    sites = find_attention_sites(torch.nn.ModuleDict(dict(backbone=model)),
                                 scope='backbone')
    assert [s.name for s in sites] == ['backbone.layers.0.attn',
                                       'backbone.layers.1.attn']
    assert all(isinstance(s.block, (PreNormResidual, WhiteBoxBlock))
               for s in sites)


def test_operators_keep_their_own_initialisation():
    """mmseg's ViT init would give every Linear std 0.02; MSSA's bases
    start N(0, 1/d) as published."""
    model = build('crate')
    std = model.layers[0].attn.proj.weight.std().item()
    assert std == pytest.approx(32**-0.5, rel=0.2)
