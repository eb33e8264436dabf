"""The compatibility layer: what it patches, and that it leaves alone what
does not need patching."""
import importlib
import sys

import pytest
import torch

from mmseg_whitebox import compat


def test_apply_is_idempotent_and_reports_status():
    first = compat.apply()
    second = compat.apply()
    assert first == second == compat.STATUS
    assert set(first) == {'torchvision_shim', 'mmcv_ops_shim',
                          'weights_only_loader'}


def test_mmseg_and_timm_import_after_compat():
    import mmseg.apis  # noqa: F401
    import mmseg.models  # noqa: F401
    import timm  # noqa: F401
    import torchvision  # noqa: F401
    from mmseg.registry import MODELS
    assert MODELS.get('SegmenterMaskTransformerHead') is not None


@pytest.mark.skipif(not compat.STATUS.get('torchvision_shim'),
                    reason='torchvision ops load here: shim not needed')
def test_torchvision_shim_ops_raise_clear_error():
    import torchvision
    boxes, scores = torch.tensor([[0., 0., 1., 1.]]), torch.tensor([1.])
    # torchvision's own check fires first and says what is wrong ...
    with pytest.raises(RuntimeError, match="Couldn't load custom C\\+\\+ ops"):
        torchvision.ops.nms(boxes, scores, 0.5)
    # ... and a direct call of the declared op explains itself too
    with pytest.raises(NotImplementedError, match='built for CUDA'):
        torch.ops.torchvision.nms(boxes, scores, 0.5)


def test_torchvision_shim_not_needed_without_torchvision(monkeypatch):
    monkeypatch.delitem(sys.modules, 'torchvision', raising=False)
    monkeypatch.setattr(compat.importlib.util, 'find_spec',
                        lambda name: None)
    assert compat.torchvision_needs_shim() is False


def test_torchvision_shim_not_needed_once_imported():
    import torchvision  # noqa: F401
    assert compat.torchvision_needs_shim() is False


@pytest.mark.skipif(not compat.STATUS.get('mmcv_ops_shim'),
                    reason='compiled mmcv installed: stand-in not used')
def test_mmcv_ops_standin_with_mmcv_lite():
    import mmcv.ops
    assert getattr(mmcv.ops, '__mmseg_whitebox_shim__', False)
    # the pure-PyTorch op works
    feats = torch.arange(16.).reshape(1, 1, 4, 4)
    pts = torch.tensor([[[0.5, 0.5]]])
    out = mmcv.ops.point_sample(feats, pts, align_corners=False)
    assert out.shape == (1, 1, 1)
    # compiled ops fail with a message that says what to install
    with pytest.raises(NotImplementedError, match='mmcv-lite'):
        mmcv.ops.sigmoid_focal_loss(torch.zeros(1, 2), torch.zeros(1))
    # and mmseg modules that import them at module level still import
    importlib.import_module('mmseg.models.losses.focal_loss')
    importlib.import_module('mmseg.models.decode_heads.point_head')


def test_mmcv_ops_standin_skipped_with_compiled_mmcv(monkeypatch):
    monkeypatch.delitem(sys.modules, 'mmcv.ops', raising=False)
    monkeypatch.setattr(compat, 'mmcv_has_compiled_ops', lambda: True)
    assert compat.patch_mmcv_ops() is False
    assert 'mmcv.ops' not in sys.modules


def test_checkpoint_loader_is_weights_only():
    from mmengine.runner.checkpoint import CheckpointLoader
    loader = CheckpointLoader._get_checkpoint_loader('/some/local.pth')
    assert loader is compat.load_from_local_weights_only
