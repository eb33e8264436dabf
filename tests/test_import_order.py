"""The import rule: a script that imports ``mmseg_whitebox`` first can then
import timm, torchvision and mmseg's APIs and use them; without it, such a
script fails in this environment (mmseg's own tools/train.py needs no
rule: the configs import the package, test_tools_e2e.py). Each case runs
in a fresh interpreter (this one's Python, this checkout's package)."""
import os
import os.path as osp
import subprocess
import sys
import textwrap

import pytest

from _helpers import DEMO_SEGMENTER, REPO
from mmseg_whitebox import compat


def run_python(code: str, cwd: str,
               check: bool = True) -> subprocess.CompletedProcess:
    """``python -c CODE`` in a fresh interpreter, outside the checkout."""
    env = dict(os.environ, PYTHONUNBUFFERED='1', PYTHONPATH=REPO)
    code = textwrap.dedent(code)
    proc = subprocess.run([sys.executable, '-c', code], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=300)
    if check:
        assert proc.returncode == 0, (
            f'{code}\nfailed ({proc.returncode}):\n{proc.stdout[-3000:]}\n'
            f'{proc.stderr[-5000:]}')
    return proc


def test_package_first_then_timm_torchvision_mmseg_apis(tmp_path):
    """The fixes ``import mmseg_whitebox`` applied are the ones this
    environment needs (as in this process), and a second apply() changes
    nothing."""
    run_python(f"""
        import mmseg_whitebox
        import timm, torchvision
        from mmseg.apis import MMSegInferencer
        from mmseg_whitebox import compat
        status = dict(compat.STATUS)
        assert compat.apply() == status == {compat.STATUS!r}, status
        from mmseg.registry import MODELS
        assert MODELS.get('CBSAHead') is not None
    """, str(tmp_path))


#: what a script that imports these before mmseg_whitebox meets, per stack
WITHOUT_THE_PACKAGE_FIRST = {
    'import timm': {
        'default': 'RuntimeError: operator torchvision::nms does not exist',
        'onedl': 'RuntimeError: operator torchvision::nms does not exist'},
    'from mmseg.apis import init_model': {
        'default': "ModuleNotFoundError: No module named 'mmcv._ext'",
        'onedl': 'RuntimeError: operator torchvision::nms does not exist'},
}


@pytest.mark.parametrize('code', list(WITHOUT_THE_PACKAGE_FIRST))
def test_without_the_package_first_the_order_matters(code, tmp_path):
    """Why the rule: third-party imports before mmseg_whitebox fail."""
    stack = compat.STATUS['stack']['name']
    if not compat.STATUS['torchvision_shim']:
        pytest.skip(f'{stack} stack with a torchvision whose ops load here')
    proc = run_python(code, str(tmp_path), check=False)
    assert proc.returncode != 0
    assert proc.stderr.strip().splitlines()[-1] == \
        WITHOUT_THE_PACKAGE_FIRST[code][stack]


def test_mmseg_apis_inference_after_importing_the_package(
        tiny_ade, tiny_checkpoint, tmp_path):
    """init_model/inference_model of mmseg.apis on this project's config and
    checkpoint; the checkpoint loads weights-only (the compat loader)."""
    folder = osp.join(tiny_ade, 'images', 'validation')
    image = osp.join(folder, sorted(os.listdir(folder))[0])
    run_python(f"""
        import mmseg_whitebox
        from mmseg.apis import inference_model, init_model
        model = init_model({DEMO_SEGMENTER!r},
                           {tiny_checkpoint(DEMO_SEGMENTER)!r}, device='cpu')
        result = inference_model(model, {image!r})
        assert result.pred_sem_seg.data.ndim == 3
        from mmengine.runner.checkpoint import CheckpointLoader
        from mmseg_whitebox.compat import load_from_weights_only
        assert CheckpointLoader._get_checkpoint_loader('/x.pth') is \\
            load_from_weights_only
    """, str(tmp_path))
