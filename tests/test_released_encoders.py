"""The white-box encoder blocks against the released classification
blocks, on the same weights, in float64.

The released blocks are re-implemented here from reading them (never
imported or copied): CRATE (``Ma-Lab-Berkeley/CRATE`` model/crate.py:
pre-norm MSSA with a biased output projection, then pre-norm ISTA), CBT
(``QishuaiWen/CBSA`` CBSA_image_classification/{models,attn_layers}.py:
pre-norm CBSA, then pre-norm ISTA) and ToST (``RobinWu218/ToST``
tost_vision/tost.py: pre-norm TSSA with a bias on its input projection,
then a GELU MLP, both scaled by layer scales). Released-layout weights go
through the project's converter (``white_box_to_mmseg``) into the layers
of the encoders of ``configs/_base_/models/white_box_encoders.py`` (at
their real widths and heads; two layers, as every layer is the same
block). A 1% change of a released setting makes the comparison fail.
"""
import math
import os.path as osp

import pytest
import torch
import torch.nn.functional as F
from mmengine.config import Config
from mmengine.registry import init_default_scope

from mmseg_whitebox.models.backbones.white_box_conversion import \
    white_box_to_mmseg
from mmseg_whitebox.ops import CBSA

from _helpers import REPO, default_dtype

LAYERS = 2
TOLERANCE = 1e-12  # of the output's scale
PERTURBED = 1e-9  # a changed setting must move the output by more


@pytest.fixture(autouse=True)
def float64():
    with default_dtype(torch.float64):
        yield


# --- released weights, in the released key layouts --------------------
def pre_norm(state, prefix, d):
    state[f'{prefix}.weight'] = 1 + 0.1 * torch.randn(d)
    state[f'{prefix}.bias'] = 0.1 * torch.randn(d)


def linear(state, prefix, d_out, d_in, bias=True):
    state[f'{prefix}.weight'] = torch.randn(d_out, d_in) / math.sqrt(d_in)
    if bias:
        state[f'{prefix}.bias'] = 0.1 * torch.randn(d_out)


def released_state(kind, d, heads, p, layers=LAYERS):
    """Block weights of the released ``kind`` ('crate', 'cbt', 'tost')
    model in its own key layout (CRATE and CBT:
    ``transformer.layers.<i>.{0,1}``; ToST: ``blocks.<i>``)."""
    torch.manual_seed(0)
    state = {}
    for i in range(layers):
        if kind == 'tost':
            b = f'blocks.{i}'
            pre_norm(state, f'{b}.norm1', d)
            linear(state, f'{b}.attn.qkv', d, d)
            state[f'{b}.attn.temp'] = 1 + 0.3 * torch.randn(heads, 1)
            linear(state, f'{b}.attn.to_out.0', d, d)
            pre_norm(state, f'{b}.norm2', d)
            linear(state, f'{b}.mlp.fc1', 4 * d, d)
            linear(state, f'{b}.mlp.fc2', d, 4 * d)
            state[f'{b}.gamma1'] = 1 + 0.3 * torch.randn(d)
            state[f'{b}.gamma2'] = 1 + 0.3 * torch.randn(d)
            continue
        a, f = f'transformer.layers.{i}.0', f'transformer.layers.{i}.1'
        pre_norm(state, f'{a}.norm', d)
        if kind == 'cbt':
            linear(state, f'{a}.fn.proj', heads * p, d, bias=False)
            state[f'{a}.fn.step_x'] = torch.randn(heads, 1, 1)
            state[f'{a}.fn.step_rep'] = torch.randn(heads, 1, 1)
            linear(state, f'{a}.fn.to_out', d, heads * p)
        else:  # CRATE's to_out is Sequential(Linear, Dropout)
            linear(state, f'{a}.fn.qkv', heads * p, d, bias=False)
            linear(state, f'{a}.fn.to_out.0', d, heads * p)
        pre_norm(state, f'{f}.norm', d)
        state[f'{f}.fn.weight'] = torch.randn(d, d) / math.sqrt(d)
    return state


# --- the released blocks, re-implemented -------------------------------
def heads_of(x, heads):
    """(B, N, K*p) -> (B, K, N, p)."""
    b, n, _ = x.shape
    return x.reshape(b, n, heads, -1).transpose(1, 2)


def merged(x):
    """(B, K, N, p) -> (B, N, K*p)."""
    b, k, n, p = x.shape
    return x.transpose(1, 2).reshape(b, n, k * p)


def layer_norm(x, state, prefix, eps):
    return F.layer_norm(x, x.shape[-1:], state[f'{prefix}.weight'],
                        state[f'{prefix}.bias'], eps)


def dense(x, state, prefix):
    return F.linear(x, state[f'{prefix}.weight'], state.get(f'{prefix}.bias'))


def released_ista(x, dictionary, step=0.1, lambd=0.1):
    """One ISTA step, no residual: ReLU(x + step (x D - x D^T D) -
    step * lambda) for tokens as rows."""
    sparse = x @ dictionary - (x @ dictionary.t()) @ dictionary
    return F.relu(x + step * sparse - step * lambd)


def released_mssa(x, state, prefix, heads):
    w = heads_of(dense(x, state, f'{prefix}.qkv'), heads)
    scale = w.shape[-1]**-0.5
    attn = torch.softmax(w @ w.transpose(-1, -2) * scale, dim=-1)
    return dense(merged(attn @ w), state, f'{prefix}.to_out.0')


def released_cbsa(x, state, prefix, heads, pool=8):
    """The released CBSA: 8x8 representatives pooled from the first
    ``side x side`` tokens (``side = floor(sqrt(N))``, the CLS token
    first), extraction, contraction, broadcast."""
    b, n, _ = x.shape
    w = dense(x, state, f'{prefix}.proj')
    c = w.shape[-1]
    side = math.isqrt(n)
    leading = w[:, :side * side].reshape(b, side, side, c).permute(0, 3, 1, 2)
    rep = F.adaptive_avg_pool2d(leading, pool).flatten(2).transpose(1, 2)
    rep, w = heads_of(rep, heads), heads_of(w, heads)
    scale = w.shape[-1]**-0.5
    attn = torch.softmax(rep @ w.transpose(-1, -2) * scale, dim=-1)
    rep = rep + state[f'{prefix}.step_rep'] * (attn @ w)
    contraction = torch.softmax(rep @ rep.transpose(-1, -2) * scale,
                                dim=-1) @ rep
    update = state[f'{prefix}.step_x'] * (attn.transpose(-1, -2) @
                                          contraction)
    return dense(merged(update), state, f'{prefix}.to_out')


def released_tssa(x, state, prefix, heads):
    """The released TSSA: memberships from the token-normalised energies
    (softmax over heads, scaled by ``temp``), per-direction second
    moments, ``-(w * Pi) / (1 + moments)``, the biased projections."""
    w = heads_of(dense(x, state, f'{prefix}.qkv'), heads)
    energy = (F.normalize(w, dim=-2)**2).sum(-1)  # (B, K, N)
    pi = torch.softmax(energy * state[f'{prefix}.temp'], dim=1)
    weights = pi / (pi.sum(-1, keepdim=True) + 1e-8)
    moments = weights.unsqueeze(-2) @ (w**2)  # (B, K, 1, p)
    update = -(w * pi.unsqueeze(-1)) / (1 + moments)
    return dense(merged(update), state, f'{prefix}.to_out.0')


def released_block(kind, x, state, i, heads, eps):
    if kind == 'tost':
        b = f'blocks.{i}'
        x = x + state[f'{b}.gamma1'] * released_tssa(
            layer_norm(x, state, f'{b}.norm1', eps), state, f'{b}.attn',
            heads)
        hidden = F.gelu(dense(layer_norm(x, state, f'{b}.norm2', eps), state,
                              f'{b}.mlp.fc1'))
        return x + state[f'{b}.gamma2'] * dense(hidden, state, f'{b}.mlp.fc2')
    a, f = f'transformer.layers.{i}.0', f'transformer.layers.{i}.1'
    attention = released_cbsa if kind == 'cbt' else released_mssa
    x = x + attention(layer_norm(x, state, f'{a}.norm', eps), state,
                      f'{a}.fn', heads)
    return released_ista(layer_norm(x, state, f'{f}.norm', eps),
                         state[f'{f}.fn.weight'])


# --- the project's encoders on the converted weights --------------------
# kind: (base config name, released layout, heads, head dim, width, eps,
# tokens: a CLS token first and a 14x14 grid (224 / 16), as released)
ENCODERS = {
    'crate': ('crate_t', 'crate', 6, 64, 384, 1e-5, True),
    'cbt': ('cbt_t', 'cbsa', 3, 64, 192, 1e-5, True),
    'tost': ('tost_t', 'tost', 4, 48, 192, 1e-6, False),
}
GRID = (14, 14)


def encoder_layers(kind, **attn_changes):
    """The layers of the project's ``kind`` encoder (its config, two
    layers; CBT with the released 8x8 representatives of its 224 input)
    holding the converted released weights, and those weights."""
    from mmseg.registry import MODELS
    base, layout, heads, p, d, _, _ = ENCODERS[kind]
    init_default_scope('mmseg')
    cfg = Config.fromfile(osp.join(REPO, 'configs', '_base_', 'models',
                                   'white_box_encoders.py'))
    attn_cfg = dict(cfg[base]['attn_cfg'], **attn_changes)
    if kind == 'cbt' and 'rep_grid' not in attn_changes:
        attn_cfg['rep_grid'] = (8, 8)
    backbone = MODELS.build(dict(cfg[base], num_layers=LAYERS,
                                 attn_cfg=attn_cfg, drop_path_rate=0.0,
                                 init_cfg=None)).double().eval()
    state = released_state(kind, d, heads, p)
    converted, _, unmapped = white_box_to_mmseg(state, layout)
    assert unmapped == []
    layers = {k[len('layers.'):]: v for k, v in converted.items()}
    backbone.layers.load_state_dict(layers, strict=True)
    return backbone.layers, state


def tokens(kind):
    _, _, _, _, d, _, with_cls = ENCODERS[kind]
    torch.manual_seed(1)
    return torch.randn(2, int(with_cls) + GRID[0] * GRID[1], d)


def project_output(layers, x, with_cls):
    with torch.no_grad():
        for layer in layers:
            x = layer(x, hw=GRID, grid_start=int(with_cls))
    return x


def released_output(kind, state, x, eps=None):
    heads, eps_released = ENCODERS[kind][2], ENCODERS[kind][5]
    for i in range(LAYERS):
        x = released_block(kind, x, state, i, heads, eps or eps_released)
    return x


def relative_error(a, b):
    return float((a - b).abs().max() / b.abs().max())


@pytest.mark.parametrize('kind', list(ENCODERS))
def test_encoder_blocks_are_the_released_blocks(kind):
    layers, state = encoder_layers(kind)
    x = tokens(kind)
    expected = released_output(kind, state, x)
    ours = project_output(layers, x, ENCODERS[kind][6])
    assert relative_error(ours, expected) < TOLERANCE
    eps = ENCODERS[kind][5]
    assert all(m.eps == eps for m in layers.modules()
               if isinstance(m, torch.nn.LayerNorm))


@pytest.mark.parametrize('kind', list(ENCODERS))
def test_a_one_percent_change_of_the_layernorm_eps_is_seen(kind):
    layers, state = encoder_layers(kind)
    x = tokens(kind)
    ours = project_output(layers, x, ENCODERS[kind][6])
    moved = released_output(kind, state, x, eps=1.01 * ENCODERS[kind][5])
    assert relative_error(ours, moved) > PERTURBED


def perturb_ista_step(layers):
    for layer in layers:
        layer.ffn.step_size *= 1.01


def perturb_ista_lambda(layers):
    for layer in layers:
        layer.ffn.lambd *= 1.01


def perturb_temperature(layers):
    for layer in layers:
        layer.attn.temp.data *= 1.01


def perturb_layer_scale(layers):  # one direction of gamma1, by 1%
    for layer in layers:
        layer.attn.out_proj.weight.data[0] *= 1.01
        layer.attn.out_proj.bias.data[0] *= 1.01


@pytest.mark.parametrize('kind, perturb', [
    ('crate', perturb_ista_step),
    ('cbt', perturb_ista_lambda),
    ('tost', perturb_temperature),
    ('tost', perturb_layer_scale),
])
def test_a_one_percent_change_of_a_released_setting_is_seen(kind, perturb):
    layers, state = encoder_layers(kind)
    perturb(layers)
    x = tokens(kind)
    assert relative_error(project_output(layers, x, ENCODERS[kind][6]),
                          released_output(kind, state, x)) > PERTURBED


def test_the_released_behaviours_are_needed():
    """Without the released settings the configs set (CBT's pooling of
    the leading tokens, ToST's projection bias) the blocks differ; with
    them the operators keep their equations' defaults."""
    x = tokens('cbt')
    layers, state = encoder_layers('cbt', rep_pool='grid')
    assert relative_error(project_output(layers, x, True),
                          released_output('cbt', state, x)) > PERTURBED
    assert CBSA(8, 1, 4, rep_grid=2).rep_pool == 'grid'

    layers, state = encoder_layers('tost')
    for layer in layers:
        layer.attn.proj.bias.data.zero_()
    x = tokens('tost')
    assert relative_error(project_output(layers, x, False),
                          released_output('tost', state, x)) > PERTURBED
    from mmseg_whitebox.ops import TSSA
    assert TSSA(8, 2, 4).proj.bias is None


def tost_checkpoint(d=192, heads=4, layers=LAYERS):
    """A whole tost_cab_* state dict: the blocks above, the convolutional
    stem (patch_embed.proj), and what the project does not reproduce."""
    state = released_state('tost', d, heads, d // heads, layers)
    widths = [3, d // 8, d // 4, d // 2, d]
    for i in range(4):
        conv = f'patch_embed.proj.{2 * i}'
        state[f'{conv}.0.weight'] = torch.randn(widths[i + 1], widths[i],
                                                3, 3)
        for name in ('weight', 'bias', 'running_mean'):
            state[f'{conv}.1.{name}'] = torch.randn(widths[i + 1])
        state[f'{conv}.1.running_var'] = torch.rand(widths[i + 1]) + 0.5
        state[f'{conv}.1.num_batches_tracked'] = torch.tensor(3)
    not_reproduced = {
        'cls_token': (1, 1, d),
        'pos_embeder.token_projection.weight': (d, 64, 1, 1),
        'pos_embeder.token_projection.bias': (d, ),
        'cls_attn_blocks.0.gamma1': (d, ),
        'cls_attn_blocks.0.attn.qkv.weight': (3 * d, d),
        'norm.weight': (d, ), 'norm.bias': (d, ),
        'head.weight': (1000, d), 'head.bias': (1000, )}
    state.update({k: torch.randn(v) for k, v in not_reproduced.items()})
    return state, sorted(not_reproduced)


def test_tost_checkpoint_converts_with_its_stem():
    """ToST's layout is detected; its stem and blocks load strictly into
    tost_t with CBT's stem; exactly the parts not reproduced are dropped
    (and then missing: position embedding, CLS token, final norm)."""
    from mmseg.registry import MODELS
    state, not_reproduced = tost_checkpoint()
    converted, dropped, unmapped = white_box_to_mmseg(state)
    assert unmapped == [] and sorted(dropped) == not_reproduced
    init_default_scope('mmseg')
    cfg = Config.fromfile(osp.join(REPO, 'configs', '_base_', 'models',
                                   'white_box_encoders.py'))
    backbone = MODELS.build(dict(cfg.tost_t, num_layers=LAYERS,
                                 stem_cfg=cfg.cbt_stem, init_cfg=None,
                                 img_size=(224, 224)))
    missing, unexpected = backbone.load_state_dict(converted, strict=False)
    assert unexpected == []
    assert sorted(missing) == ['cls_token', 'ln1.bias', 'ln1.weight',
                               'pos_embed']
    folded = converted['layers.0.attn.out_proj.weight']
    torch.testing.assert_close(
        folded, state['blocks.0.gamma1'][:, None] *
        state['blocks.0.attn.to_out.0.weight'])
