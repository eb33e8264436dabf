"""The opt-in startup hook (mmseg_whitebox.startup): installed, a fresh
interpreter can import timm, torchvision, mmseg's APIs and mmcv.ops in any
order, without importing mmseg_whitebox first; without it, such a script
fails, while mmseg's own tools/train.py needs no hook
(test_tools_e2e.py). Each case runs in a fresh interpreter (this one's
Python, this checkout's package) with the hook written into a temporary
site folder, never into the environment; the environment's own hook, if
any, is switched off."""
import os
import os.path as osp
import subprocess
import sys
import textwrap

import pytest

from _helpers import DEMO_SEGMENTER
from mmseg_whitebox import compat, startup

HEAVY = ('torch', 'torchvision', 'timm', 'mmcv', 'mmengine', 'mmseg',
         'mmseg_whitebox', 'numpy')
CHECKOUT = osp.dirname(startup.PACKAGE_DIR)


@pytest.fixture(scope='module')
def hook_site(tmp_path_factory) -> str:
    """A site folder holding the hook, as ``--install`` writes it."""
    site_dir = tmp_path_factory.mktemp('site')
    startup.install_hook(str(site_dir))
    return str(site_dir)


def run_python(code: str, cwd: str, hook_site: str = None,
               check: bool = True) -> subprocess.CompletedProcess:
    """``python -c CODE`` in a fresh interpreter, outside the checkout;
    with ``hook_site``, its ``.pth`` is processed first, as at start."""
    env = dict(os.environ, PYTHONUNBUFFERED='1', PYTHONPATH=CHECKOUT,
               **{startup.DISABLE_ENV: '0'})
    code = textwrap.dedent(code)
    if hook_site is not None:
        # on for this interpreter only (the environment's hook stays off)
        code = (f'import os, site; os.environ[{startup.DISABLE_ENV!r}] = '
                f"'1'; site.addsitedir({hook_site!r})\n" + code)
    proc = subprocess.run([sys.executable, '-c', code], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=300)
    if check:
        assert proc.returncode == 0, (
            f'{code}\nfailed ({proc.returncode}):\n{proc.stdout[-3000:]}\n'
            f'{proc.stderr[-5000:]}')
    return proc


def test_startup_imports_nothing_heavy(tmp_path, hook_site):
    proc = run_python(f"""
        import sys
        print(sorted(m for m in {HEAVY!r} if m in sys.modules))
        print('{startup.HOOK_MODULE}' in sys.modules)
        print(type(sys.meta_path[0]).__name__)
    """, str(tmp_path), hook_site)
    assert proc.stdout.split('\n')[:3] == ['[]', 'True', 'CompatFinder']
    assert proc.stderr == ''


ORDERS = {
    'timm': 'import timm',
    'mmseg.apis': 'from mmseg.apis import MMSegInferencer, init_model',
    'mmcv.ops': 'import mmcv.ops; from mmcv.ops import point_sample',
    'timm,torchvision,mmseg.apis':
        'import timm, torchvision; from mmseg.apis import MMSegInferencer',
    'mmseg.apis,timm': 'from mmseg.apis import MMSegInferencer; import timm',
    'package first': 'import mmseg_whitebox, timm, torchvision; '
                     'from mmseg.apis import MMSegInferencer',
}


@pytest.mark.parametrize('order', list(ORDERS))
def test_import_order(order, tmp_path, hook_site):
    """With the hook the imports work, and a later ``import
    mmseg_whitebox`` finds the hook's fixes in place (apply() is
    idempotent)."""
    if order == 'mmcv.ops' and not compat.STATUS['mmcv_ops_shim']:
        pytest.skip(f'{compat.STATUS["stack"]["name"]} stack: no mmcv.ops '
                    'stand-in here (onedl: the fork\'s mmseg does not need '
                    'one), so mmcv.ops is whatever mmcv installed')
    run_python(f"""
        {ORDERS[order]}
        import mmseg_whitebox
        from mmseg_whitebox import compat
        status = dict(compat.STATUS)
        assert compat.apply() == status == {compat.STATUS!r}, status
        from mmseg.registry import MODELS
        assert MODELS.get('CBSAHead') is not None
    """, str(tmp_path), hook_site)


def test_each_fix_only_where_needed(tmp_path, hook_site):
    """Importing torchvision applies the torchvision fix alone, from the
    compat module that the package later uses; nothing of mmseg is
    imported for it."""
    proc = run_python(f"""
        import torchvision, sys
        compat = sys.modules['mmseg_whitebox.compat']
        print(sorted(compat.STATUS), 'mmseg_whitebox' in sys.modules,
              'mmengine' in sys.modules, 'mmseg' in sys.modules)
        import mmseg_whitebox
        assert mmseg_whitebox.compat is compat
        print(compat.STATUS == {compat.STATUS!r})
    """, str(tmp_path), hook_site)
    assert proc.stdout.splitlines() == [
        "['torchvision_shim'] False False False", 'True']


#: what a script that imports these before mmseg_whitebox meets without
#: the hook, per stack
WITHOUT_THE_HOOK = {
    'import timm': {
        'default': 'RuntimeError: operator torchvision::nms does not exist',
        'onedl': 'RuntimeError: operator torchvision::nms does not exist'},
    'from mmseg.apis import init_model': {
        'default': "ModuleNotFoundError: No module named 'mmcv._ext'",
        'onedl': 'RuntimeError: operator torchvision::nms does not exist'},
}


@pytest.mark.parametrize('code', list(WITHOUT_THE_HOOK))
def test_without_the_hook_the_order_matters(code, tmp_path):
    """The case the hook is for: third-party imports before
    mmseg_whitebox, in an interpreter without the hook."""
    stack = compat.STATUS['stack']['name']
    if not compat.STATUS['torchvision_shim']:
        pytest.skip(f'{stack} stack with a torchvision whose ops load here')
    proc = run_python(code, str(tmp_path), check=False)
    assert proc.returncode != 0
    assert proc.stderr.strip().splitlines()[-1] == \
        WITHOUT_THE_HOOK[code][stack]


def test_mmseg_apis_inference_without_importing_the_package(
        hook_site, tiny_ade, tiny_checkpoint, tmp_path):
    """With the hook, init_model/inference_model imported first; the
    checkpoint loads weights-only (the hook's loader)."""
    folder = osp.join(tiny_ade, 'images', 'validation')
    image = osp.join(folder, sorted(os.listdir(folder))[0])
    run_python(f"""
        from mmseg.apis import inference_model, init_model
        model = init_model({DEMO_SEGMENTER!r},
                           {tiny_checkpoint(DEMO_SEGMENTER)!r}, device='cpu')
        result = inference_model(model, {image!r})
        assert result.pred_sem_seg.data.ndim == 3
        from mmengine.runner.checkpoint import CheckpointLoader
        from mmseg_whitebox.compat import load_from_local_weights_only
        assert CheckpointLoader._get_checkpoint_loader('/x.pth') is \\
            load_from_local_weights_only
    """, str(tmp_path), hook_site)


def test_install_status_and_uninstall(tmp_path):
    assert 'not installed' in startup.status(str(tmp_path))
    path = startup.install_hook(str(tmp_path))
    assert path == str(tmp_path / startup.PTH_NAME)
    text = (tmp_path / startup.PTH_NAME).read_text()
    here = osp.join(startup.PACKAGE_DIR, 'startup.py')
    assert startup.hook_target(path) == here
    assert '--uninstall' in text and '--status' in text
    # every line a .pth may hold: comments and one `import` line
    lines = [ln for ln in text.splitlines() if ln]
    assert all(ln.startswith(('#', 'import ')) for ln in lines)
    assert sum(ln.startswith('import ') for ln in lines) == 1
    # --status says for which checkout and what the hook does
    status = startup.status(str(tmp_path))
    assert f'installed for this checkout ({here})' in status
    for name, (fixes, _) in startup.TRIGGERS.items():
        line = next(ln for ln in status.splitlines()
                    if ln.split()[:1] == [name])
        assert all(fix in line for fix in fixes), line
    (tmp_path / 'other').mkdir()
    other = (tmp_path / 'other' / startup.PTH_NAME)
    other.write_text(text.replace(repr(here)[1:-1], '/elsewhere/startup.py'))
    assert startup.hook_target(str(other)) == '/elsewhere/startup.py'
    assert 'installed for another checkout' in startup.status(
        str(tmp_path / 'other'))
    # the line loads the hook in an interpreter started without it
    proc = run_python(f"""
        import sys
        print(type(sys.meta_path[0]).__name__,
              '{startup.HOOK_MODULE}' in sys.modules)
    """, str(tmp_path), str(tmp_path))
    assert proc.stdout.strip() == 'CompatFinder True'
    assert startup.uninstall_hook(str(tmp_path)) == path
    assert not (tmp_path / startup.PTH_NAME).exists()
    assert startup.uninstall_hook(str(tmp_path)) is None
    assert 'not installed' in startup.status(str(tmp_path))
