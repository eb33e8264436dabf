"""Weight conversion: timm ViTs (random weights, no hub) into this
project's configs reproduce timm's patch-token features."""
import os.path as osp

import pytest
import torch
from mmengine.config import Config
from mmengine.registry import init_default_scope

from mmseg_whitebox.models.backbones.vit_conversion import timm_vit_to_mmseg

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
    backbone = dict(cfg.model.backbone, img_size=(img_size, img_size),
                    patch_bias=True, drop_path_rate=0.0)
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
