"""The compatibility layer: what it patches, and that it leaves alone what
does not need patching."""
import ast
import importlib
import importlib.util
import os
import sys

import pytest
import torch

from mmseg_whitebox import compat


def test_apply_is_idempotent_and_reports_status():
    first = compat.apply()
    second = compat.apply()
    assert first == second == compat.STATUS
    assert set(first) == {'torchvision_shim', 'mmcv_ops_shim',
                          'weights_only_loader', 'no_unsafe_load_fallback',
                          'resume_replays_skipped_batches', 'stack'}


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


needs_mmcv_ops_standin = pytest.mark.skipif(
    not compat.STATUS.get('mmcv_ops_shim'),
    reason='compiled mmcv installed: stand-in not used')


@needs_mmcv_ops_standin
def test_mmcv_ops_standin_has_a_spec():
    import mmcv.ops
    spec = importlib.util.find_spec('mmcv.ops')  # raised ValueError before
    assert spec is not None and spec is mmcv.ops.__spec__
    assert spec.name == 'mmcv.ops'
    assert spec.loader is not None
    ops_dir = os.path.join(os.path.dirname(sys.modules['mmcv'].__file__),
                           'ops')
    assert spec.submodule_search_locations == [ops_dir]
    # submodules still resolve from mmcv's own ops folder
    sub = importlib.util.find_spec('mmcv.ops.point_sample')
    assert sub is not None and sub.origin.startswith(ops_dir)


def _names_imported_from_mmcv_ops(package_dir):
    names = set()
    for root, _, files in os.walk(package_dir):
        for fname in files:
            if not fname.endswith('.py'):
                continue
            with open(os.path.join(root, fname), encoding='utf-8') as f:
                tree = ast.parse(f.read())
            for node in ast.walk(tree):
                if isinstance(node, ast.ImportFrom) and \
                        node.module == 'mmcv.ops':
                    names.update(a.name for a in node.names)
    return names


@needs_mmcv_ops_standin
def test_mmcv_ops_standin_has_every_name_the_stack_imports():
    import mmcv
    import mmcv.ops
    import mmengine
    import mmseg
    used = set()
    for pkg_dir in (os.path.dirname(mmseg.__file__),
                    os.path.dirname(mmengine.__file__),
                    os.path.join(os.path.dirname(mmcv.__file__), 'cnn')):
        used |= _names_imported_from_mmcv_ops(pkg_dir)
    # what mmcv.utils.env asks for is only read when collecting env info
    used -= {'get_compiler_version', 'get_compiling_cuda_version'}
    assert {'DeformConv2d', 'ModulatedDeformConv2d', 'point_sample',
            'sigmoid_focal_loss'} <= used
    missing = sorted(n for n in used if not hasattr(mmcv.ops, n))
    assert not missing, f'stand-in mmcv.ops lacks {missing}'


@needs_mmcv_ops_standin
@pytest.mark.parametrize('name', sorted(compat.COMPILED_MMCV_CLASSES))
def test_mmcv_ops_standin_classes_import_and_fail_when_used(name):
    ops = importlib.import_module('mmcv.ops')
    cls = getattr(ops, name)
    assert name in ops.__all__
    assert isinstance(cls, type) and issubclass(cls, torch.nn.Module)
    assert cls.__name__ == name and cls.__module__ == 'mmcv.ops'
    # isinstance checks (mmengine's optimizer constructor) just say no
    assert not isinstance(torch.nn.Conv2d(1, 1, 1), cls)
    with pytest.raises(NotImplementedError,
                       match=f'mmcv.ops.{name} .*mmcv-lite.*install'):
        cls(4, 4, 3)

    class Sub(cls):  # subclassing works, building still fails

        def __init__(self):
            super().__init__(4, 4, 3)

    with pytest.raises(NotImplementedError, match='mmcv-lite'):
        Sub()


@needs_mmcv_ops_standin
def test_mmcv_ops_standin_dcn_names():
    from mmcv.ops import (DeformConv2d, DeformConv2dPack,
                          ModulatedDeformConv2d, ModulatedDeformConv2dPack,
                          deform_conv2d, modulated_deform_conv2d)
    # the class tree is mmcv's
    assert issubclass(DeformConv2dPack, DeformConv2d)
    assert issubclass(ModulatedDeformConv2dPack, ModulatedDeformConv2d)
    for fn in (deform_conv2d, modulated_deform_conv2d):
        with pytest.raises(NotImplementedError, match='mmcv-lite'):
            fn(torch.zeros(1, 1, 3, 3))


@needs_mmcv_ops_standin
@pytest.mark.parametrize('type_, cls_name', [
    ('DCN', 'DeformConv2dPack'), ('DCNv2', 'ModulatedDeformConv2dPack')])
def test_mmcv_ops_standin_dcn_configs_fail_clearly(type_, cls_name):
    import mmcv.ops
    from mmcv.cnn import build_conv_layer
    from mmengine.registry import MODELS as MMENGINE_MODELS
    from mmseg.registry import MODELS
    assert MMENGINE_MODELS.get(type_) is getattr(mmcv.ops, cls_name)
    assert MODELS.get(type_) is getattr(mmcv.ops, cls_name)
    # mmcv's builder (what mmseg's ResNet uses for dcn=...) ...
    with pytest.raises(NotImplementedError, match=f'{cls_name} .*mmcv-lite'):
        build_conv_layer(dict(type=type_, deform_groups=1), 8, 8, 3,
                         padding=1)
    # ... mmseg's registry ...
    with pytest.raises(NotImplementedError, match='mmcv-lite'):
        MODELS.build(dict(type=type_, in_channels=8, out_channels=8,
                          kernel_size=3))
    # ... and a config of mmseg's ResNet with DCN
    from mmseg.models.backbones.resnet import Bottleneck
    with pytest.raises(NotImplementedError, match='mmcv-lite'):
        Bottleneck(64, 16, dcn=dict(type=type_, deform_groups=1,
                                    fallback_on_stride=False))


@needs_mmcv_ops_standin
def test_mmcv_ops_standin_registration_keeps_real_entries():
    from mmengine.registry import Registry
    registry = Registry('standin-test')

    class Real(torch.nn.Module):
        pass

    registry.register_module(name='DCN', module=Real)
    compat._register_standin(registry, 'DCN',
                             compat._missing_op_class('X', torch.nn.Module))
    assert registry.get('DCN') is Real
    first = compat._missing_op_class('Y', torch.nn.Module)
    second = compat._missing_op_class('Y', torch.nn.Module)
    compat._register_standin(registry, 'Y', first)
    compat._register_standin(registry, 'Y', second)  # replaces a stand-in
    assert registry.get('Y') is second


def test_mmcv_ops_standin_skipped_with_compiled_mmcv(monkeypatch):
    monkeypatch.delitem(sys.modules, 'mmcv.ops', raising=False)
    monkeypatch.setattr(compat, 'mmcv_has_compiled_ops', lambda: True)
    assert compat.patch_mmcv_ops() is False
    assert 'mmcv.ops' not in sys.modules


def test_checkpoint_loader_is_weights_only():
    from mmengine.runner.checkpoint import CheckpointLoader
    loader = CheckpointLoader._get_checkpoint_loader('/some/local.pth')
    assert loader is compat.load_from_local_weights_only


class CountingDataset(torch.utils.data.Dataset):
    """Counts how often an item is loaded (the pipeline runs)."""

    def __init__(self):
        self.loads = 0

    def __len__(self):
        return 8

    def __getitem__(self, index):
        self.loads += 1
        return index


def test_resume_loads_the_skipped_batches():
    """Resuming iteration ``n`` runs the data pipeline for the ``n``
    skipped batches, as mmengine 0.10.7 does (so random transforms draw
    the same numbers as in an uninterrupted run)."""
    from mmengine.dataset import InfiniteSampler
    from mmengine.runner import loops
    dataset = CountingDataset()

    def iterator():  # a new sampler: a new run
        return loops._InfiniteDataloaderIterator(torch.utils.data.DataLoader(
            dataset, batch_size=2, sampler=InfiniteSampler(dataset, seed=0)))

    straight = iterator()
    expected = [next(straight).tolist() for _ in range(3)]
    dataset.loads = 0
    resumed = iterator()
    if hasattr(resumed, 'skip_iter'):
        assert compat.STATUS['resume_replays_skipped_batches'] is True
        resumed.skip_iter(2)
    else:  # mmengine 0.10.7: its loop calls next() for each skipped batch
        assert compat.STATUS['resume_replays_skipped_batches'] is False
        for _ in range(2):
            next(resumed)
    assert dataset.loads == 4
    assert next(resumed).tolist() == expected[2]
