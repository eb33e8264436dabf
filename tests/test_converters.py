"""Weight conversion: timm ViTs (random weights, no hub) into this
project's configs reproduce timm's patch-token features; a ViT made linear
with CBSA takes every pretrained weight; the published white-box
classification checkpoints (state dicts built here from the published
modules' key names and shapes) load with strict=True."""
import os.path as osp

import numpy as np
import pytest
import torch
from mmengine.config import Config
from mmengine.registry import init_default_scope

from mmseg_whitebox.converters.vit import (augreg_to_timm, timm_vit_to_mmseg,
                                           vit_to_white_box)
from mmseg_whitebox.converters.white_box import white_box_to_mmseg

from _helpers import REPO, run_tool

# timm model -> (this project's Segmenter config, test image size)
SIZES = {
    'vit_tiny_patch16_384': ('segmenter_vit-t_mask_8xb1-160k_ade20k-512x512',
                             384),
    'vit_small_patch16_384': (
        'segmenter_vit-s_mask_8xb1-160k_ade20k-512x512', 384),
    'vit_base_patch16_384': ('segmenter_vit-b_mask_8xb1-160k_ade20k-512x512',
                             64),
    'vit_large_patch16_384': (
        'segmenter_vit-l_mask_8xb1-160k_ade20k-640x640', 64),
}


def timm_vit(name, img_size):
    import timm
    torch.manual_seed(0)
    return timm.create_model(name, pretrained=False, img_size=img_size,
                             num_classes=10).eval()


def project_backbone(config, img_size):
    from mmseg.registry import MODELS
    init_default_scope('mmseg')
    cfg = Config.fromfile(osp.join(REPO, 'configs', 'segmenter',
                                   config + '.py'))
    # timm's ViT LayerNorm eps (the released Segmenter, and so the
    # configs, use PyTorch's 1e-5)
    backbone = dict(cfg.model.backbone, img_size=(img_size, img_size),
                    patch_bias=True, drop_path_rate=0.0,
                    norm_cfg=dict(type='LN', eps=1e-6))
    model = MODELS.build(backbone)
    model.eval()  # (mmseg's ViT.train returns None)
    return model


@pytest.mark.parametrize('name', list(SIZES))
def test_timm_vit_features_reproduced(name):
    config, size = SIZES[name]
    timm_model = timm_vit(name, size)
    converted, dropped, unmapped = timm_vit_to_mmseg(timm_model.state_dict())
    assert unmapped == [] and dropped == ['head.weight', 'head.bias']
    backbone = project_backbone(config, size)
    backbone.load_state_dict(converted, strict=True)  # every weight used
    image = torch.randn(1, 3, size, size)
    with torch.no_grad():
        tokens = timm_model.forward_features(image)[:, 1:]
        ours = backbone(image)[-1]
    grid = size // 16
    expected = tokens.reshape(1, grid, grid, -1).permute(0, 3, 1, 2)
    torch.testing.assert_close(ours, expected, atol=1e-5, rtol=1e-5)


def test_converted_vit_interpolates_to_other_sizes():
    timm_model = timm_vit('vit_tiny_patch16_384', 384)
    backbone = project_backbone(SIZES['vit_tiny_patch16_384'][0], 384)
    backbone.load_state_dict(timm_vit_to_mmseg(timm_model.state_dict())[0])
    with torch.no_grad():
        for h, w in [(512, 512), (320, 480)]:
            out = backbone(torch.randn(1, 3, h, w))[-1]
            assert out.shape == (1, 192, h // 16, w // 16)
            assert torch.isfinite(out).all()


def test_converter_tool(tmp_path):
    from safetensors.torch import save_file
    state = timm_vit('vit_tiny_patch16_384', 384).state_dict()
    torch.save(state, tmp_path / 'vit.pth')
    save_file(state, str(tmp_path / 'vit.safetensors'))
    for src in ('vit.pth', 'vit.safetensors'):
        dst = tmp_path / f'{src}.mmseg.pth'
        proc = run_tool(['tools/model_converters/timm2mmseg.py',
                         str(tmp_path / src), str(dst)])
        assert 'dropped the classifier' in proc.stdout
        loaded = torch.load(dst, weights_only=True)['state_dict']
        assert 'patch_embed.projection.bias' in loaded
    state['blocks.0.extra.weight'] = torch.zeros(1)
    torch.save(state, tmp_path / 'odd.pth')
    for src, words in [('odd.pth', 'blocks.0.extra.weight'),
                       ('missing.pth', 'does not exist')]:
        proc = run_tool(['tools/model_converters/timm2mmseg.py',
                         str(tmp_path / src), str(tmp_path / 'out.pth')],
                        check=False)
        assert proc.returncode == 2 and words in proc.stderr
        assert not (tmp_path / 'out.pth').exists()


def white_box_backbone(name, **changes):
    """A backbone of _base_/models/white_box_encoders.py."""
    from mmseg.registry import MODELS
    init_default_scope('mmseg')
    cfg = Config.fromfile(osp.join(REPO, 'configs', '_base_', 'models',
                                   'white_box_encoders.py'))
    backbone = dict(cfg[name], drop_path_rate=0.0, init_cfg=None)
    backbone.update(changes)
    model = MODELS.build(backbone)
    model.eval()
    return model


def test_timm_vit_into_the_white_box_backbone():
    """With MHSA layers, WhiteBoxViT on converted timm weights is the timm
    ViT; with QKVCBSA (the CBSA-adapted ViT) it takes every pretrained
    weight and adds only its step sizes. mmseg-key checkpoints (mmseg's
    converted Segmenter weights) convert to the same."""
    timm_model = timm_vit('vit_tiny_patch16_384', 96)
    converted, dropped, unmapped = vit_to_white_box(timm_model.state_dict())
    assert unmapped == [] and dropped == ['head.weight', 'head.bias']
    via_mmseg, _, unmapped = vit_to_white_box(
        timm_vit_to_mmseg(timm_model.state_dict())[0])
    assert unmapped == [] and via_mmseg.keys() == converted.keys()
    assert all(torch.equal(via_mmseg[k], converted[k]) for k in converted)

    vit = white_box_backbone('cbsa_vit_t', img_size=(96, 96),
                             attn_cfg=dict(type='MHSA', num_heads=3))
    vit.load_state_dict(converted, strict=True)
    image = torch.randn(1, 3, 96, 96)
    with torch.no_grad():
        tokens = timm_model.forward_features(image)[:, 1:]
        ours = vit(image)[-1]
    expected = tokens.reshape(1, 6, 6, -1).permute(0, 3, 1, 2)
    torch.testing.assert_close(ours, expected, atol=1e-5, rtol=1e-5)

    adapted = white_box_backbone(
        'cbsa_vit_t', img_size=(96, 96),
        attn_cfg=dict(type='QKVCBSA', num_heads=3, rep_grid=(4, 4)))
    missing, unexpected = adapted.load_state_dict(converted, strict=False)
    assert unexpected == []
    assert sorted(missing) == sorted(
        f'layers.{i}.attn.{step}' for i in range(12)
        for step in ('eta', 'kappa'))
    with torch.no_grad():
        out = adapted(torch.randn(1, 3, 96, 160))[-1]
    assert out.shape == (1, 192, 6, 10) and torch.isfinite(out).all()


# The published classification models, described (not copied) from the
# CBSA repository's CBSA_image_classification/models.py and the CRATE
# repository's model/crate.py: key -> shape, for width d, K heads of p,
# L layers, a 224 input (14x14 patches + CLS) and 1000 classes.
def published_state_dict(layout, attn, d, heads, p, layers=2):
    shapes = {'cls_token': (1, 1, d), 'pos_embedding': (1, 197, d),
              'mlp_head.0.weight': (d,), 'mlp_head.0.bias': (d,),
              'mlp_head.1.weight': (1000, d), 'mlp_head.1.bias': (1000,)}
    if layout == 'cbsa':  # four conv3x3 (no bias) + BatchNorm, GELUs
        widths = [3, d // 8, d // 4, d // 2, d]
        for i in range(4):
            conv = f'to_patch_embedding.proj.{2 * i}'
            shapes[f'{conv}.0.weight'] = (widths[i + 1], widths[i], 3, 3)
            for name in ('weight', 'bias', 'running_mean', 'running_var'):
                shapes[f'{conv}.1.{name}'] = (widths[i + 1], )
            shapes[f'{conv}.1.num_batches_tracked'] = ()
        out = 'to_out'
    else:  # Rearrange, LayerNorm(768), Linear(768, d), LayerNorm(d)
        shapes.update({'to_patch_embedding.1.weight': (768, ),
                       'to_patch_embedding.1.bias': (768, ),
                       'to_patch_embedding.2.weight': (d, 768),
                       'to_patch_embedding.2.bias': (d, ),
                       'to_patch_embedding.3.weight': (d, ),
                       'to_patch_embedding.3.bias': (d, )})
        out = 'to_out.0'
    for i in range(layers):
        a, f = f'transformer.layers.{i}.0', f'transformer.layers.{i}.1'
        shapes.update({f'{a}.norm.weight': (d, ), f'{a}.norm.bias': (d, ),
                       f'{a}.fn.{out}.weight': (d, heads * p),
                       f'{a}.fn.{out}.bias': (d, ),
                       f'{f}.norm.weight': (d, ), f'{f}.norm.bias': (d, ),
                       f'{f}.fn.weight': (d, d)})
        if attn == 'CBSA':
            shapes.update({f'{a}.fn.proj.weight': (heads * p, d),
                           f'{a}.fn.step_x': (heads, 1, 1),
                           f'{a}.fn.step_rep': (heads, 1, 1)})
        else:
            shapes[f'{a}.fn.qkv.weight'] = (heads * p, d)
        if attn == 'TSSA':
            shapes[f'{a}.fn.temp'] = (heads, 1)
    torch.manual_seed(0)
    state = {k: torch.randn(v) for k, v in shapes.items()}
    for key in state:
        if key.endswith('num_batches_tracked'):
            state[key] = torch.tensor(7)
        elif key.endswith('running_var'):
            state[key] = state[key].abs() + 0.5
    return state


PUBLISHED = {  # our base config, published layout, operator, width, heads
    'cbt': ('cbt_t', 'cbsa', 'CBSA', 192, 3, 64),
    'crate-in-cbsa-repo': ('crate_t', 'cbsa', 'MSSA', 192, 3, 64),
    'tost-in-cbsa-repo': ('tost_t', 'cbsa', 'TSSA', 192, 3, 64),
    'crate': ('crate_t', 'crate', 'MSSA', 384, 6, 64),
}


@pytest.mark.parametrize('name', list(PUBLISHED))
def test_published_white_box_checkpoints_load_strictly(name):
    base, layout, attn, d, heads, p = PUBLISHED[name]
    state = published_state_dict(layout, attn, d, heads, p)
    converted, dropped, unmapped = white_box_to_mmseg(state)
    assert unmapped == []
    assert dropped == ['mlp_head.1.weight', 'mlp_head.1.bias']
    stem = dict(type='ConvPatchStem' if layout == 'cbsa' else
                'NormedPatchEmbed')
    attn_cfg = dict(type=attn, num_heads=heads, head_dim=p)
    if attn == 'CBSA':
        attn_cfg['rep_grid'] = (8, 8)
    elif attn == 'MSSA':
        attn_cfg.update(out_proj='linear', step_size=False)
    backbone = white_box_backbone(
        base, img_size=(224, 224), embed_dims=d, num_layers=2,
        stem_cfg=stem, attn_cfg=attn_cfg, ffn_cfg=dict(type='ISTA'))
    backbone.load_state_dict(converted, strict=True)
    assert torch.equal(backbone.ln1.weight, state['mlp_head.0.weight'])
    with torch.no_grad():
        out = backbone(torch.randn(1, 3, 160, 256))[-1]
    assert out.shape == (1, d, 10, 16) and torch.isfinite(out).all()


def test_crate_patch_embedding_is_the_published_one():
    """CRATE flattens each patch as (row, column, channel) before its
    LayerNorm and Linear: the converted stem computes the same tokens."""
    state = published_state_dict('crate', 'MSSA', 384, 6, 64)
    backbone = white_box_backbone('crate_t', img_size=(224, 224),
                                  stem_cfg=dict(type='NormedPatchEmbed'),
                                  num_layers=2)
    backbone.load_state_dict(white_box_to_mmseg(state)[0], strict=False)
    image = torch.randn(1, 3, 32, 48)
    patches = image.reshape(1, 3, 2, 16, 3, 16).permute(0, 2, 4, 3, 5, 1)
    patches = patches.reshape(1, 6, 768)
    norm = torch.nn.functional.layer_norm
    expected = norm(norm(patches, (768, ), state['to_patch_embedding.1.weight'],
                         state['to_patch_embedding.1.bias'])
                    @ state['to_patch_embedding.2.weight'].t()
                    + state['to_patch_embedding.2.bias'], (384, ),
                    state['to_patch_embedding.3.weight'],
                    state['to_patch_embedding.3.bias'])
    with torch.no_grad():
        tokens, hw = backbone.patch_embed(image)
    assert hw == (2, 3)
    torch.testing.assert_close(tokens, expected)


def test_white_box_converter_tools(tmp_path):
    state = published_state_dict('cbsa', 'CBSA', 192, 3, 64)
    torch.save(state, tmp_path / 'cbt.pth')
    proc = run_tool(['tools/model_converters/whitebox2mmseg.py',
                     str(tmp_path / 'cbt.pth'), str(tmp_path / 'cbt.mmseg')])
    assert 'dropped the classifier' in proc.stdout
    loaded = torch.load(tmp_path / 'cbt.mmseg', weights_only=True)
    assert 'layers.1.attn.kappa' in loaded['state_dict']
    state['transformer.layers.0.0.fn.odd'] = torch.zeros(1)
    torch.save(state, tmp_path / 'odd.pth')
    proc = run_tool(['tools/model_converters/whitebox2mmseg.py',
                     str(tmp_path / 'odd.pth'), str(tmp_path / 'out.pth')],
                    check=False)
    assert proc.returncode == 2 and 'fn.odd' in proc.stderr
    assert not (tmp_path / 'out.pth').exists()
    # --config: the result must fit the backbone that will load it. The
    # CBSA repository's ToST is TSSA + ISTA at CBT's widths, not tost_t
    torch.save(published_state_dict('cbsa', 'TSSA', 192, 3, 64),
               tmp_path / 'tost.pth')
    backbone = ("model = dict(backbone=dict(type='WhiteBoxViT', "
                "img_size=224, embed_dims=192, num_layers=2, "
                "final_norm=True, stem_cfg=dict(type='ConvPatchStem'), "
                "attn_cfg=dict(type='TSSA', {}), ffn_cfg=dict(type='{}')))\n")
    (tmp_path / 'tost_t.py').write_text(
        backbone.format('num_heads=4, head_dim=48', 'MLP'))
    (tmp_path / 'fits.py').write_text(
        backbone.format('num_heads=3, head_dim=64', 'ISTA'))
    convert = ['tools/model_converters/whitebox2mmseg.py',
               str(tmp_path / 'tost.pth'), str(tmp_path / 'tost.mmseg')]
    proc = run_tool(convert + [str(tmp_path / 'tost_t.py')], check=False)
    assert proc.returncode == 2
    for text in ('layers.0.attn.temp: checkpoint (3, 1) vs model (4, 1)',
                 'missing', 'layers.0.ffn.layers.0.0.weight',
                 'not in the model', 'layers.0.ffn.weight'):
        assert text in proc.stderr, text
    assert not (tmp_path / 'tost.mmseg').exists()
    run_tool(convert + [str(tmp_path / 'fits.py')])
    assert (tmp_path / 'tost.mmseg').exists()
    timm_state = timm_vit('vit_tiny_patch16_384', 96).state_dict()
    torch.save(timm_state, tmp_path / 'vit.pth')
    run_tool(['tools/model_converters/timm2mmseg.py', '--to', 'white-box',
              str(tmp_path / 'vit.pth'), str(tmp_path / 'vit.wb.pth')])
    loaded = torch.load(tmp_path / 'vit.wb.pth', weights_only=True)
    assert 'layers.0.attn.qkv.weight' in loaded['state_dict']


def test_timm_converter_checks_against_an_mmseg_vit_config(tmp_path):
    """A ViT config without the patch-embedding bias that timm's weights
    (and the converted file) have (mmseg's default): CONFIG says so and
    names the setting; with this project's config, which has it, the file
    is written."""
    torch.save(timm_vit('vit_tiny_patch16_384', 64).state_dict(),
               tmp_path / 'vit.pth')
    config = osp.join(REPO, 'configs/segmenter/'
                      'segmenter_vit-t_mask_8xb1-160k_ade20k-512x512.py')
    convert = ['tools/model_converters/timm2mmseg.py', str(tmp_path /
               'vit.pth'), str(tmp_path / 'vit.mmseg')]
    (tmp_path / 'no_bias.py').write_text(
        f'_base_ = {config!r}\n'
        'model = dict(backbone=dict(patch_bias=False))\n')
    proc = run_tool(convert + [str(tmp_path / 'no_bias.py')], check=False)
    assert proc.returncode == 2
    assert 'patch_embed.projection.bias' in proc.stderr
    assert 'model.backbone.patch_bias=True' in proc.stderr
    assert not (tmp_path / 'vit.mmseg').exists()
    run_tool(convert + [config])
    assert (tmp_path / 'vit.mmseg').exists()


# ---------------------------------------------- JAX ViT (.npz) weights
# A ViT of 2 layers, width 32, 2 heads of 16, MLP 128 and 16x16 patches on
# a 48x32 input (a 3x2 grid), with random weights written in both formats
# the released code's pretrained ViTs come in: the JAX .npz timm 0.4.12
# downloads (its default_cfgs for vit_*_patch16_384,
# timm/models/vision_transformer.py:59-103) and reads with _load_weights
# (vision_transformer.py:396-472), and timm's state dict.
NPZ_VIT = dict(layers=2, width=32, heads=2, hidden=128, patch=16,
               size=(48, 32), classes=10)
#: the released Segmenter ViT's LayerNorm: torch's default eps
#: (segm/model/vit.py:89, segm/model/blocks.py:83-84)
RELEASED_EPS = 1e-5
#: features agree to this fraction of their largest magnitude (float64)
NPZ_RTOL = 1e-10


def timm_layout_weights(seed: int = 0) -> dict:
    """Random float64 weights of the small ViT on timm's keys, classifier
    included."""
    d, f, p = NPZ_VIT['width'], NPZ_VIT['hidden'], NPZ_VIT['patch']
    tokens = (NPZ_VIT['size'][0] // p) * (NPZ_VIT['size'][1] // p) + 1
    shapes = {'cls_token': (1, 1, d), 'pos_embed': (1, tokens, d),
              'patch_embed.proj.weight': (d, 3, p, p),
              'patch_embed.proj.bias': (d, ), 'norm.weight': (d, ),
              'norm.bias': (d, ), 'head.weight': (NPZ_VIT['classes'], d),
              'head.bias': (NPZ_VIT['classes'], )}
    for i in range(NPZ_VIT['layers']):
        shapes.update({
            f'blocks.{i}.norm1.weight': (d, ), f'blocks.{i}.norm1.bias': (d, ),
            f'blocks.{i}.attn.qkv.weight': (3 * d, d),
            f'blocks.{i}.attn.qkv.bias': (3 * d, ),
            f'blocks.{i}.attn.proj.weight': (d, d),
            f'blocks.{i}.attn.proj.bias': (d, ),
            f'blocks.{i}.norm2.weight': (d, ), f'blocks.{i}.norm2.bias': (d, ),
            f'blocks.{i}.mlp.fc1.weight': (f, d),
            f'blocks.{i}.mlp.fc1.bias': (f, ),
            f'blocks.{i}.mlp.fc2.weight': (d, f),
            f'blocks.{i}.mlp.fc2.bias': (d, )})
    g = torch.Generator().manual_seed(seed)
    state = {}
    for key, shape in shapes.items():
        scale = 1.0 if key.endswith('bias') or 'norm' in key else \
            shape[-1] ** -0.5 if len(shape) == 2 else 0.5
        state[key] = scale * torch.randn(shape, generator=g,
                                         dtype=torch.float64)
        if 'norm' in key and key.endswith('weight'):
            state[key] = 1 + 0.2 * state[key]
    return state


def write_augreg_arrays(state: dict) -> dict:
    """The JAX ViT's arrays holding the weights of a timm state dict:
    Flax's (in, out) Dense kernels, an (h, w, in, out) convolution kernel,
    (width, heads, head_dim) query/key/value kernels and a (heads,
    head_dim, width) output kernel (what timm 0.4.12's _load_weights
    undoes, vision_transformer.py:437-472)."""
    d, h = NPZ_VIT['width'], NPZ_VIT['heads']
    n = {k: v.numpy() for k, v in state.items()}
    w = {'embedding/kernel': np.einsum('oiyx->yxio',
                                       n['patch_embed.proj.weight']),
         'embedding/bias': n['patch_embed.proj.bias'],
         'cls': n['cls_token'],
         'Transformer/posembed_input/pos_embedding': n['pos_embed'],
         'Transformer/encoder_norm/scale': n['norm.weight'],
         'Transformer/encoder_norm/bias': n['norm.bias'],
         'head/kernel': n['head.weight'].T, 'head/bias': n['head.bias']}
    for i in range(NPZ_VIT['layers']):
        b, t = f'Transformer/encoderblock_{i}/', f'blocks.{i}.'
        attn = b + 'MultiHeadDotProductAttention_1/'
        qkv_w = n[t + 'attn.qkv.weight'].reshape(3, h, d // h, d)
        qkv_b = n[t + 'attn.qkv.bias'].reshape(3, h, d // h)
        for j, role in enumerate(('query', 'key', 'value')):
            w[f'{attn}{role}/kernel'] = np.einsum('hkd->dhk', qkv_w[j])
            w[f'{attn}{role}/bias'] = qkv_b[j]
        w[attn + 'out/kernel'] = np.einsum(
            'dhk->hkd', n[t + 'attn.proj.weight'].reshape(d, h, d // h))
        w[attn + 'out/bias'] = n[t + 'attn.proj.bias']
        for ln, name in (('LayerNorm_0', 'norm1'), ('LayerNorm_2', 'norm2')):
            w[f'{b}{ln}/scale'] = n[f'{t}{name}.weight']
            w[f'{b}{ln}/bias'] = n[f'{t}{name}.bias']
        for j, fc in enumerate(('fc1', 'fc2')):
            w[f'{b}MlpBlock_3/Dense_{j}/kernel'] = n[f'{t}mlp.{fc}.weight'].T
            w[f'{b}MlpBlock_3/Dense_{j}/bias'] = n[f'{t}mlp.{fc}.bias']
    return {k: np.ascontiguousarray(v) for k, v in w.items()}


def augreg_vit_features(w: dict, image: torch.Tensor) -> torch.Tensor:
    """The patch features (B, width, h, w) of the released Segmenter ViT
    (segm/model/vit.py:108-134, blocks.py:56-95: timm's ViT with torch's
    LayerNorm eps), computed on the JAX arrays as they are stored."""
    t = {k: torch.from_numpy(v) for k, v in w.items()}

    def norm(x, name):
        mean = x.mean(-1, keepdim=True)
        var = ((x - mean) ** 2).mean(-1, keepdim=True)
        return ((x - mean) / torch.sqrt(var + RELEASED_EPS) *
                t[name + '/scale'] + t[name + '/bias'])

    kernel = t['embedding/kernel']  # (py, px, in, width)
    p, d = kernel.shape[0], kernel.shape[3]
    b, c, height, width = image.shape
    gh, gw = height // p, width // p
    patches = image.reshape(b, c, gh, p, gw, p)
    x = torch.einsum('bcyixj,ijcd->byxd', patches, kernel) + \
        t['embedding/bias']
    x = torch.cat([t['cls'].expand(b, 1, d), x.reshape(b, gh * gw, d)], 1)
    x = x + t['Transformer/posembed_input/pos_embedding']
    for i in range(NPZ_VIT['layers']):
        blk = f'Transformer/encoderblock_{i}/'
        attn = blk + 'MultiHeadDotProductAttention_1/'
        y = norm(x, blk + 'LayerNorm_0')
        q, k, v = (torch.einsum('bnd,dhk->bhnk', y, t[f'{attn}{r}/kernel'])
                   + t[f'{attn}{r}/bias'][:, None]
                   for r in ('query', 'key', 'value'))
        scores = q @ k.transpose(-1, -2) * q.shape[-1] ** -0.5
        o = torch.softmax(scores, -1) @ v
        x = x + torch.einsum('bhnk,hkd->bnd', o, t[attn + 'out/kernel']) + \
            t[attn + 'out/bias']
        y = norm(x, blk + 'LayerNorm_2')
        mlp = blk + 'MlpBlock_3/'
        y = torch.nn.functional.gelu(y @ t[mlp + 'Dense_0/kernel'] +
                                     t[mlp + 'Dense_0/bias'])
        x = x + y @ t[mlp + 'Dense_1/kernel'] + t[mlp + 'Dense_1/bias']
    x = norm(x, 'Transformer/encoder_norm')[:, 1:]
    return x.reshape(b, gh, gw, d).permute(0, 3, 1, 2)


def npz_vit_backbone():
    """mmseg's ViT as the published Segmenter ViT-T config builds it
    (patch bias, LayerNorm eps, CLS token, final norm), at the small ViT's
    sizes, in float64."""
    from mmseg.registry import MODELS
    init_default_scope('mmseg')
    cfg = Config.fromfile(osp.join(
        REPO, 'configs', 'segmenter',
        'segmenter_vit-t_mask_8xb1-160k_ade20k-512x512.py'))
    assert cfg.model.backbone.norm_cfg.eps == RELEASED_EPS
    model = MODELS.build(dict(
        cfg.model.backbone, img_size=NPZ_VIT['size'],
        embed_dims=NPZ_VIT['width'], num_heads=NPZ_VIT['heads'],
        num_layers=NPZ_VIT['layers']))
    # the configs keep mmseg's MLP ratio 4, the released d_ff = 4 x width
    # (segm/model/factory.py:48-49)
    assert model.layers[0].ffn.layers[0][0].out_features == NPZ_VIT['hidden']
    model.double()
    model.eval()  # (mmseg's ViT.train returns None)
    return model


def relative_error(backbone, state: dict, expected: torch.Tensor,
                   image: torch.Tensor) -> float:
    backbone.load_state_dict(state, strict=True)
    with torch.no_grad():
        ours = backbone(image)[-1]
    return ((ours - expected).abs().max() / expected.abs().max()).item()


def test_augreg_npz_and_timm_pth_convert_to_the_released_vit(tmp_path):
    """The .npz and the .pth of the same weights convert to the same mmseg
    state dict (exactly: both are permutations of the same numbers), and
    mmseg's ViT, built as the configs build it and loaded strictly with
    it, computes the features the released ViT computes from the .npz
    (float64, within NPZ_RTOL of their largest magnitude)."""
    from mmseg_whitebox.converters.state_dicts import read_state_dict
    timm_state = timm_layout_weights()
    arrays = write_augreg_arrays(timm_state)
    np.savez(tmp_path / 'vit.npz', **arrays)
    torch.save(timm_state, tmp_path / 'vit.pth')
    from_npz = read_state_dict(str(tmp_path / 'vit.npz'))
    assert from_npz.keys() == timm_state.keys()
    assert all(torch.equal(from_npz[k], timm_state[k]) for k in timm_state)
    # the file is what timm reads: the installed timm's own .npz loader
    # (load_pretrained, the _load_weights of 0.4.12 with later formats
    # added) gives the same weights
    from timm.models.vision_transformer import VisionTransformer
    vit = VisionTransformer(
        img_size=NPZ_VIT['size'], patch_size=NPZ_VIT['patch'],
        embed_dim=NPZ_VIT['width'], depth=NPZ_VIT['layers'],
        num_heads=NPZ_VIT['heads'], num_classes=NPZ_VIT['classes']).double()
    vit.load_pretrained(str(tmp_path / 'vit.npz'))
    assert vit.state_dict().keys() == timm_state.keys()
    assert all(torch.equal(v, timm_state[k])
               for k, v in vit.state_dict().items())
    converted = {}
    for src in ('vit.npz', 'vit.pth'):
        state, dropped, unmapped = timm_vit_to_mmseg(
            read_state_dict(str(tmp_path / src)))
        assert unmapped == [] and dropped == ['head.weight', 'head.bias']
        converted[src] = state
    assert converted['vit.npz'].keys() == converted['vit.pth'].keys()
    assert all(torch.equal(v, converted['vit.pth'][k])
               for k, v in converted['vit.npz'].items())

    image = torch.randn(2, 3, *NPZ_VIT['size'],
                        generator=torch.Generator().manual_seed(1),
                        dtype=torch.float64)
    expected = augreg_vit_features(arrays, image)
    assert expected.shape == (2, 32, 3, 2)
    backbone = npz_vit_backbone()
    assert relative_error(backbone, converted['vit.npz'], expected,
                          image) <= NPZ_RTOL

    # sensitivity: query and key kernels swapped in the file, or the
    # output projection left untransposed, are seen
    swapped = dict(arrays)
    attn = 'Transformer/encoderblock_1/MultiHeadDotProductAttention_1/'
    swapped[attn + 'query/kernel'] = arrays[attn + 'key/kernel']
    swapped[attn + 'key/kernel'] = arrays[attn + 'query/kernel']
    state = timm_vit_to_mmseg(augreg_to_timm(swapped))[0]
    assert relative_error(backbone, state, expected, image) > 1e-3
    state = dict(converted['vit.npz'])
    out = 'layers.0.attn.attn.out_proj.weight'
    state[out] = state[out].T.contiguous()
    assert relative_error(backbone, state, expected, image) > 1e-3


def test_augreg_npz_bad_input(tmp_path):
    """A key the file lacks, a key no ViT part reads, a wrong shape or an
    array that would need unpickling: a ValueError naming it."""
    from mmseg_whitebox.converters.state_dicts import read_state_dict
    arrays = write_augreg_arrays(timm_layout_weights())
    dense = 'Transformer/encoderblock_1/MlpBlock_3/Dense_0/bias'
    cases = {
        'missing': ({k: v for k, v in arrays.items() if k != dense},
                    [repr(dense), 'not a complete JAX ViT']),
        'hybrid': (dict(arrays, **{'conv_root/kernel': np.zeros(1)}),
                   ['conv_root/kernel', 'no ViT part']),
        'shape': (dict(arrays, **{dense: np.zeros(3)}),
                  [dense, '(3,)', '(128,)']),
    }
    for name, (content, words) in cases.items():
        np.savez(tmp_path / f'{name}.npz', **content)
        with pytest.raises(ValueError) as info:
            read_state_dict(str(tmp_path / f'{name}.npz'))
        for word in words:
            assert word in str(info.value), (name, word, str(info.value))
    np.savez(tmp_path / 'objects.npz', cls=np.array([{'a': 1}],
                                                    dtype=object))
    with pytest.raises(ValueError, match='cannot be read as plain numpy'):
        read_state_dict(str(tmp_path / 'objects.npz'))
    (tmp_path / 'text.npz').write_text('<html>not found</html>')
    with pytest.raises(ValueError, match='is not a .npz archive'):
        read_state_dict(str(tmp_path / 'text.npz'))


# The weights the released code loads for each ViT size: timm 0.4.12's
# default_cfgs (timm/models/vision_transformer.py:59-62,73-76,87-90,
# 100-103), read by segm/model/factory.py:51-76
RELEASED_PRETRAINED = {
    'tiny': 'Ti_16-i21k-300ep-lr_0.001-aug_none-wd_0.03-do_0.0-sd_0.0--'
            'imagenet2012-steps_20k-lr_0.03-res_384.npz',
    'small': 'S_16-i21k-300ep-lr_0.001-aug_light1-wd_0.03-do_0.0-sd_0.0--'
             'imagenet2012-steps_20k-lr_0.03-res_384.npz',
    'base': 'B_16-i21k-300ep-lr_0.001-aug_medium1-wd_0.1-do_0.0-sd_0.0--'
            'imagenet2012-steps_20k-lr_0.01-res_384.npz',
    'large': 'L_16-i21k-300ep-lr_0.001-aug_medium1-wd_0.1-do_0.1-sd_0.1--'
             'imagenet2012-steps_20k-lr_0.01-res_384.npz',
}


def config_checkpoints() -> dict:
    """Config file -> the URL its ``checkpoint = '...'`` sets."""
    import ast
    import glob
    found = {}
    for path in glob.glob(osp.join(REPO, 'configs', '**', '*.py'),
                          recursive=True):
        with open(path) as f:
            for node in ast.parse(f.read()).body:
                if (isinstance(node, ast.Assign) and any(
                        isinstance(t, ast.Name) and t.id == 'checkpoint'
                        for t in node.targets)):
                    found[osp.relpath(path, REPO)] = node.value.value
    return found


def test_pretrained_weights_table_matches_the_configs():
    """docs/models.md#pretrained-encoder-weights: each ViT size's row
    names the file its configs download and the AugReg file the released
    code loads; every config's download is of its own size."""
    import re
    urls = config_checkpoints()
    with open(osp.join(REPO, 'docs', 'models.md')) as f:
        text = f.read()
    table = text[text.index('## Pretrained encoder weights'):]
    table = table[:table.index('**How the two relate.**')]
    sizes = {'t': 'tiny', 's': 'small', 'b': 'base', 'l': 'large'}
    for letter, size in sizes.items():
        row = next(line for line in table.splitlines()
                   if line.startswith(f'| `*_vit-{letter}_*`'))
        assert f'vit_{size}_patch16_384' in row
        assert RELEASED_PRETRAINED[size] in row
        # the configs of this size and the model base (vit-b16)
        downloads = {u for p, u in urls.items()
                     if re.search(fr'_vit-{letter}(16|_)', osp.basename(p))}
        assert len(downloads) == 1, downloads
        url = downloads.pop()
        assert f'/vit_{size}_p16_384_' in url
        assert osp.basename(url) in row
    # every URL is one of the four, under the base the table names
    assert all(u.startswith('https://download.openmmlab.com/mmsegmentation/'
                            'v0.5/pretrain/segmenter/vit_') and
               osp.basename(u) in table for u in urls.values())
