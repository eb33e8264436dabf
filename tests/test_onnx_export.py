"""ONNX export of whole segmentors (tools/deployment/export_onnx.py):
onnxruntime matches PyTorch at the export shape and, for dynamic graphs, at
non-square sizes, for every head; standard operators only.

Needs the ``deploy`` extra (onnx, onnxruntime, onnxscript), which
``make install`` installs: without it these tests fail rather than skip,
so that CI cannot lose them silently. The parity figures are printed
(``pytest -s``) and recorded as junit properties."""
import json
import os.path as osp

import pytest
import torch
import torch.nn.functional as F
from mmengine.config import Config

from _helpers import REPO, demo_configs, run_tool

EXPORT_HW = (128, 128)  # the demo configs' crop
# non-square, and one whose sides are not multiples of the 8-pixel patch
DYNAMIC_HWS = ((96, 160), (100, 150))
HEADS = ('cbsa', 'cbsa-rigorous', 'mssa', 'mssa-ca', 'segmenter')
MIN_AGREEMENT = 0.999


def build_demo(name: str, encoder_layers: int = None):
    """A demo model with random weights (seeded), in eval mode; with
    ``encoder_layers``, a shallower encoder (export time grows with the
    graph)."""
    from mmseg.apis import init_model
    cfg = Config.fromfile(osp.join(REPO, demo_configs()[name]))
    cfg.model.pretrained = None
    cfg.model.backbone.init_cfg = None
    if encoder_layers:
        cfg.model.backbone.num_layers = encoder_layers
        cfg.model.backbone.out_indices = encoder_layers - 1
    torch.manual_seed(0)
    model = init_model(cfg, None, device='cpu')
    model.init_weights()  # init_model leaves the class embeddings at zero
    return model.eval()


def report(record_property, name, kind, results):
    for result in results:
        print(f'ONNX parity {name} ({kind}): {result}')
        record_property(f'{name}_{kind}_{result.shape[0]}x{result.shape[1]}',
                        f'{result.max_abs_diff:.3g} '
                        f'{result.argmax_agreement:.6f}')


@pytest.mark.parametrize('name', HEADS)
def test_onnx_parity_fixed_and_dynamic(name, tmp_path, record_property):
    """Each head as its demo config builds it, on a one-layer encoder (the
    same mmseg ViT under every head; the tool test exports a whole demo
    model), exported with dynamic H, W at 128x128 and run at that shape
    and at two others (the static graph: test_export_tool)."""
    from mmseg_whitebox.deployment.onnx_export import (export_onnx,
                                                       non_standard_ops,
                                                       onnx_parity)
    model = build_demo(name, encoder_layers=1)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    path = export_onnx(model, str(tmp_path / f'{name}.onnx'), EXPORT_HW,
                       dynamic=True)
    assert non_standard_ops(path) == []
    fixed, *free = onnx_parity(model, path, (EXPORT_HW, ) + DYNAMIC_HWS,
                               export_shape=EXPORT_HW)
    report(record_property, name, 'fixed', [fixed])
    report(record_property, name, 'dynamic', free)
    for result in [fixed] + free:
        assert result.argmax_agreement >= MIN_AGREEMENT, (name, result)
        assert result.max_abs_diff < 1e-3, (name, result)
    # the export leaves the model as it was: weights, and mmseg's own
    # position embedding and padding code (no instance overrides left)
    after = model.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before)
    assert '_pos_embeding' not in vars(model.backbone)
    assert 'forward' not in vars(model.backbone.patch_embed.adap_padding)


def test_export_pooling_is_adaptive_average_pooling():
    """The pooling CBSA exports with (averaging matrices computed from the
    grid size) is adaptive_avg_pool2d, also for grids the representatives
    grid does not divide."""
    from mmseg_whitebox.ops.export import adaptive_avg_pool2d
    for hw, out in (((16, 16), (5, 5)), ((12, 20), (5, 5)), ((7, 3), (3, 2)),
                    ((10, 10), (10, 10)), ((13, 17), (4, 6))):
        grid = torch.randn(2, 6, *hw)
        torch.testing.assert_close(
            adaptive_avg_pool2d(grid, out),
            F.adaptive_avg_pool2d(grid, out), rtol=1e-5, atol=1e-6)


def test_agreement_below_threshold_is_an_error():
    from mmseg_whitebox.deployment.onnx_export import Parity, check_agreement
    from mmseg_whitebox.utils.cli import ToolError
    good = Parity((128, 128), 1e-6, 1.0, export_shape=True)
    bad = Parity((96, 160), 3.0, 0.5)
    check_agreement([good], 0.999, 'x.onnx')
    with pytest.raises(ToolError, match=r'96x160.*x\.onnx'):
        check_agreement([good, bad], 0.999, 'x.onnx')


@pytest.fixture(scope='module')
def segmenter_checkpoint(tmp_path_factory) -> str:
    path = str(tmp_path_factory.mktemp('onnx_ckpt') / 'segmenter.pth')
    torch.save(dict(state_dict=build_demo('segmenter').state_dict()), path)
    return path


def test_export_tool(segmenter_checkpoint, tmp_path):
    """The whole Segmenter demo model, exported as a static graph."""
    config = demo_configs()['segmenter']
    out = tmp_path / 'onnx' / 'segmenter.onnx'
    proc = run_tool(['tools/deployment/export_onnx.py', config,
                     segmenter_checkpoint, '--shape', '128', '128', '--out',
                     str(out), '--json', str(tmp_path / 'parity.json')])
    print(proc.stdout)
    assert osp.isfile(out) and f'wrote {out}' in proc.stdout
    assert '128x128 (export shape): max |logit diff|' in proc.stdout
    with open(tmp_path / 'parity.json') as f:
        parity = json.load(f)['parity']
    assert [p['shape'] for p in parity] == [[128, 128]]
    assert parity[0]['argmax_agreement'] >= MIN_AGREEMENT

    import onnx
    meta = {p.key: p.value for p in onnx.load(str(out)).metadata_props}
    assert json.loads(meta['mean']) and 'seg_logits' in meta['output']

    # bad input: one line on stderr, exit status 2, before any export
    proc = run_tool(['tools/deployment/export_onnx.py', config,
                     segmenter_checkpoint, '--shape', '128', '128',
                     '--check-shape', '96', '160', '--out',
                     str(tmp_path / 'x.onnx')], check=False)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert 'export_onnx.py: error: --check-shape needs --dynamic' in \
        proc.stderr and 'Traceback' not in proc.stderr


def test_bad_input_is_refused_before_exporting(segmenter_checkpoint,
                                               tmp_path):
    from mmseg_whitebox.deployment.onnx_export import (check_shapes,
                                                       export_and_check)
    from mmseg_whitebox.utils.cli import ToolError
    cbsa = osp.join(REPO, demo_configs()['cbsa'])
    out = str(tmp_path / 'm.onnx')
    bad = [
        (dict(checkpoint=str(tmp_path / 'nope.pth')), 'nope.pth'),
        (dict(config='configs/nope.py'), 'does not exist'),
        (dict(shape=(0, 128)), 'two positive sizes'),
        (dict(out=str(tmp_path)), 'is a folder'),
        (dict(min_agreement=1.5), 'min-agreement'),
        (dict(dynamic=False, other_shapes=[(96, 160)]), 'needs --dynamic'),
        # a checkpoint of another model is refused, not half-loaded
        (dict(config=cbsa), 'decode_head'),
    ]
    for kwargs, words in bad:
        kwargs = dict(dict(config=osp.join(REPO,
                                           demo_configs()['segmenter']),
                           checkpoint=segmenter_checkpoint, out=out,
                           shape=EXPORT_HW, dynamic=True), **kwargs)
        with pytest.raises(ToolError, match=words):
            export_and_check(**kwargs)
    assert not osp.exists(out)
    # CBSA's 5x5 representatives need 5 tokens of 8 pixels per side
    with pytest.raises(ToolError, match='at least 40 pixels'):
        check_shapes(build_demo('cbsa'), [(32, 128)])
