"""The wheel works on its own: built from the sdist as a package index
would, installed into a fresh venv outside the checkout, it resolves a
model by name, predicts, and runs its tools.

The venv has no pip and no packages of its own: a ``.pth`` file adds this
environment's site-packages for the dependencies (without running their
``.pth`` files, so an editable install of the checkout stays inactive) and
this environment's pip installs only the wheel, into the venv. Every
command runs from a temporary folder with ``PYTHONPATH`` unset, and the
venv checks that it imports the package from itself, never the checkout.
"""
import glob
import json
import os
import os.path as osp
import subprocess
import sys
import sysconfig
import tarfile
import textwrap
import zipfile

import pytest

from _helpers import REPO

from mmseg_whitebox.commands import COMMANDS

MODEL = 'cbsa_vit-demo_1xb8-800iter_synthade-128x128'
IMAGE_HW = (96, 112)
RESOURCE_DIRS = ('configs', 'tools')


def run(cmd, cwd, timeout=300) -> subprocess.CompletedProcess:
    """Run ``cmd`` without this checkout on the path; fail with its output."""
    env = {k: v for k, v in os.environ.items()
           if k not in ('PYTHONPATH', 'PYTHONHOME', 'PYTHONSTARTUP')}
    env.update(PYTHONNOUSERSITE='1', PYTHONUNBUFFERED='1')
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=timeout)
    assert proc.returncode == 0, (
        f'{" ".join(map(str, cmd))} failed ({proc.returncode}):\n'
        f'{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}')
    return proc


def dependency_dirs() -> list:
    """This environment's site-packages folders (where the dependencies
    are; a venv inside the checkout, as ``make test`` makes, included),
    never the checkout's source folders: only ``site-packages`` and
    ``dist-packages`` folders are taken, and the ``.pth`` files in them
    (the editable install) are not run from a ``.pth`` line."""
    dirs = {sysconfig.get_paths()[key] for key in ('purelib', 'platlib')}
    dirs.update(p for p in sys.path
                if osp.basename(p) in ('site-packages', 'dist-packages'))
    return sorted(d for d in dirs if osp.isdir(d)
                  and osp.basename(d) in ('site-packages', 'dist-packages'))


@pytest.fixture(scope='module')
def dist(tmp_path_factory) -> dict:
    """The sdist (built from the checkout) and the wheel built from it."""
    out = tmp_path_factory.mktemp('dist')
    run([sys.executable, '-c',
         'import sys, setuptools.build_meta as b; b.build_sdist(sys.argv[1])',
         str(out)], cwd=REPO)
    sdist, = glob.glob(str(out / '*.tar.gz'))
    run([sys.executable, '-m', 'pip', 'wheel', '--no-deps', '--no-index',
         '--no-build-isolation', '--no-cache-dir', '-w', str(out), sdist],
        cwd=str(out))
    wheel, = glob.glob(str(out / '*.whl'))
    return dict(sdist=sdist, wheel=wheel)


@pytest.fixture(scope='module')
def venv(dist, tmp_path_factory) -> str:
    """A fresh venv (outside the checkout) with only the wheel installed."""
    prefix = str(tmp_path_factory.mktemp('venv'))
    run([sys.executable, '-m', 'venv', '--without-pip', prefix], cwd=prefix)
    python = osp.join(prefix, 'bin', 'python')
    purelib = run([python, '-c', 'import sysconfig; '
                   'print(sysconfig.get_paths()["purelib"])'],
                  cwd=prefix).stdout.strip()
    with open(osp.join(purelib, 'dependencies.pth'), 'w') as f:
        f.write(''.join(d + '\n' for d in dependency_dirs()))
    # --ignore-installed: this environment's own mmseg-whitebox (e.g. the
    # checkout's editable install) is visible through the .pth file
    run([python, '-m', 'pip', 'install', '--no-deps', '--no-index',
         '--ignore-installed', '--no-cache-dir', dist['wheel']], cwd=prefix)
    return prefix


@pytest.fixture(scope='module')
def random_checkpoint(tmp_path_factory) -> str:
    """Random weights of the demo CBSA model, as init_model reads them."""
    import torch
    from mmseg.apis import init_model
    torch.manual_seed(0)
    model = init_model(osp.join(REPO, 'configs', 'cbsa', MODEL + '.py'),
                       device='cpu')
    path = str(tmp_path_factory.mktemp('ckpt') / 'random.pth')
    torch.save({'state_dict': model.state_dict(), 'meta': {}}, path)
    return path


def test_config_path_resolves_names_in_the_checkout():
    """What the installed wheel resolves in its .mim folder, the checkout
    resolves in its own configs/ (an editable install: no copy)."""
    from mmseg_whitebox.apis import config_path, resources_root
    from mmseg_whitebox.engine.config import read_config
    from mmseg_whitebox.utils.tool_error import ToolError
    assert osp.samefile(resources_root(), REPO)
    config = osp.join(REPO, 'configs', 'cbsa', MODEL + '.py')
    alias = 'mmseg_whitebox:segmenter_vit-t_mask_8xb1-160k_ade20k-512x512'
    for name, path in [
            (MODEL, config), (MODEL + '.py', config),
            (f'cbsa/{MODEL}.py', config), (f'configs/cbsa/{MODEL}', config),
            (f'mmseg_whitebox::cbsa/{MODEL}.py', config),
            (alias, osp.join(REPO, 'configs', 'segmenter',
                             alias.split(':')[1] + '.py')),
            ('_base_/models/vit-demo.py',
             osp.join(REPO, 'configs', '_base_', 'models', 'vit-demo.py'))]:
        assert osp.samefile(config_path(name), path), name
    with pytest.raises(FileNotFoundError, match=f'close: {MODEL}'):
        config_path(MODEL.rsplit('-', 1)[0])
    with pytest.raises(FileNotFoundError):
        config_path('default_runtime')  # a base config is no model
    # the tools take a name wherever they take a config file
    assert read_config(MODEL).filename == config
    with pytest.raises(ToolError, match='does not exist'):
        read_config('configs/nope.py')


def resource_files(root: str) -> list:
    """``configs/`` and ``tools/`` files under ``root``, as the build copies
    them (no bytecode, no dot files)."""
    files = []
    for name in RESOURCE_DIRS:
        for folder, dirs, names in os.walk(osp.join(root, name)):
            dirs[:] = [d for d in dirs
                       if d != '__pycache__' and not d.startswith('.')]
            files += [osp.relpath(osp.join(folder, n), root) for n in names
                      if not n.endswith(('.pyc', '.pyo'))
                      and not n.startswith('.')]
    return sorted(files)


def test_wheel_carries_configs_tools_and_commands(dist):
    with zipfile.ZipFile(dist['wheel']) as wheel:
        names = wheel.namelist()
        mim = 'mmseg_whitebox/.mim/'
        index_file = mim + 'model-index.yml'
        packaged = sorted(n[len(mim):] for n in names
                          if n.startswith(mim) and n != index_file)
        assert packaged == resource_files(REPO)
        index = wheel.read(index_file).decode()
        entry_points = wheel.read(next(
            n for n in names if n.endswith('.dist-info/entry_points.txt')
        )).decode()
        metadata = wheel.read(next(
            n for n in names if n.endswith('.dist-info/METADATA'))).decode()
        licenses = [wheel.read(n).decode() for n in names
                    if n.endswith('.dist-info/licenses/LICENSE')]
    metafiles = sorted(osp.relpath(p, REPO) for p in glob.glob(
        osp.join(REPO, 'configs', '*', 'metafile.yaml')))
    assert index.split() == ['Import:'] + [
        w for m in metafiles for w in ('-', m)]
    scripts = sorted(line.split(' = ')[0] for line in entry_points.splitlines()
                     if line.startswith('mmseg-whitebox-'))
    assert scripts == sorted(f'mmseg-whitebox-{c}' for c in COMMANDS)
    # the license the metadata names, and its text (pyproject.toml)
    assert 'License-Expression: Apache-2.0' in metadata.splitlines()
    with open(osp.join(REPO, 'LICENSE')) as f:
        assert licenses == [f.read()]
    # the sdist carries the folders the wheel copies (a wheel built from it
    # is the one above) and no copy of them inside the package
    with tarfile.open(dist['sdist']) as sdist:
        members = [m.split('/', 1)[1] for m in sdist.getnames() if '/' in m]
    assert set(resource_files(REPO)) <= set(members)
    assert {'LICENSE', 'CHANGELOG.md'} <= set(members)
    assert not [m for m in members if m.startswith('mmseg_whitebox/.mim')]


PREDICT = textwrap.dedent('''
    import importlib.util, os.path as osp, sys
    prefix, repo, ckpt, model_name = sys.argv[1:]
    # the package comes from the venv; the checkout's sources are nowhere
    # on the path (a venv inside it may lend its site-packages)
    package_dir, = importlib.util.find_spec(
        'mmseg_whitebox').submodule_search_locations
    assert package_dir.startswith(prefix), package_dir
    assert not any(osp.realpath(p or '.').startswith(osp.realpath(repo))
                   and osp.basename(p) not in ('site-packages',
                                               'dist-packages')
                   for p in sys.path), sys.path

    # custom_imports of a packaged config import and register the package
    from mmengine.config import Config
    config = osp.join(package_dir, '.mim', 'configs', 'cbsa',
                      model_name + '.py')
    assert 'mmseg_whitebox' not in sys.modules
    cfg = Config.fromfile(config)
    assert 'mmseg_whitebox' in sys.modules
    import mmseg_whitebox
    from mmseg.registry import MODELS
    assert MODELS.get(cfg.model.decode_head.type) is not None
    assert mmseg_whitebox.__file__.startswith(prefix)

    import numpy as np
    from mmseg.apis import MMSegInferencer, inference_model, init_model
    from mmseg_whitebox.apis import config_path
    for name in (model_name, model_name + '.py', f'cbsa/{model_name}.py'):
        assert osp.samefile(config_path(name), config), name
    image = np.random.default_rng(0).integers(
        0, 256, (96, 112, 3), dtype=np.uint8)
    inferencer = MMSegInferencer(model=model_name, weights=ckpt,
                                 device='cpu')
    assert osp.samefile(inferencer.cfg.filename, config)
    by_name = inferencer(image)['predictions']
    model = init_model(config_path(model_name), ckpt, device='cpu')
    by_path = inference_model(model, image).pred_sem_seg.data[0].numpy()
    assert by_name.shape == (96, 112), by_name.shape
    assert (by_name == by_path).all()
    print('resolved', model_name, '->', config)
    print('predicted', by_name.shape, 'classes', np.unique(by_name).tolist())
''')


def test_installed_wheel_resolves_a_name_and_predicts(venv, random_checkpoint,
                                                      tmp_path):
    script = tmp_path / 'predict.py'
    script.write_text(PREDICT)
    proc = run([osp.join(venv, 'bin', 'python'), str(script), venv, REPO,
                random_checkpoint, MODEL], cwd=str(tmp_path))
    assert f'resolved {MODEL} -> {venv}' in proc.stdout
    assert f'predicted {IMAGE_HW}' in proc.stdout


HELP_OF_EVERY_COMMAND = textwrap.dedent('''
    import contextlib, io
    from mmseg_whitebox.commands import COMMANDS, run_command
    for command, script in COMMANDS.items():
        out = io.StringIO()
        try:
            with contextlib.redirect_stdout(out):
                run_command(command, ['--help'])
        except SystemExit as exit:
            assert exit.code == 0, (command, exit.code)
        usage = out.getvalue().splitlines()[0]
        assert usage.startswith('usage: ' + script.split('/')[-1]), usage
        print('help', command)
''')


@pytest.mark.slow
def test_installed_commands_run_the_packaged_tools(venv, random_checkpoint,
                                                   tmp_path):
    python = osp.join(venv, 'bin', 'python')
    proc = run([python, '-c', HELP_OF_EVERY_COMMAND], cwd=str(tmp_path))
    assert proc.stdout.split() == [w for c in COMMANDS for w in ('help', c)]

    # real runs: `python -m` makes tiny data, the console script tests the
    # model named by its config name on it
    run([python, '-m', 'mmseg_whitebox', 'synthetic-ade20k', '--data-root',
         'data', '--num-train', '2', '--num-val', '2', '--shape', '64', '80'],
        cwd=str(tmp_path))
    data_root = 'data/ADEChallengeData2016'
    run([osp.join(venv, 'bin', 'mmseg-whitebox-test'), MODEL,
         random_checkpoint, '--work-dir', 'work', '--cfg-options',
         f'test_dataloader.dataset.data_root={data_root}',
         'test_dataloader.num_workers=0',
         'test_dataloader.persistent_workers=False'], cwd=str(tmp_path))
    logs = glob.glob(str(tmp_path / 'work' / '*' / '*.json'))
    assert len(logs) == 1, logs
    with open(logs[0]) as f:
        metrics = json.loads(f.read().splitlines()[-1])
    assert 0 <= metrics['mIoU'] <= 100
