"""Coding-rate measurements and CBSA extraction maps."""
import json
import os.path as osp

import pytest
import torch
from mmengine.config import Config
from mmengine.registry import init_default_scope

from mmseg_whitebox.analysis.attention_maps import (CBSAAttentionCapture,
                                                    grid_maps)
from mmseg_whitebox.analysis.coding_rate import (CompressionProbe,
                                                 coding_rate,
                                                 compression_term)
from mmseg_whitebox.ops import CBSA, MSSA

from _helpers import REPO, run_tool, small_run_options

CBSA_DEMO = 'configs/cbsa/cbsa_vit-demo_1xb8-800iter_synthade-128x128.py'


def test_coding_rate_matches_the_gram_form():
    """R(W) = 1/2 logdet(I_N + p/(N eps^2) W^T W), CRATE eq. 7, computed
    here on the N x N side; the library uses the p x p side."""
    torch.manual_seed(0)
    w = torch.randn(2, 5, 40, dtype=torch.float64)  # (batch, p, N)
    p, n, eps = 5, 40, 0.3
    gram_n = w.transpose(-1, -2) @ w
    ref = 0.5 * torch.logdet(torch.eye(n, dtype=torch.float64) +
                             p / (n * eps**2) * gram_n)
    torch.testing.assert_close(coding_rate(w, eps), ref)
    # fewer, more similar tokens code cheaper
    assert coding_rate(torch.zeros(5, 40)) == 0


def test_compression_term_sums_over_the_layers_subspaces():
    torch.manual_seed(0)
    op = MSSA(12, num_heads=3, head_dim=4)
    z = torch.randn(2, 30, 12)
    total = compression_term(z, op, 0.5)
    by_hand = 0
    for k in range(3):
        u = op.proj.weight[4 * k:4 * (k + 1)]  # U_k^T: (p, d)
        by_hand = by_hand + coding_rate(
            (z @ u.t()).transpose(-1, -2), 0.5)
    torch.testing.assert_close(total, by_hand)
    # the normalised variant ignores token magnitudes
    torch.testing.assert_close(
        compression_term(3 * z, op, 0.5, normalize=True),
        compression_term(z, op, 0.5, normalize=True))


def build(config):
    from mmseg.registry import MODELS
    init_default_scope('mmseg')
    cfg = Config.fromfile(osp.join(REPO, config))
    torch.manual_seed(0)
    model = MODELS.build(cfg.model)
    model.init_weights()
    return model.eval()


def test_probe_measures_each_layer_in_and_out():
    model = build(CBSA_DEMO)
    x = torch.randn(2, 3, 64, 96)
    layer_io = []
    model.decode_head.layers[1].register_forward_hook(
        lambda m, a, out: layer_io.append((a[0], out)))
    with CompressionProbe(model, eps=0.1) as probe, torch.no_grad():
        model(x, mode='tensor')
    rows = probe.summary()
    assert [r['layer'] for r in rows] == [0, 1, 2]
    assert all(r['images'] == 2 for r in rows)
    op = model.decode_head.layers[1].attn
    z_in, z_out = layer_io[0]
    assert rows[1]['rate_in_mean'] == pytest.approx(
        float(compression_term(z_in, op, 0.1).mean()))
    assert rows[1]['rate_out_mean'] == pytest.approx(
        float(compression_term(z_out, op, 0.1).mean()))


def test_probe_refuses_heads_without_subspaces():
    model = build('configs/segmenter/'
                  'segmenter_vit-demo_mask_1xb8-800iter_synthade-128x128.py')
    with pytest.raises(ValueError, match='subspace'):
        CompressionProbe(model)


def test_capture_records_extraction_attention_and_restores():
    model = build(CBSA_DEMO)
    x = torch.randn(1, 3, 64, 96)
    with torch.no_grad():
        before = model(x, mode='tensor')
    with CBSAAttentionCapture(model) as capture, torch.no_grad():
        during = model(x, mode='tensor')
    torch.testing.assert_close(during, before, rtol=0, atol=0)
    assert all('forward' not in op.__dict__ for op in capture.ops.values())
    record = capture.records['decode_head.layers.0.attn'][0]
    assert record['hw'] == (8, 12)
    attn = record['attn']
    assert attn.shape == (1, 3, 25, 8 * 12 + 150)
    maps = grid_maps(attn[0], record['hw'])
    assert maps.shape == (3, 25, 8, 12)
    # softmax over all tokens: the grid part carries at most all the mass
    assert (maps.sum((-1, -2)) <= 1 + 1e-6).all()
    with pytest.raises(ValueError, match='no CBSA'):
        CBSAAttentionCapture(torch.nn.Linear(2, 2))
    assert isinstance(capture.ops['decode_head.layers.0.attn'], CBSA)


def test_coding_rate_tool(tiny_ade, tiny_checkpoint, tmp_path):
    ckpt = tiny_checkpoint(CBSA_DEMO)
    proc = run_tool(['tools/analysis_tools/coding_rate.py', CBSA_DEMO, ckpt,
                     '--num-images', '2', '--maps', '1', '--out',
                     str(tmp_path), '--cfg-options'] +
                    small_run_options(tiny_ade, 4))
    assert 'R_c in' in proc.stdout
    with open(tmp_path / 'coding_rate.json') as f:
        data = json.load(f)
    assert data['images'] == 2 and len(data['layers']) == 3
    for name in ('coding_rate.csv', 'coding_rate.png',
                 'extraction_ADE_val_00000000_layer0.png',
                 'extraction_ADE_val_00000000_layer2.png'):
        assert (tmp_path / name).is_file(), name
