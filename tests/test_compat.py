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

#: the OpenMMLab stack of this environment ('default' or 'onedl')
STACK = compat.stack()['name']


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


needs_mmcv_ops_standin = pytest.mark.skipif(
    not compat.STATUS.get('mmcv_ops_shim'),
    reason=f'{STACK} stack: no mmcv.ops stand-in here (a compiled mmcv, or '
    'the onedl fork, whose mmseg guards its mmcv.ops imports)')


@needs_mmcv_ops_standin
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


@needs_mmcv_ops_standin
def test_mmcv_ops_standin_has_a_spec():
    """The startup hook hands this spec to the import system; submodules
    resolve from mmcv's own ops folder."""
    import mmcv.ops
    spec = importlib.util.find_spec('mmcv.ops')
    assert spec is not None and spec is mmcv.ops.__spec__
    assert spec.name == 'mmcv.ops'
    assert spec.loader is not None
    ops_dir = os.path.join(os.path.dirname(sys.modules['mmcv'].__file__),
                           'ops')
    assert spec.submodule_search_locations == [ops_dir]
    sub = importlib.util.find_spec('mmcv.ops.point_sample')
    assert sub is not None and sub.origin.startswith(ops_dir)


def _names_imported_from_mmcv_ops(package_dir):
    """Names imported from ``mmcv.ops`` when a module of ``package_dir`` is
    imported (module level, also inside ``try``/``if``); imports inside
    functions run only when called, and mmseg, mmengine and mmcv check for
    a compiled mmcv before them."""
    names = set()
    for root, _, files in os.walk(package_dir):
        for fname in files:
            if not fname.endswith('.py'):
                continue
            with open(os.path.join(root, fname), encoding='utf-8') as f:
                tree = ast.parse(f.read())
            todo = list(tree.body)
            while todo:
                node = todo.pop()
                if isinstance(node, ast.ImportFrom) and \
                        node.module == 'mmcv.ops':
                    names.update(a.name for a in node.names)
                elif not isinstance(node, (ast.FunctionDef,
                                           ast.AsyncFunctionDef)):
                    todo.extend(ast.iter_child_nodes(node))
    return names


@needs_mmcv_ops_standin
def test_mmcv_ops_standin_has_exactly_what_the_stack_imports():
    """Every name mmseg, mmengine and mmcv's bricks import from mmcv.ops
    on import, and nothing else."""
    import mmcv
    import mmengine
    import mmseg
    used = set()
    for pkg_dir in (os.path.dirname(mmseg.__file__),
                    os.path.dirname(mmengine.__file__),
                    os.path.join(os.path.dirname(mmcv.__file__), 'cnn')):
        used |= _names_imported_from_mmcv_ops(pkg_dir)
    assert used == {'point_sample', *compat.COMPILED_MMCV_OPS}
    ops = importlib.import_module('mmcv.ops')
    assert sorted(ops.__all__) == sorted(used)
    assert all(hasattr(ops, name) for name in used)


@needs_mmcv_ops_standin
@pytest.mark.parametrize('name', sorted(compat.COMPILED_MMCV_CLASSES))
def test_mmcv_ops_standin_classes_import_and_fail_when_used(name):
    ops = importlib.import_module('mmcv.ops')
    cls = getattr(ops, name)
    assert isinstance(cls, type) and issubclass(cls, torch.nn.Module)
    assert cls.__name__ == name and cls.__module__ == 'mmcv.ops'
    assert not isinstance(torch.nn.Conv2d(1, 1, 1), cls)
    with pytest.raises(NotImplementedError,
                       match=f'mmcv.ops.{name} .*mmcv-lite.*install'):
        cls(4)

    class Sub(cls):  # subclassing works, building still fails

        def __init__(self):
            super().__init__(4)

    with pytest.raises(NotImplementedError, match='mmcv-lite'):
        Sub()


def test_mmcv_ops_standin_only_where_mmseg_needs_it(monkeypatch):
    """Not with a compiled mmcv, nor with the onedl fork's mmseg; then
    patch_mmcv_ops leaves mmcv.ops alone."""
    find_spec = importlib.util.find_spec

    def environment(compiled_mmcv, onedl_mmseg):
        monkeypatch.setattr(
            compat.importlib.util, 'find_spec',
            lambda name, *a: (object() if compiled_mmcv else None)
            if name == 'mmcv._ext' else find_spec(name, *a))
        monkeypatch.setattr(
            compat, '_dist_version', lambda dist: '1.4.2' if onedl_mmseg
            and dist == 'onedl-mmsegmentation' else None)
        return compat.mmcv_ops_standin_needed()

    assert environment(compiled_mmcv=False, onedl_mmseg=False) is True
    assert environment(compiled_mmcv=True, onedl_mmseg=False) is False
    assert environment(compiled_mmcv=False, onedl_mmseg=True) is False
    monkeypatch.delitem(sys.modules, 'mmcv.ops', raising=False)
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
