"""The layer library: blocks built from operator configs. Whatever a
caller does (activation checkpointing, a view of its input kept), no input
is modified and outputs and gradients equal the plain forward."""
import pytest
import torch
from mmengine.registry import init_default_scope
from torch.utils.checkpoint import checkpoint

from mmseg_whitebox.models.layers import (CrossPreNormResidual,
                                          PreNormResidual, build_attention)
from mmseg_whitebox.ops import CBSA, MSSA, TSSA, CrossMSSA

OPERATORS = {
    'cbsa': dict(type='CBSA', num_heads=2, head_dim=6, rep_grid=(2, 3)),
    'cbsa-tied': dict(type='CBSA', num_heads=2, head_dim=6, rep_grid=(2, 2),
                      out_proj='tied'),
    'mssa': dict(type='MSSA', num_heads=2, head_dim=6),
    'tssa': dict(type='TSSA', num_heads=2, head_dim=6),
    'mita': dict(type='MiTA', num_heads=2, head_dim=6, pool_size=(2, 3),
                 kv_topk=4),
}
HEADS = {
    'cbsa': dict(type='CBSAHead', attn_cfg=OPERATORS['cbsa']),
    'cbsa-tied': dict(type='CBSAHead', attn_cfg=OPERATORS['cbsa-tied']),
    'mssa': dict(type='MSSAHead', attn_cfg=OPERATORS['mssa']),
    'mssa-ca': dict(type='MSSAHead', mode='ca', attn_cfg=OPERATORS['mssa'],
                    cross_attn_cfg=dict(head_dim=4)),
    'tssa': dict(type='TSSAHead', attn_cfg=OPERATORS['tssa']),
}
HW = (4, 6)


@pytest.fixture(autouse=True)
def mmseg_scope():
    init_default_scope('mmseg')


def make_block(name, dim=24):
    torch.manual_seed(0)
    return PreNormResidual(dim, OPERATORS[name]).eval()


def make_head(name):
    from mmseg.registry import MODELS
    torch.manual_seed(0)
    head = MODELS.build(dict(HEADS[name], in_channels=24, channels=24,
                             num_classes=5, num_layers=2))
    head.init_weights()
    return head.eval()


def gradients(loss, tensors):
    """d loss / d tensors through .backward() (reentrant checkpointing
    does not support autograd.grad)."""
    for t in tensors:
        t.grad = None
    loss.backward()
    return [t.grad.clone() for t in tensors]


def tokens():
    torch.manual_seed(1)
    return torch.randn(2, HW[0] * HW[1] + 5, 24)


def test_operators_are_registered_and_built_from_config():
    from mmseg.registry import MODELS
    for cls in (CBSA, MSSA, CrossMSSA, TSSA):
        assert MODELS.get(cls.__name__) is cls
    op = build_attention(dict(type='CBSA', rep_grid=4), dim=16,
                         init_std=0.01, unknown_default=1)
    assert isinstance(op, CBSA) and op.dim == 16 and op.rep_grid == (4, 4)
    assert build_attention(op) is op  # a built module is taken as it is
    with pytest.raises(KeyError, match='not registered.*CBSA'):
        build_attention(dict(type='NoSuchAttention'), dim=16)


def test_block_norm_and_drop_path_come_from_config():
    block = PreNormResidual(
        16, dict(type='TSSA', num_heads=2, head_dim=4),
        norm_cfg=dict(type='LN', eps=1e-6), drop_path_rate=0.5)
    assert isinstance(block.norm, torch.nn.LayerNorm)
    assert block.norm.eps == 1e-6
    x = torch.randn(3, 10, 16)
    block.eval()
    torch.testing.assert_close(block(x), x + block.attn(block.norm(x)))
    block.train()  # stochastic depth drops whole samples' updates
    torch.manual_seed(0)
    out = block(x)
    update = block.attn(block.norm(x))
    kept = [(out[i] - x[i]).abs().sum() > 0 for i in range(3)]
    for i in range(3):
        expected = x[i] + 2 * update[i] if kept[i] else x[i]
        torch.testing.assert_close(out[i], expected)


@pytest.mark.parametrize('name', list(OPERATORS))
@pytest.mark.parametrize('use_reentrant', [True, False])
def test_checkpointed_blocks_leave_inputs_and_gradients_alone(
        name, use_reentrant):
    block = make_block(name).train()
    x = tokens().requires_grad_()
    out = block(x, hw=HW)
    grads = gradients(out.square().sum(), [x] + list(block.parameters()))
    x_cp = x.detach().clone().requires_grad_()
    out_cp = checkpoint(lambda t: block(t, hw=HW), x_cp,
                        use_reentrant=use_reentrant)
    grads_cp = gradients(out_cp.square().sum(),
                         [x_cp] + list(block.parameters()))
    torch.testing.assert_close(x_cp.detach(), x.detach())
    torch.testing.assert_close(out_cp, out)
    for g, g_cp in zip(grads, grads_cp):
        torch.testing.assert_close(g_cp, g)


@pytest.mark.parametrize('name', list(HEADS))
@pytest.mark.parametrize('use_reentrant', [True, False])
def test_checkpointed_heads_leave_inputs_and_gradients_alone(
        name, use_reentrant):
    """Under reentrant checkpointing the first pass runs without
    gradients; the features stay as they were and the gradients are those
    of the plain forward."""
    head = make_head(name).train()
    feature = torch.randn(2, 24, *HW, requires_grad=True)
    out = head([feature])
    params = list(head.parameters())
    grads = gradients(out.square().sum(), [feature] + params)
    kept = feature.detach().clone()
    f_cp = feature.detach().clone().requires_grad_()
    out_cp = checkpoint(lambda f: head([f]), f_cp,
                        use_reentrant=use_reentrant)
    grads_cp = gradients(out_cp.square().sum(), [f_cp] + params)
    torch.testing.assert_close(f_cp.detach(), kept)
    torch.testing.assert_close(out_cp, out)
    for g, g_cp in zip(grads, grads_cp):
        torch.testing.assert_close(g_cp, g)


@pytest.mark.parametrize('name', list(OPERATORS))
def test_blocks_keep_views_of_their_input(name):
    block = make_block(name)
    x = tokens()
    view = x[:, 2:7]
    kept = view.clone()
    with torch.no_grad():
        expected = x + block.attn(block.norm(x), hw=HW)
        out = block(x, hw=HW)
    torch.testing.assert_close(view, kept)
    torch.testing.assert_close(out, expected)


def test_cross_block_normalises_keys_not_queries():
    torch.manual_seed(0)
    block = CrossPreNormResidual(24, dict(type='CrossMSSA', num_heads=2,
                                          head_dim=4))
    query, x = torch.randn(2, 5, 24), torch.randn(2, 11, 24)
    torch.testing.assert_close(block(query, x),
                               query + block.attn(query, block.norm(x)))


def _one_image_step(model, grads_of):
    """One image through ``model`` (mmseg's or a white-box ViT, or a
    Segmenter head on (1, 32, 4, 4) features), then backward; the
    gradients of the parameters named in ``grads_of``."""
    torch.manual_seed(1)
    if hasattr(model, 'patch_embed'):
        out = model(torch.randn(1, 3, 32, 32))[0]
    else:
        out = model([torch.randn(1, 32, 4, 4)])
    (out * torch.randn_like(out)).sum().backward()
    params = dict(model.named_parameters())
    return {name: params[name].grad for name in grads_of}


def test_gradients_keep_their_parameters_layout():
    """At one image per process a CLS token or class embeddings expanded
    and concatenated with the tokens got a slice of the tokens' gradient
    (DDP's stride warning, tests/test_ddp_models.py). keep_grad_layout
    gives it the parameter's strides and the same values; WhiteBoxViT and
    the released-init Segmenter head apply it themselves, mmseg's ViT gets
    it from the configs' GradLayoutHook."""
    from mmseg.registry import MODELS

    from mmseg_whitebox.models.layers import keep_grad_layout
    vit = dict(type='VisionTransformer', img_size=32, patch_size=8,
               embed_dims=32, num_layers=1, num_heads=2)
    torch.manual_seed(0)
    plain = MODELS.build(vit)
    state = plain.state_dict()
    before = _one_image_step(plain, ['cls_token'])['cls_token']
    torch.manual_seed(0)
    hooked = MODELS.build(vit)
    hooked.load_state_dict(state)
    assert keep_grad_layout(hooked) == 2  # cls_token and pos_embed
    assert keep_grad_layout(hooked) == 0  # once only
    after = _one_image_step(hooked, ['cls_token'])['cls_token']
    assert after.stride() == hooked.cls_token.stride()
    assert torch.equal(after, before)

    white_box = MODELS.build(dict(
        type='WhiteBoxViT', img_size=32, patch_size=8, embed_dims=32,
        num_layers=1, attn_cfg=dict(type='MSSA', num_heads=2, head_dim=16)))
    head = MODELS.build(dict(
        type='SegmenterMaskTransformerHeadReleasedInit', in_channels=32,
        channels=32, num_classes=3, num_layers=1, num_heads=2,
        embed_dims=32))
    for model, name in ((white_box, 'cls_token'), (head, 'cls_emb')):
        grad = _one_image_step(model, [name])[name]
        assert grad.stride() == getattr(model, name).stride(), name
