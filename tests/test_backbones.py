"""The white-box backbone: every operator and feed-forward as an mmseg
backbone, any input size, CLS token or none, activation checkpointing,
frozen stages, and the same operator classes as the decode heads."""
import os.path as osp
import re

import pytest
import torch
from mmengine.registry import init_default_scope

from mmseg_whitebox.models.attention_sites import find_attention_sites
from mmseg_whitebox.models.layers import PreNormResidual, WhiteBoxBlock
from mmseg_whitebox.ops import CBSA, ISTA, MHSA, MSSA, QKVCBSA, TSSA

from _helpers import REPO, demo_configs, run_tool, small_run_options

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
    'vit': dict(attn_cfg=dict(SMALL, type='MHSA'),
                ffn_cfg=dict(type='MLP', mlp_ratio=2)),
    'cbsa-vit': dict(attn_cfg=dict(SMALL, type='QKVCBSA', rep_grid=(2, 3)),
                     ffn_cfg=dict(type='MLP', mlp_ratio=2)),
    'cbt-conv-stem': dict(attn_cfg=dict(SMALL, type='CBSA', rep_grid=2),
                          ffn_cfg=dict(type='ISTA'),
                          stem_cfg=dict(type='ConvPatchStem')),
    'crate-stem': dict(attn_cfg=dict(SMALL, type='MSSA'),
                       ffn_cfg=dict(type='ISTA'),
                       stem_cfg=dict(type='NormedPatchEmbed')),
}
OPERATORS = {'crate': [MSSA, MSSA], 'tost': [TSSA, TSSA],
             'cbt': [CBSA, CBSA], 'crate+cbt': [MSSA, CBSA],
             'vit': [MHSA, MHSA], 'cbsa-vit': [QKVCBSA, QKVCBSA],
             'cbt-conv-stem': [CBSA, CBSA], 'crate-stem': [MSSA, MSSA]}
MLP_VARIANTS = ('tost', 'vit', 'cbsa-vit')


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
    assert isinstance(ffn, ISTA) == (name not in MLP_VARIANTS)


@pytest.mark.parametrize('stem', ['ConvPatchStem', 'NormedPatchEmbed'])
def test_published_stems_take_any_image_size(stem):
    """Sides that are not multiples of the patch size are padded at the
    bottom and right, as mmseg's PatchEmbed does: the same token grid."""
    from mmseg.registry import MODELS
    init_default_scope('mmseg')
    embed = MODELS.build(dict(type=stem, embed_dims=32, patch_size=8))
    for h, w in [(40, 72), (37, 70)]:
        tokens, hw = embed(torch.randn(2, 3, h, w))
        assert hw == (-(-h // 8), -(-w // 8))
        assert tokens.shape == (2, hw[0] * hw[1], 32)


def test_conv_stem_is_the_published_shape():
    """Patch 16: four 3x3 stride-2 convolutions widening d/8 .. d, each
    with BatchNorm, GELU between them (three for patch 8)."""
    from mmseg_whitebox.models.layers import ConvPatchStem
    stem = ConvPatchStem(embed_dims=192, patch_size=16)
    convs = [layer.conv for layer in stem.layers]
    assert [c.out_channels for c in convs] == [24, 48, 96, 192]
    assert all(c.stride == (2, 2) and c.bias is None for c in convs)
    assert [layer.with_activation for layer in stem.layers] == [
        True, True, True, False]
    assert len(ConvPatchStem(embed_dims=192, patch_size=8).layers) == 3
    with pytest.raises(ValueError, match='patch sizes'):
        ConvPatchStem(patch_size=14)


def test_missing_pretrained_weights_name_the_converter(tmp_path):
    from mmseg.registry import MODELS
    init_default_scope('mmseg')
    cfg = dict(type='WhiteBoxViT', img_size=64, patch_size=8, embed_dims=32,
               num_layers=2, **VARIANTS['cbsa-vit'],
               init_cfg=dict(type='Pretrained',
                             checkpoint=str(tmp_path / 'vit.pth')))
    model = MODELS.build(cfg)
    with pytest.raises(FileNotFoundError, match='timm2mmseg.py --to '
                       'white-box') as err:
        model.init_weights()
    assert str(tmp_path / 'vit.pth') in str(err.value)


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


def pretrained(name, path, **init):
    return build(name, init_cfg=dict(type='Pretrained', checkpoint=str(path),
                                      **init))


def test_pretrained_weights_load_strictly(tmp_path):
    """mmseg's ViT loads pretrained weights with strict=False and only
    prints what did not fit; here a checkpoint of another architecture is
    an error naming the keys and the converters, unless asked for."""
    from mmseg_whitebox.utils.tool_error import InputError
    source = build('cbt')
    with torch.no_grad():
        for param in source.parameters():
            param.add_(1)
    torch.save({'state_dict': source.state_dict()}, tmp_path / 'cbt.pth')
    loaded = pretrained('cbt', tmp_path / 'cbt.pth')
    for key, value in source.state_dict().items():
        assert torch.equal(loaded.state_dict()[key], value), key

    other = build('tost')
    with torch.no_grad():
        other.pos_embed.add_(1)
    torch.save(other.state_dict(), tmp_path / 'tost.pth')
    with pytest.raises(InputError) as err:
        pretrained('cbt', tmp_path / 'tost.pth')
    for text in ('tost.pth', 'layers.0.attn.eta', 'layers.0.ffn',
                 'whitebox2mmseg.py', 'init_cfg.allow_partial=True'):
        assert text in str(err.value)
    partial = pretrained('cbt', tmp_path / 'tost.pth', allow_partial=True)
    assert torch.equal(partial.pos_embed, other.pos_embed)


def test_cbsa_adapted_vit_takes_a_vit_checkpoint(tmp_path):
    """Only the step sizes QKVCBSA adds may be absent from a converted ViT
    checkpoint; they keep their initial value."""
    vit = build('vit')
    with torch.no_grad():
        for param in vit.parameters():
            param.add_(1)
    torch.save(vit.state_dict(), tmp_path / 'vit.pth')
    adapted = pretrained('cbsa-vit', tmp_path / 'vit.pth')
    assert torch.equal(adapted.layers[1].attn.qkv.weight,
                       vit.layers[1].attn.qkv.weight)
    assert torch.equal(adapted.layers[1].attn.kappa,
                       torch.ones_like(adapted.layers[1].attn.kappa))
    state = vit.state_dict()
    state.pop('layers.1.attn.qkv.weight')
    torch.save(state, tmp_path / 'partial.pth')
    with pytest.raises(ValueError, match=r'1 missing .*layers\.1\.attn\.qkv'):
        pretrained('cbsa-vit', tmp_path / 'partial.pth')


def test_pretrained_position_embedding_is_resized(tmp_path):
    """A checkpoint's square position grid is resized to img_size's."""
    source = build('cbt', img_size=32)  # 4x4 grid
    torch.save(source.state_dict(), tmp_path / 'small.pth')
    model = pretrained('cbt', tmp_path / 'small.pth')  # 8x8 grid
    expected = model.resize_pos_embed(source.pos_embed, (8, 8), (4, 4),
                                      model.interpolate_mode)
    torch.testing.assert_close(model.pos_embed.data, expected)


def test_position_embedding_follows_the_grid_shape():
    """Resized whenever the token grid differs from the trained one, also
    at the trained number of tokens (mmseg's ViT compares counts only)."""
    model = build('cbt').eval()  # img_size 64, patch 8: an 8x8 grid
    for hw in ((4, 16), (8, 8), (5, 7)):
        tokens = torch.randn(1, 1 + hw[0] * hw[1], 32)
        expected = tokens + (model.pos_embed if hw == (8, 8) else
                             model.resize_pos_embed(
                                 model.pos_embed, hw, (8, 8),
                                 model.interpolate_mode))
        torch.testing.assert_close(
            model._pos_embeding(tokens, hw, model.pos_embed), expected)
    assert model(torch.randn(1, 3, 32, 128))[0].shape == (1, 32, 4, 16)


@pytest.mark.parametrize('name', list(VARIANTS))
def test_checkpointing_gives_the_same_gradients(name, monkeypatch):
    from mmseg_whitebox.models.backbones import white_box_vit
    checkpointed = []

    def counting(function, *args, **kwargs):
        checkpointed.append(function)
        return torch.utils.checkpoint.checkpoint(function, *args, **kwargs)

    monkeypatch.setattr(white_box_vit, 'checkpoint', counting)
    image = torch.randn(2, 3, 40, 56)
    grads = []
    for with_cp in (False, True):
        model = build(name, with_cp=with_cp, drop_path_rate=0.0).train()
        out = model(image)[0]
        (out * torch.linspace(-1, 1, out.numel()).view_as(out)).sum(
        ).backward()
        grads.append({n: p.grad.clone() for n, p in model.named_parameters()
                      if p.grad is not None})
    assert checkpointed == list(model.layers)  # only with with_cp
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


# the encoders without a demo config of their own: the CBT demo model's
# encoder with their layers (4 layers, 3 subspaces of 32, as the demo's)
DEMO_LAYERS = {
    'crate+cbt': "[dict(type='MSSA', num_heads=3, head_dim=32)] * 2 + "
                 "[dict(type='CBSA', num_heads=3, head_dim=32, "
                 "rep_grid=(4, 4))] * 2",
    'cbsa-vit': "dict(type='QKVCBSA', num_heads=3, head_dim=32, "
                "rep_grid=(4, 4))",
}
DEMO_FFN = {'crate+cbt': "dict(type='ISTA')",
            'cbsa-vit': "dict(type='MLP', mlp_ratio=4)"}


def demo_config(name: str, tmp_path) -> str:
    if name not in DEMO_LAYERS:
        return demo_configs()[name]
    path = tmp_path / f'{name}_demo.py'
    path.write_text(
        f"_base_ = {osp.join(REPO, demo_configs()['cbt'])!r}\n"
        f"model = dict(backbone=dict(attn_cfg={DEMO_LAYERS[name]}, "
        f"ffn_cfg={DEMO_FFN[name]}))\n")
    return str(path)


@pytest.mark.parametrize('name', ['crate', 'tost', 'crate+cbt', 'cbsa-vit'])
@pytest.mark.slow
def test_white_box_encoders_train_through_the_tools(name, tiny_ade,
                                                    tmp_path):
    """White-box encoders under the CBSA head (the CRATE and ToST demo
    models, the CBT demo model with CRATE+CBT or CBSA-ViT layers) train
    from scratch through tools/train.py: the loss falls (the CBT demo
    model is trained to a rising mIoU in tests/test_heads.py)."""
    iters = 30
    opts = small_run_options(tiny_ade, iters=iters, batch_size=4) + [
        'train_dataloader.dataset.data_prefix.img_path=images/training']
    proc = run_tool(['tools/train.py', demo_config(name, tmp_path),
                     '--work-dir', str(tmp_path / 'work'),
                     '--cfg-options'] + opts)
    log = proc.stdout + proc.stderr
    # the run's config dump: these layers were trained
    assert all(op.__name__ in log for op in OPERATORS[name])
    losses = [float(v) for v in re.findall(
        r'Iter\(train\).*? loss: ([\d.]+)', log)]
    assert len(losses) == iters, losses
    first, last = sum(losses[:5]) / 5, sum(losses[-5:]) / 5
    assert last < 0.8 * first, losses
