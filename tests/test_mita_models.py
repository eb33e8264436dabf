"""MiTA as an encoder: the demo config through the tools (train, test,
the noise sweep of its encoder attention), FLOPs, torch.compile and ONNX.
The operator itself: tests/test_mita.py."""
import functools
import glob
import json
import os.path as osp

import pytest
import torch
import torch.nn.functional as F
from mmengine.config import Config

from mmseg_whitebox.models.attention_sites import find_attention_sites
from mmseg_whitebox.ops import MiTA

from _helpers import REPO, needs_onnx_export, run_tool, small_run_options

DEMO = 'configs/mita/cbsa_mita-vit-demo_1xb8-800iter_synthade-128x128.py'


def build_demo(**backbone):
    """The MiTA demo model with random weights (seeded), in eval mode, as
    mmseg's ``init_model`` builds it (with its config)."""
    from mmseg.apis import init_model
    cfg = Config.fromfile(osp.join(REPO, DEMO))
    cfg.model.backbone.update(backbone)
    torch.manual_seed(0)
    model = init_model(cfg, None, device='cpu')
    model.init_weights()
    return model.eval()


@pytest.mark.slow
def test_mita_demo_trains_tests_and_sweeps_its_encoder_attention(
        tiny_ade, tiny_checkpoint, tmp_path):
    """tools/train.py and tools/test.py on the MiTA demo config, then the
    noise sweep of its four MiTA layers: every layer a site, with the
    attention-removed reference and one usage row per validation image."""
    ckpt = tiny_checkpoint(DEMO)
    opts = ['--cfg-options'] + small_run_options(tiny_ade, 4)
    run_tool(['tools/test.py', DEMO, ckpt, '--work-dir',
              str(tmp_path / 'test')] + opts)
    with open(glob.glob(str(tmp_path / 'test' / '*' / '*.json'))[0]) as f:
        test_miou = json.load(f)['mIoU']
    out = tmp_path / 'sweep'
    proc = run_tool(['tools/noise_robustness.py', DEMO, ckpt, '--target',
                     'encoder-attention', '--sigmas', '0', '0.1', '--draws',
                     '1', '--out', str(out), '--work-dir',
                     str(tmp_path / 'w')] + opts)
    assert 'backbone.layers.3.attn.qkv.weight' in proc.stdout
    with open(out / 'results.json') as f:
        data = json.load(f)
    assert data['clean']['mIoU'] == test_miou
    assert data['points'][0]['mIoU_mean'] == test_miou
    assert len(data['ablation']) == 1  # the MiTA layers removed
    usage = data['attention_usage']
    assert sorted({row['site'] for row in usage}) == [
        f'backbone.layers.{i}.attn' for i in range(4)]
    # tiny_ade has 3 validation images: one usage measure each, per site
    assert all(row['images'] == 3 for row in usage)


def test_mita_layers_are_encoder_attention_sites():
    model = build_demo()
    sites = find_attention_sites(model, 'backbone')
    assert [s.name for s in sites] == [f'backbone.layers.{i}.attn'
                                       for i in range(4)]
    assert all(isinstance(s.attention, MiTA) for s in sites)


def test_mita_flops_are_counted_and_linear_in_tokens():
    """mmengine's FLOP count sees every product of the layer. Per head, for
    each of the N tokens: the landmark similarities of its routing, the
    shared expert's M logits and values, the routed expert's k logits and
    values (5 x M x p multiply-adds at k = M); for each landmark: its
    similarities to the N keys and its softmax attention over them (3 x
    N x p). 8 M p N per head in all, linear in N (softmax attention's
    2 N^2 p is not), plus the pooling of the grid."""
    from mmseg_whitebox.analysis.complexity import flop_analyzer
    op = MiTA(96, 3, 32, pool_size=4).eval()
    for side in (16, 32):
        n = 1 + side * side
        analyzer = flop_analyzer(op, (torch.randn(1, n, 96), (side, side),
                                      1))
        modules = analyzer.by_module()
        attention = analyzer.total() - modules['qkv'] - modules['out_proj']
        pooling = side * side * 96
        # mmengine counts an einsum from numpy's contraction path, which
        # rounds (3,149,000 for 3,148,800 at 32x32)
        assert attention == pytest.approx(8 * 16 * 32 * 3 * n + pooling,
                                          rel=1e-4)


@needs_onnx_export()
@pytest.mark.slow
def test_mita_exports_to_onnx_with_parity(tmp_path):
    """A one-layer MiTA demo model exported with dynamic H, W: standard
    ONNX operators only (TopK, ArgMax, GatherElements), and onnxruntime's
    logits match PyTorch's at the export size and at two others (the
    number of keys per expert is min(k, N), kept in the graph)."""
    from mmseg_whitebox.deployment.onnx_export import (deployment_metadata,
                                                       export_onnx,
                                                       non_standard_ops,
                                                       onnx_parity)
    model = build_demo(num_layers=1, out_indices=0)
    path = export_onnx(model, str(tmp_path / 'mita.onnx'), (128, 128),
                       dynamic=True, metadata=deployment_metadata(model))
    assert non_standard_ops(path) == []
    results = onnx_parity(model, path, ((128, 128), (96, 160), (100, 150)),
                          export_shape=(128, 128))
    for result in results:
        print(f'ONNX parity mita: {result}')
        assert result.argmax_agreement >= 0.999, result
        assert result.max_abs_diff < 1e-3, result


# ------------------------------------------- the released recipe, 3 steps
MITA_T = 'configs/mita/cbsa_mita-vit-t_8xb1-160k_ade20k-512x512.py'


def released_mita_block(x, state, prefix, heads, hw):
    """model/enc_blocks.py Block with MiTA as its attention:
    ``x + attn(norm1(x))``, ``x + mlp(norm2(x))``; the attention pools the
    first H*W tokens to 7x7 landmarks with 49 keys each."""
    from test_mita import released_mita_attention
    from test_segmenter_conversion import layer_norm, linear
    weights = [state[f'{prefix}.attn.{name}.{kind}']
               for name in ('qkv', 'proj') for kind in ('weight', 'bias')]
    x = x + released_mita_attention(layer_norm(x, state, f'{prefix}.norm1'),
                                    weights, heads, hw, 0, 7, 49)
    hidden = F.gelu(linear(layer_norm(x, state, f'{prefix}.norm2'), state,
                           f'{prefix}.mlp.fc1'))
    return x + linear(hidden, state, f'{prefix}.mlp.fc2')


def encoder_names(sizes):
    """Released encoder key -> WhiteBoxViT key: the released ViT keeps
    timm's names, which the package's timm converter maps."""
    from mmseg_whitebox.converters.vit import vit_to_white_box
    from test_recipes import DEPTH
    from test_segmenter_conversion import encoder_shapes
    names = {}
    for key in encoder_shapes(sizes['d'], DEPTH, sizes['grid']):
        if not key.startswith('encoder.head.'):
            (name, ), _, _ = vit_to_white_box(
                {key[len('encoder.'):]: torch.zeros(1)})
            names[key] = f'backbone.{name}'
    return names


@functools.lru_cache(maxsize=None)
def released_mita_run():
    """The released side of tests/test_recipes.py's comparison for the
    MiTA-Segmenter-T config (2 encoder layers, 6 classes, a 10x11 token
    grid): the start weights (WhiteBoxViT keys), and after three steps the
    parameters and the losses."""
    import test_recipes as recipe
    from test_released_evaluation import released_encoder
    from test_segmenter_conversion import cbt_decoder_forward
    from mmseg_whitebox.converters import segmenter as sc
    cfg = recipe.tiny_config(MITA_T)
    cfg.model.backbone.init_cfg = None  # no converted weights: random ones
    start = recipe.initial_weights(cfg)
    images, labels = recipe.fixed_batch(cfg)
    sizes = recipe.released_sizes(
        Config(dict(model=dict(cfg.model, backbone=dict(
            cfg.model.backbone, num_heads=cfg.model.backbone.attn_cfg
            .num_heads)))))
    names = encoder_names(sizes)
    released = recipe.to_released(start, 'cbt', sizes, encoder=False)
    released.update({key: start[name].clone() for key, name in names.items()})
    assert len(released) == len(start)
    params = {k: v.requires_grad_() for k, v in released.items()}

    def forward(inputs):
        tokens, hw = released_encoder(params, inputs, sizes['heads'],
                                      recipe.DEPTH, released_mita_block)
        masks = cbt_decoder_forward(params, tokens, hw,
                                    heads=sizes['dec_heads'],
                                    n_cls=recipe.N_CLS)
        return F.interpolate(masks, size=inputs.shape[-2:], mode='bilinear',
                             align_corners=False)

    data = recipe.DATASETS['ade20k']
    released_losses = recipe.released_steps(
        forward, params, images, labels, data['lr'],
        recipe.released_iterations(data))
    final = {names[k]: v.detach() for k, v in params.items() if k in names}
    final.update(sc.segmenter_to_mmseg(
        {k: v.detach() for k, v in params.items() if k not in names},
        'cbt')[0])
    return start, final, released_losses


def mita_three_step_mismatch(change=None):
    """||theta_mmseg - theta_released|| / ||theta_released - theta_0|| and
    the largest relative difference of a step's loss, ``change(cfg)``
    applied to the config side only."""
    import test_recipes as recipe
    cfg = recipe.tiny_config(MITA_T)
    cfg.model.backbone.init_cfg = None
    if change is not None:
        change(cfg)
    return recipe.mismatch(cfg, *released_mita_run())


def test_three_steps_equal_mita_segmenter_trained_as_released(one_thread):
    """Three training steps of the MiTA-Segmenter-T config equal, in
    float64, three steps of the released model from the same weights on
    the same batch: the released ViT with MiTA attention
    (tests/test_mita.py's re-implementation of the released forward), the
    released CBT decoder, timm 0.4.12's Nesterov SGD, the released
    polynomial lr and loss. Parameters within 1e-9 of the update
    (measured 2.9e-12, mmseg's loss denominator, as for the ViT-T
    configs), losses within 1e-9."""
    from test_recipes import TOLERANCE
    params, losses = mita_three_step_mismatch()
    assert params < TOLERANCE and losses < TOLERANCE, (params, losses)


def test_three_step_check_sees_the_patch_grid_pooled():
    """The same comparison misses when the landmarks are pooled from the
    patch grid (the operator's default) instead of the released leading
    tokens: measured 0.030 of the update; the bound is two thirds of it,
    as tests/test_recipes.py's CHANGES."""
    params, _ = mita_three_step_mismatch(
        lambda cfg: cfg.model.backbone.attn_cfg.update(router_pool='grid'))
    assert params > 0.02
