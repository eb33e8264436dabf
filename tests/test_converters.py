"""Weight conversion: timm ViTs (random weights, no hub) into this
project's configs reproduce timm's patch-token features; a ViT made linear
with CBSA takes every pretrained weight; the published white-box
classification checkpoints (state dicts built here from the published
modules' key names and shapes) load with strict=True."""
import os.path as osp

import pytest
import torch
from mmengine.config import Config
from mmengine.registry import init_default_scope

from mmseg_whitebox.models.backbones.vit_conversion import (
    timm_vit_to_mmseg, vit_to_white_box)
from mmseg_whitebox.models.backbones.white_box_conversion import (
    white_box_to_mmseg)

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
               str(tmp_path / 'tost.pth'), str(tmp_path / 'tost.mmseg'),
               '--config']
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
    (and the converted file) have (mmseg's default): --config says so and
    names the setting; with this project's config, which has it, the file
    is written."""
    torch.save(timm_vit('vit_tiny_patch16_384', 64).state_dict(),
               tmp_path / 'vit.pth')
    config = osp.join(REPO, 'configs/segmenter/'
                      'segmenter_vit-t_mask_8xb1-160k_ade20k-512x512.py')
    convert = ['tools/model_converters/timm2mmseg.py', str(tmp_path /
               'vit.pth'), str(tmp_path / 'vit.mmseg'), '--config']
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
