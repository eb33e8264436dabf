"""MiTA as an encoder: the demo config through the tools (train, test,
the noise sweep of its encoder attention), FLOPs, torch.compile and ONNX.
The operator itself: tests/test_mita.py."""
import glob
import json
import os.path as osp

import pytest
import torch
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
