"""A checkpoint whose unpickling runs code is refused by every checkpoint
loading path, on either OpenMMLab stack (onedl-mmengine's loaders retry a
refused weights-only load with full unpickling unless compat removes it)."""
import io

import numpy as np
import pytest
import torch
from mmengine.runner import checkpoint as mmengine_checkpoint
from PIL import Image

from mmseg_whitebox import compat
from mmseg_whitebox.compat import UnsafeCheckpointError
from mmseg_whitebox.utils.tool_error import BAD_INPUT

from _compat_probes import write_evil_checkpoint
from _helpers import DEMO_SEGMENTER, run_tool


@pytest.fixture
def evil(tmp_path):
    """``(checkpoint path, file its unpickling would create)``."""
    marker = tmp_path / 'code_ran'
    path = tmp_path / 'evil.pth'
    write_evil_checkpoint(str(path), str(marker))
    return path, marker


def test_the_payload_runs_when_fully_unpickled(evil):
    """What the refusals below prevent."""
    path, marker = evil
    torch.load(path, weights_only=False)
    assert marker.exists()


def load_path(path):
    return mmengine_checkpoint._load_checkpoint(str(path))


def load_into_model(path):
    return mmengine_checkpoint.load_checkpoint(torch.nn.Linear(2, 2),
                                               str(path))


def load_by_scheme(path):
    return mmengine_checkpoint.CheckpointLoader.load_checkpoint(str(path))


LOADERS = {'_load_checkpoint': load_path, 'load_checkpoint': load_into_model,
           'CheckpointLoader': load_by_scheme}


@pytest.mark.parametrize('loader', list(LOADERS))
def test_mmengine_loaders_refuse_the_payload(loader, evil):
    path, marker = evil
    with pytest.raises(UnsafeCheckpointError, match='--trust'):
        LOADERS[loader](path)
    assert not marker.exists()


@pytest.mark.parametrize('source', ['path', 'buffer'])
def test_no_fallback_to_full_unpickling(source, evil):
    """onedl-mmengine's ``_safe_torch_load`` (behind its s3, pavi and
    openmmlab loaders) refuses instead of retrying without weights_only."""
    if not hasattr(mmengine_checkpoint, '_safe_torch_load'):
        assert compat.STATUS['no_unsafe_load_fallback'] is False
        pytest.skip(f'{compat.stack()["name"]} stack: this mmengine has no '
                    'weights_only=False fallback (_safe_torch_load)')
    assert compat.STATUS['no_unsafe_load_fallback'] is True
    path, marker = evil
    file = str(path) if source == 'path' else io.BytesIO(path.read_bytes())
    with pytest.raises(UnsafeCheckpointError):
        mmengine_checkpoint._safe_torch_load(file, map_location='cpu')
    assert not marker.exists()


def test_a_tool_refuses_the_payload(evil, tmp_path):
    """tools/image_demo.py (mmseg's init_model) exits with bad input."""
    path, marker = evil
    image = tmp_path / 'image.png'
    Image.fromarray(np.zeros((32, 32, 3), np.uint8)).save(image)
    proc = run_tool(['tools/image_demo.py', str(image), DEMO_SEGMENTER,
                     str(path), '--out-file', str(tmp_path / 'out.png')],
                    check=False)
    assert proc.returncode == BAD_INPUT, proc.stderr[-2000:]
    assert 'Refusing to load' in proc.stderr
    assert not marker.exists()


def test_status_names_the_stack():
    status = compat.apply()
    stack = status['stack']
    assert stack['name'] in compat.STACKS
    mmseg_dist, mmengine_dist, mmcv_dists = compat.STACKS[stack['name']]
    import mmengine
    import mmseg
    assert stack[mmseg_dist] == mmseg.__version__
    assert stack[mmengine_dist] == mmengine.__version__
    assert any(dist in stack for dist in mmcv_dists)
    # the distribution's version (the package index's CUDA build of 2.1.2
    # has no local tag +cu121 there)
    assert stack['torch'].split('+')[0] == torch.__version__.split('+')[0]
