"""Import order never matters: with the startup hook that ``make install``
puts in the environment (mmseg_whitebox.startup), a fresh interpreter can
import timm, torchvision, mmseg's APIs and mmcv.ops in any order, and build
and train a Runner from a project config as mmseg's own tools/train.py
does, without importing mmseg_whitebox first. Each case runs in a fresh
interpreter (this one's Python)."""
import os
import os.path as osp
import subprocess
import sys
import textwrap

import pytest

from _helpers import DEMO_SEGMENTER, small_run_options
from mmseg_whitebox import compat, startup

HEAVY = ('torch', 'torchvision', 'timm', 'mmcv', 'mmengine', 'mmseg',
         'mmseg_whitebox', 'numpy')


@pytest.fixture(scope='module', autouse=True)
def hook_installed():
    path = osp.join(startup.site_packages(), startup.PTH_NAME)
    if not osp.isfile(path):
        pytest.fail(f'the startup hook is not installed ({path} is missing): '
                    'run `make install` or `python -m mmseg_whitebox.startup '
                    '--install`')
    with open(path, encoding='utf-8') as f:
        assert osp.join(startup.PACKAGE_DIR, 'startup.py') in f.read(), (
            f'{path} belongs to another checkout; reinstall it with '
            '`python -m mmseg_whitebox.startup --install`')


def run_python(code: str, cwd: str, check: bool = True,
               **env: str) -> subprocess.CompletedProcess:
    """``python -c CODE`` in a fresh interpreter, outside the checkout."""
    env = dict(os.environ, PYTHONUNBUFFERED='1', **env)
    env.pop('PYTHONPATH', None)
    proc = subprocess.run([sys.executable, '-c', textwrap.dedent(code)],
                          cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=300)
    if check:
        assert proc.returncode == 0, (
            f'{code}\nfailed ({proc.returncode}):\n{proc.stdout[-3000:]}\n'
            f'{proc.stderr[-5000:]}')
    return proc


def test_startup_imports_nothing_heavy(tmp_path):
    proc = run_python(f"""
        import sys
        print(sorted(m for m in {HEAVY!r} if m in sys.modules))
        print('{startup.HOOK_MODULE}' in sys.modules)
        print(type(sys.meta_path[0]).__name__)
    """, str(tmp_path))
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
def test_import_order(order, tmp_path):
    """The imports work, and a later ``import mmseg_whitebox`` finds the
    hook's fixes in place (apply() is idempotent)."""
    run_python(f"""
        {ORDERS[order]}
        import mmseg_whitebox
        from mmseg_whitebox import compat
        status = dict(compat.STATUS)
        assert compat.apply() == status == {compat.STATUS!r}, status
        from mmseg.registry import MODELS
        assert MODELS.get('CBSAHead') is not None
    """, str(tmp_path))


def test_each_fix_only_where_needed(tmp_path):
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
    """, str(tmp_path))
    expected = ("['torchvision_shim'] False False False"
                if compat.STATUS['torchvision_shim'] else None)
    lines = proc.stdout.splitlines()
    if expected:
        assert lines[0] == expected
    assert lines[-1] == 'True'


@pytest.mark.skipif(not compat.STATUS.get('torchvision_shim'),
                    reason='torchvision loads here without the fix')
def test_without_the_hook_the_order_matters(tmp_path):
    """What the hook fixes (switched off for one run)."""
    proc = run_python('import timm', str(tmp_path), check=False,
                      **{startup.DISABLE_ENV: '0'})
    assert proc.returncode != 0
    assert 'torchvision::nms does not exist' in proc.stderr


MMSEG_TRAIN = '''\
"""A user's training script in the style of mmseg's tools/train.py: mmengine
and mmseg imports first, the config names mmseg_whitebox in
custom_imports."""
import argparse
import os.path as osp

from mmengine.config import Config, DictAction
from mmengine.runner import Runner
from mmseg.registry import RUNNERS

parser = argparse.ArgumentParser()
parser.add_argument('config')
parser.add_argument('--work-dir')
parser.add_argument('--cfg-options', nargs='+', action=DictAction)
args = parser.parse_args()
cfg = Config.fromfile(args.config)
cfg.merge_from_dict(args.cfg_options)
cfg.work_dir = args.work_dir
runner = (RUNNERS.build(cfg) if 'runner_type' in cfg else
          Runner.from_cfg(cfg))
runner.train()
'''


@pytest.fixture(scope='module')
def mmseg_style_run(tiny_ade, tmp_path_factory):
    """Two training iterations by a script that imports mmengine and mmseg
    first, never mmseg_whitebox (the config does, through custom_imports)."""
    tmp = tmp_path_factory.mktemp('mmseg_train')
    (tmp / 'train.py').write_text(MMSEG_TRAIN)
    work_dir = tmp / 'work'
    env = dict(os.environ, PYTHONUNBUFFERED='1')
    env.pop('PYTHONPATH', None)
    proc = subprocess.run(
        [sys.executable, 'train.py', DEMO_SEGMENTER, '--work-dir',
         str(work_dir), '--cfg-options'] +
        small_run_options(tiny_ade, iters=2), cwd=str(tmp), env=env,
        capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    return dict(ckpt=str(work_dir / 'iter_2.pth'), data_root=tiny_ade,
                tmp=str(tmp), log=proc.stdout + proc.stderr)


def test_mmseg_style_training_script(mmseg_style_run):
    assert 'Iter(train) [2/2]' in mmseg_style_run['log']
    assert osp.isfile(mmseg_style_run['ckpt'])


def test_mmseg_apis_inference_without_importing_the_package(
        mmseg_style_run, tmp_path):
    """init_model/inference_model imported first; the checkpoint loads
    weights-only (the hook's loader, or the package's via the config)."""
    image = sorted(os.listdir(osp.join(
        mmseg_style_run['data_root'], 'images', 'validation')))[0]
    image = osp.join(mmseg_style_run['data_root'], 'images', 'validation',
                     image)
    run_python(f"""
        from mmseg.apis import inference_model, init_model
        model = init_model({DEMO_SEGMENTER!r}, {mmseg_style_run['ckpt']!r},
                           device='cpu')
        result = inference_model(model, {image!r})
        assert result.pred_sem_seg.data.ndim == 3
        from mmengine.runner.checkpoint import CheckpointLoader
        from mmseg_whitebox.compat import load_from_local_weights_only
        assert CheckpointLoader._get_checkpoint_loader('/x.pth') is \\
            load_from_local_weights_only
    """, str(tmp_path))


def test_install_and_uninstall(tmp_path):
    path = startup.install_hook(str(tmp_path))
    assert path == str(tmp_path / startup.PTH_NAME)
    text = (tmp_path / startup.PTH_NAME).read_text()
    assert osp.join(startup.PACKAGE_DIR, 'startup.py') in text
    assert '--uninstall' in text
    # every line a .pth may hold: comments and one `import` line
    lines = [ln for ln in text.splitlines() if ln]
    assert all(ln.startswith(('#', 'import ')) for ln in lines)
    assert sum(ln.startswith('import ') for ln in lines) == 1
    # the line loads the hook in an interpreter started without it
    # (the installed hook is switched off at start, then on for this one)
    proc = run_python(f"""
        import os, site, sys
        assert '{startup.HOOK_MODULE}' not in sys.modules
        os.environ['{startup.DISABLE_ENV}'] = '1'
        site.addsitedir({str(tmp_path)!r})
        print(type(sys.meta_path[0]).__name__,
              '{startup.HOOK_MODULE}' in sys.modules)
    """, str(tmp_path), **{startup.DISABLE_ENV: '0'})
    assert proc.stdout.strip() == 'CompatFinder True'
    assert startup.uninstall_hook(str(tmp_path)) == path
    assert not (tmp_path / startup.PTH_NAME).exists()
    assert startup.uninstall_hook(str(tmp_path)) is None
