"""The compatibility layer: what breaks without each fix on this stack
(the probes of ``_compat_probes.py`` in a fresh interpreter with no fix:
``mmseg_whitebox`` never imported) and that the same
probes succeed with it (this process, after ``import mmseg_whitebox``);
what it patches, and that it leaves alone what does not need patching."""
import ast
import importlib
import importlib.util
import json
import os
import subprocess
import sys

import pytest
import torch

import _compat_probes as probes
from mmseg_whitebox import compat
from mmseg_whitebox.compat import import_shims

#: the OpenMMLab stack of this environment ('default' or 'onedl')
STACK = compat.stack()['name']
#: torch.load's default became weights_only=True in torch 2.6
TORCH_LOADS_WEIGHTS_ONLY = tuple(
    int(v) for v in torch.__version__.split('+')[0].split('.')[:2]) >= (2, 6)
TORCHVISION_MISSING_OP = ('RuntimeError: operator torchvision::nms does not '
                          'exist')
NO_MMCV_EXT = "ModuleNotFoundError: No module named 'mmcv._ext'"


def _probe_files(folder) -> list:
    """Fresh evil checkpoints (one per unsafe probe, each with the file its
    payload would create), a project checkpoint and a torch home whose hub
    cache holds an evil file for a URL, as probe_all takes."""
    files = []
    for name in ('local', 'fallback'):
        path, marker = folder / f'{name}.pth', folder / f'{name}_ran'
        probes.write_evil_checkpoint(str(path), str(marker))
        files += [str(path), str(marker)]
    probes.write_project_checkpoint(str(folder / 'project.pth'))
    torch_home, url_marker = folder / 'torch', folder / 'url_ran'
    probes.write_evil_url_file(str(torch_home), str(url_marker))
    return files + [str(folder / 'project.pth'), str(torch_home),
                    str(url_marker)]


@pytest.fixture(scope='module')
def unfixed(tmp_path_factory):
    """The probes without any fix, in a fresh interpreter."""
    folder = tmp_path_factory.mktemp('unfixed')
    out = folder / 'report.json'
    env = dict(os.environ)
    env.pop('PYTHONPATH', None)
    proc = subprocess.run(
        [sys.executable, probes.__file__, str(out)] + _probe_files(folder),
        env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(out.read_text())
    # nothing of the package ran but the compat package the probe loads
    # itself, after the no-fix probes, and the utils it builds on (error
    # classes, atomic writes, the device names; under bare namespaces: no
    # other package __init__ ran)
    assert report['mmseg_whitebox modules'] == ['mmseg_whitebox'] + [
        f'mmseg_whitebox.compat{module}' for module in (
            '', '.argparse_errors', '.checkpoint_hook', '.checkpoints',
            '.compile', '.config_text', '.dataloader', '.devices',
            '.distributions', '.export_sizes', '.imagecorruptions',
            '.import_shims', '.model_index', '.modules', '.package_configs',
            '.resume')] + [
        'mmseg_whitebox.utils', 'mmseg_whitebox.utils.atomic',
        'mmseg_whitebox.utils.device', 'mmseg_whitebox.utils.tool_error']
    return report


@pytest.fixture(scope='module')
def fixed(tmp_path_factory):
    """The same probes here, where ``import mmseg_whitebox`` applied the
    fixes this stack needs."""
    return probes.probe_all(*_probe_files(tmp_path_factory.mktemp('fixed')))


def test_without_torchvision_shim_torchvision_and_mmseg_fail(unfixed, fixed):
    """Both stacks: the PyPI torchvision that pip pairs with CPU torch
    2.13 is built for CUDA; ``import torchvision``, ``timm`` and (through
    mmseg's timm wrapper, which only catches ImportError) ``mmseg.models``
    fail."""
    if unfixed['import torchvision'] == 'ok':
        assert compat.STATUS['torchvision_shim'] is False
        pytest.skip(f'{STACK} stack with a torchvision whose ops load here: '
                    'the shim is not applied')
    assert unfixed['import torchvision'] == TORCHVISION_MISSING_OP
    # mmseg.models with every other fix
    assert unfixed['import mmseg.models after mmcv_ops_shim'][
        'outcome'] == TORCHVISION_MISSING_OP
    assert compat.STATUS['torchvision_shim'] is True
    assert fixed['import torchvision'] == fixed['import mmseg.models'] == 'ok'
    assert unfixed['import mmseg.models after torchvision_shim'][
        'outcome'] == 'ok'


def test_without_mmcv_ops_standin_mmseg_fails(unfixed, fixed):
    """Default stack: with mmcv-lite, ``import mmcv.ops`` fails and
    mmsegmentation 1.2.2 imports it at module level, so ``import
    mmseg.models`` fails."""
    assert unfixed['import mmcv.ops'] == NO_MMCV_EXT
    if STACK == 'onedl':
        # the torchvision fix alone makes mmseg.models import
        assert unfixed['import mmseg.models after mmcv_ops_shim'][
            'applied'] is False
        assert unfixed['import mmseg.models after torchvision_shim'] == {
            'applied': True, 'outcome': 'ok'}
        assert compat.STATUS['mmcv_ops_shim'] is False
        pytest.skip('onedl stack: onedl-mmsegmentation guards its mmcv.ops '
                    'imports, mmseg.models imports without the stand-in '
                    '(not applied)')
    assert unfixed['import mmseg.models'] == NO_MMCV_EXT
    assert compat.STATUS['mmcv_ops_shim'] is True
    assert fixed['import mmcv.ops'] == fixed['import mmseg.models'] == 'ok'


def test_without_weights_only_loader_unsafe_checkpoints_load(unfixed, fixed):
    """onedl, and torch before 2.6 (the legacy stack's 2.1, whose
    ``torch.load`` unpickles by default): mmengine's local loader unpickles
    a refused checkpoint fully (the payload runs). Default stack: torch
    2.13's own weights-only default refuses it (an UnpicklingError that
    names no way out); the fix's refusal says how to convert a trusted
    file."""
    expected = ({'outcome': 'loaded', 'payload_ran': True}
                if STACK == 'onedl' or not TORCH_LOADS_WEIGHTS_ONLY else
                {'outcome': 'UnpicklingError', 'payload_ran': False})
    assert unfixed['local unsafe load'] == expected
    assert compat.STATUS['weights_only_loader'] is True
    assert fixed['local unsafe load'] == {'outcome': 'UnsafeCheckpointError',
                                          'payload_ran': False}


def test_without_weights_only_loader_cached_url_code_runs(unfixed, fixed):
    """Every stack: mmengine's ``http(s)://`` loader reads a URL's file from
    torch's hub cache with ``torch.hub.load_state_dict_from_url``, whose
    ``weights_only`` defaults to False (torch 2.1 and 2.13 alike), so a
    file planted there runs its code; the fix's one loader refuses it."""
    assert unfixed['cached url unsafe load'] == {'outcome': 'loaded',
                                                 'payload_ran': True}
    assert fixed['cached url unsafe load'] == {
        'outcome': 'UnsafeCheckpointError', 'payload_ran': False}


def test_without_weights_only_loader_resumed_state_is_lost(unfixed, fixed):
    """Both stacks: this project's checkpoints hold the training state as
    plain data; without the decoding loader a resumed run drops the
    message hub's logged scalars and gets numpy values as tagged dicts."""
    assert unfixed['project checkpoint'] == {
        'loss_loads_as': 'dict', 'best_score_loads_as': 'dict',
        'resumed_scalars': []}
    assert fixed['project checkpoint'] == {
        'loss_loads_as': 'HistoryBuffer', 'best_score_loads_as': 'float64',
        'resumed_scalars': ['train/loss']}


def test_without_no_unsafe_load_fallback_code_runs(unfixed, fixed):
    """onedl: ``_safe_torch_load`` (behind the fork's ``openmmlab://`` and
    ``pavi://`` loaders) retries a refused load with full unpickling."""
    if STACK != 'onedl':
        assert unfixed['fallback unsafe load'] == {'outcome': 'absent'}
        assert compat.STATUS['no_unsafe_load_fallback'] is False
        pytest.skip(f'{STACK} stack: mmengine {compat.stack().get("mmengine")}'
                    ' has no _safe_torch_load fallback (fix not applied)')
    assert unfixed['fallback unsafe load'] == {'outcome': 'loaded',
                                               'payload_ran': True}
    assert compat.STATUS['no_unsafe_load_fallback'] is True
    assert fixed['fallback unsafe load'] == {
        'outcome': 'UnsafeCheckpointError', 'payload_ran': False}


def test_without_resume_fix_trained_batches_are_loaded_or_run_differs(
        unfixed, fixed):
    """mmengine 0.10.7's ``--resume`` loads every trained batch again
    (4 items to skip 2 batches of 2); onedl-mmengine's skips them in the
    sampler but draws the data iterator's seed from torch's generator
    after the resume restored it, so the model's next random draw differs
    from the uninterrupted run's. With the fix: nothing loaded, the same
    batch and draw, on both."""
    if STACK == 'onedl':
        assert unfixed['resume'] == {'loads_while_skipping': 0,
                                     'same_batch': True,
                                     'same_model_draw': False}
    else:
        assert unfixed['resume'] == {'loads_while_skipping': 4,
                                     'same_batch': True,
                                     'same_model_draw': True}
    assert compat.STATUS['resume_skips_without_loading'] is True
    assert fixed['resume'] == {'loads_while_skipping': 0, 'same_batch': True,
                               'same_model_draw': True}


def test_apply_is_idempotent_and_reports_status():
    first = compat.apply()
    second = compat.apply()
    assert first == second == compat.STATUS
    assert set(first) == {'torchvision_shim', 'mmcv_ops_shim',
                          'weights_only_loader', 'no_unsafe_load_fallback',
                          'package_configs',
                          'resume_skips_without_loading', 'stack'}


def test_without_package_configs_mmseg_bases_fail(unfixed, fixed):
    """``_base_ = ['mmseg::...']``: mmengine 0.10.7 asks ``pkg_resources``
    (gone from setuptools 81+, there only on the legacy stack), the
    onedl fork's mmengine the distribution ``mmsegmentation`` (installed
    as ``onedl-mmsegmentation``); with the fix, mmseg's configs are found
    on every stack."""
    assert unfixed['package config'] in (
        'ok', "ModuleNotFoundError: No module named 'pkg_resources'",
        'ModuleNotFoundError: mmsegmentation is not installed, please '
        'install mmsegmentation manually')
    if STACK == 'onedl':
        assert unfixed['package config'] != 'ok'
    assert compat.STATUS['package_configs'] is True
    assert fixed['package config'] == 'ok'
    from mmengine.config import config as mmengine_config
    assert mmengine_config.is_installed('mmsegmentation')
    assert not mmengine_config.is_installed('mmagic')


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
    monkeypatch.setattr(import_shims.importlib.util, 'find_spec',
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
    """``importlib.util.find_spec('mmcv.ops')`` answers with the
    stand-in's spec (no ValueError for a spec-less module); submodules
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
    on import, the classes mmseg's own unit tests import, and nothing
    else."""
    import mmcv
    import mmengine
    import mmseg
    used = set()
    for pkg_dir in (os.path.dirname(mmseg.__file__),
                    os.path.dirname(mmengine.__file__),
                    os.path.join(os.path.dirname(mmcv.__file__), 'cnn')):
        used |= _names_imported_from_mmcv_ops(pkg_dir)
    assert used == {'point_sample', *compat.COMPILED_MMCV_FUNCTIONS,
                    *compat.COMPILED_MMCV_CLASSES}
    used |= set(compat.COMPILED_MMCV_TEST_CLASSES)
    ops = importlib.import_module('mmcv.ops')
    assert sorted(ops.__all__) == sorted(used)
    assert all(hasattr(ops, name) for name in used)


@needs_mmcv_ops_standin
@pytest.mark.parametrize('name', sorted(compat.COMPILED_MMCV_CLASSES +
                                         compat.COMPILED_MMCV_TEST_CLASSES))
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
            import_shims.importlib.util, 'find_spec',
            lambda name, *a: (object() if compiled_mmcv else None)
            if name == 'mmcv._ext' else find_spec(name, *a))
        # the name mmcv_ops_standin_needed reads, in its own module
        monkeypatch.setattr(
            import_shims, '_dist_version', lambda dist: '1.4.2' if onedl_mmseg
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
    for path in ('/some/local.pth', 'https://host/file.pth'):
        loader = CheckpointLoader._get_checkpoint_loader(path)
        assert loader is compat.load_from_weights_only


def test_an_old_torch_is_refused_at_import_with_what_to_do():
    """The import-time check of the supported torch range (mmseg 1.2.2's
    stack starts at torch 2.1): older releases are refused naming the
    found and the needed version; 2.1 and everything newer pass."""
    from mmseg_whitebox.version import MIN_TORCH, check_torch
    assert MIN_TORCH == (2, 1)
    for ok in ('2.1.2', '2.1.0+cu121', '2.13.0+cpu', '3.0.0a0', '10.0'):
        check_torch(ok)
    with pytest.raises(ImportError, match=r'needs torch >= 2\.1, found '
                       r'torch 2\.0\.1\+cu118: install torch >= 2\.1'):
        check_torch('2.0.1+cu118')
    with pytest.raises(ImportError, match='found torch 1.13.1'):
        check_torch('1.13.1')
