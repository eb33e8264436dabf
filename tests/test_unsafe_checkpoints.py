"""A checkpoint whose unpickling runs code is refused by every checkpoint
loading path, on either OpenMMLab stack (onedl-mmengine's loaders retry a
refused weights-only load with full unpickling unless compat removes it),
and by every scheme of mmengine's CheckpointLoader: a URL's file in
torch's hub cache (which ``torch.hub.load_state_dict_from_url`` unpickles
fully by default) through ``init_cfg`` Pretrained, ``load_from`` and
tools/test.py's function, and the model-zoo, pavi and s3 schemes."""
import io

import numpy as np
import pytest
import torch
from mmengine.runner import checkpoint as mmengine_checkpoint
from PIL import Image

from mmseg_whitebox import compat
from mmseg_whitebox.compat import UnsafeCheckpointError
from mmseg_whitebox.utils.tool_error import BAD_INPUT, InputError

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


# --- every scheme of mmengine's CheckpointLoader, URLs above all ---------
#
# A URL's file is read from torch's hub cache
# ($TORCH_HOME/hub/checkpoints/<file name>) when it is there, without a
# download: the files below are planted there for URLs of a reserved,
# never-resolving domain, and name resolution is refused on top, so no
# test reaches the network.

URL = 'https://example.invalid/weights/{}'


@pytest.fixture
def lookups(monkeypatch):
    """The host names looked up; every lookup fails as it does offline."""
    import socket
    asked = []

    def offline(host, *args, **kwargs):
        asked.append(host)
        raise socket.gaierror(socket.EAI_NONAME, 'offline (test)')

    monkeypatch.setattr(socket, 'getaddrinfo', offline)
    return asked


@pytest.fixture
def hub(tmp_path, monkeypatch, lookups):
    """An empty torch hub cache (``$TORCH_HOME``) in ``tmp_path``'s
    ``torch/hub/checkpoints``, with no network (:func:`lookups`)."""
    monkeypatch.setenv('TORCH_HOME', str(tmp_path / 'torch'))
    assert torch.hub.get_dir() == str(tmp_path / 'torch' / 'hub')
    folder = tmp_path / 'torch' / 'hub' / 'checkpoints'
    folder.mkdir(parents=True)
    return folder


@pytest.fixture
def evil_url(hub, tmp_path):
    """``(URL, file its unpickling would create)``: the evil checkpoint
    planted where torch's hub cache keeps the URL's file."""
    marker = tmp_path / 'url_code_ran'
    write_evil_checkpoint(str(hub / 'evil_vit.pth'), str(marker))
    return URL.format('evil_vit.pth'), marker


def test_every_scheme_has_the_one_weights_only_loader():
    """Every prefix mmengine's CheckpointLoader knows (local files, http,
    https, torchvision, open-mmlab, mmcls, pavi, s3, ...) is loaded by
    compat's one weights-only loader."""
    schemes = mmengine_checkpoint.CheckpointLoader._schemes
    assert {'', 'http://', 'https://', 'torchvision://', 'modelzoo://',
            'open-mmlab://', 'openmmlab://', 'mmcls://',
            'pavi://'} <= set(schemes)
    assert {prefix: loader for prefix, loader in schemes.items()
            if loader is not compat.load_from_weights_only} == {}
    for path in ('/x.pth', 'https://a/b.pth', 'http://a/b.pth',
                 'torchvision://resnet50', 'open-mmlab://x', 's3://b/x.pth',
                 'pavi://x', 'mmcls://x'):
        assert mmengine_checkpoint.CheckpointLoader._get_checkpoint_loader(
            path) is compat.load_from_weights_only


def test_a_scheme_without_a_weights_only_loader_is_refused(monkeypatch):
    """A prefix the installed mmengine would add (none today) reaches the
    one loader too and is refused, never loaded by mmengine's own."""
    loader = mmengine_checkpoint.CheckpointLoader
    monkeypatch.setattr(loader, '_schemes', dict(
        {'newhub://': lambda *args: pytest.fail('mmengine loaded it')},
        **loader._schemes))
    compat.patch_checkpoint_loader()
    assert loader._get_checkpoint_loader('newhub://x') is \
        compat.load_from_weights_only
    with pytest.raises(InputError, match="no loader for the scheme "
                       "'newhub://'; download the file and give its local "
                       'path'):
        mmengine_checkpoint._load_checkpoint('newhub://x')


def test_a_cached_url_is_refused_not_run(evil_url):
    """``CheckpointLoader`` with a URL whose file is in the hub cache."""
    url, marker = evil_url
    with pytest.raises(UnsafeCheckpointError) as info:
        mmengine_checkpoint._load_checkpoint(url, map_location='cpu')
    assert not marker.exists()
    message = str(info.value)
    assert '\n' not in message
    assert message.startswith(f'Refusing to load {url} (')
    assert compat.WEIGHTS_ONLY_CONVERTER in message and '--trust' in message


def test_a_pretrained_init_cfg_url_is_refused_not_run(evil_url):
    """``init_cfg=dict(type='Pretrained', checkpoint=URL)``."""
    from mmengine.model import BaseModule
    url, marker = evil_url

    class Net(BaseModule):
        def __init__(self):
            super().__init__(init_cfg=dict(type='Pretrained',
                                           checkpoint=url))
            self.w = torch.nn.Linear(2, 2)

    with pytest.raises(UnsafeCheckpointError, match='--trust'):
        Net().init_weights()
    assert not marker.exists()


def demo_runner_config(tiny_ade, work_dir, **options):
    """The demo Segmenter's config for a Runner, on ``tiny_ade``."""
    import argparse
    from mmseg_whitebox.cli import add_cfg_options_arg
    from mmseg_whitebox.engine.runner_config import runner_config
    from _helpers import small_run_options
    parser = argparse.ArgumentParser()
    add_cfg_options_arg(parser)
    cfg_options = parser.parse_args(
        ['--cfg-options'] + small_run_options(tiny_ade, iters=2)).cfg_options
    cfg = runner_config(DEMO_SEGMENTER, cfg_options, str(work_dir))
    cfg.merge_from_dict(options)
    return cfg


def test_load_from_a_url_is_refused_not_run(evil_url, tiny_ade, tmp_path):
    """``load_from=URL``, loaded by the Runner."""
    from mmengine.runner import Runner
    url, marker = evil_url
    runner = Runner.from_cfg(demo_runner_config(
        tiny_ade, tmp_path / 'work', load_from=url))
    with pytest.raises(UnsafeCheckpointError, match='--trust'):
        runner.load_or_resume()
    assert not marker.exists()


def test_testing_a_url_is_refused_not_run(evil_url, tiny_ade, tmp_path):
    """``tools/test.py CONFIG URL`` (its package function)."""
    from mmseg_whitebox.apis import evaluate_checkpoint
    url, marker = evil_url
    with pytest.raises(UnsafeCheckpointError, match='--trust'):
        evaluate_checkpoint(demo_runner_config(tiny_ade, tmp_path / 'work'),
                            url)
    assert not marker.exists()


def test_a_weights_only_checkpoint_at_a_cached_url_loads(
        hub, lookups, weights, tiny_ade, tmp_path):
    """A genuine checkpoint reached by URL: tested (tools/test.py's
    function), loaded by ``load_from`` and by an init_cfg, from the cache
    and without a download."""
    import shutil
    from mmengine.runner import Runner
    from mmseg_whitebox.apis import evaluate_checkpoint
    shutil.copy(weights, hub / 'good_segmenter.pth')
    url = URL.format('good_segmenter.pth')
    metrics = evaluate_checkpoint(
        demo_runner_config(tiny_ade, tmp_path / 'test'), url)
    assert 0 <= metrics['mIoU'] <= 100
    runner = Runner.from_cfg(demo_runner_config(
        tiny_ade, tmp_path / 'load', load_from=url))
    runner.load_or_resume()
    expected = torch.load(weights, weights_only=True)['state_dict']
    for key, value in runner.model.state_dict().items():
        assert torch.equal(value, expected[key]), key
    loaded = mmengine_checkpoint._load_checkpoint(url, map_location='cpu')
    assert loaded['state_dict'].keys() == expected.keys()
    assert lookups == []


def unreachable_url(hub):
    """A URL whose file is not in the hub cache (and cannot be had)."""
    return URL.format('not_cached.pth')


def test_a_url_that_cannot_be_downloaded_is_one_line(hub, lookups, tiny_ade,
                                                     tmp_path):
    """tools/test.py CONFIG URL and load_from=URL in training: a failed
    download is a ToolError (one line, exit 2 from the tools) before the
    Runner is built, on every process; the loader says the same."""
    from mmseg_whitebox.apis import evaluate_checkpoint, train_model
    from mmseg_whitebox.utils.tool_error import ToolError
    url = unreachable_url(hub)
    cached = hub / 'not_cached.pth'
    for key, run in (
            ('checkpoint', lambda: evaluate_checkpoint(demo_runner_config(
                tiny_ade, tmp_path / 'test'), url)),
            ('load_from', lambda: train_model(demo_runner_config(
                tiny_ade, tmp_path / 'train', load_from=url))),
            ('checkpoint', lambda: mmengine_checkpoint._load_checkpoint(
                url, map_location='cpu'))):
        with pytest.raises(ToolError) as info:
            run()
        line = str(info.value)
        assert '\n' not in line, line
        assert line.startswith(f'{key}: could not download {url} ('), line
        assert f'put it at {cached}' in line
        assert not cached.exists()
    # the tools' functions stopped before building a Runner (its log
    # folder, WORK_DIR/<timestamp>/)
    for work_dir in ('test', 'train'):
        assert not list((tmp_path / work_dir).glob('*/')), work_dir
    assert set(lookups) == {'example.invalid'}


# the other schemes resolve a name to a URL (torchvision://, modelzoo://,
# open-mmlab://, mmcls://), a file in mmengine's home (open-mmlab://) or
# a download (pavi://, s3://): each is pointed at the evil file here
def _url_table(monkeypatch, function, name, url):
    monkeypatch.setattr(mmengine_checkpoint, function, lambda: {name: url})


def _fake_pavi(monkeypatch, path):
    import shutil
    import sys
    import types

    class Model:
        name = 'model.pth'

        def download(self, to):
            shutil.copy(path, to)

    pavi = types.ModuleType('pavi')
    pavi.modelcloud = types.SimpleNamespace(get=lambda name: Model())
    monkeypatch.setitem(sys.modules, 'pavi', pavi)


def _fake_s3(monkeypatch, path):
    from mmengine import fileio

    class Backend:
        def get(self, filename):
            return open(path, 'rb').read()

    for module in (fileio, mmengine_checkpoint):
        monkeypatch.setattr(module, 'get_file_backend',
                            lambda *args, **kwargs: Backend())


@pytest.mark.parametrize('scheme', [
    'torchvision://', 'modelzoo://', 'open-mmlab://', 'openmmlab://',
    'open-mmlab:home', 'mmcls://', 'pavi://', 's3://', 'petrel://'])
def test_every_scheme_refuses_the_payload(scheme, evil_url, hub, lookups,
                                          tmp_path, monkeypatch):
    url, marker = evil_url
    filename = f'{scheme}evil_vit'
    if scheme in ('torchvision://', 'modelzoo://'):
        _url_table(monkeypatch, 'get_torchvision_models', 'evil_vit', url)
    elif scheme in ('open-mmlab://', 'openmmlab://'):
        _url_table(monkeypatch, 'get_external_models', 'evil_vit', url)
    elif scheme == 'open-mmlab:home':  # a file in mmengine's home
        home = tmp_path / 'mmengine_home'
        home.mkdir()
        (hub / 'evil_vit.pth').rename(home / 'evil_vit.pth')
        monkeypatch.setattr(mmengine_checkpoint, '_get_mmengine_home',
                            lambda: str(home))
        _url_table(monkeypatch, 'get_external_models', 'evil_vit',
                   'evil_vit.pth')
        filename = 'open-mmlab://evil_vit'
    elif scheme == 'mmcls://':
        _url_table(monkeypatch, 'get_mmcls_models', 'evil_vit', url)
    elif scheme == 'pavi://':
        _fake_pavi(monkeypatch, hub / 'evil_vit.pth')
    else:
        _fake_s3(monkeypatch, hub / 'evil_vit.pth')
        filename = f'{scheme}bucket/evil_vit.pth'
    monkeypatch.setattr(mmengine_checkpoint, 'get_deprecated_model_names',
                        lambda: {})
    with pytest.raises(UnsafeCheckpointError, match='--trust'):
        mmengine_checkpoint._load_checkpoint(filename, map_location='cpu')
    assert not marker.exists()
    assert lookups == []
