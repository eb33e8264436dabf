"""The pretrained weights every process finds itself before training
(``mmseg_whitebox.engine.pretrained``, its downloads in
``mmseg_whitebox.utils.downloads``): a local file that must exist, a
URL's file in torch's hub cache, downloaded there once, and the same
error line on every process when it cannot be had. The URLs are served
by a local HTTP server or refused by a closed local port: nothing here
depends on a network."""
import functools
import http.server
import os
import os.path as osp
import threading
import time

import pytest
import torch
from mmengine.config import Config

from _helpers import DEMO_SEGMENTER, REPO
from mmseg_whitebox.engine.pretrained import (fetch_pretrained_weights,
                                              pretrained_checkpoints)
from mmseg_whitebox.utils.distributed import free_port
from mmseg_whitebox.utils.downloads import FAILED_SUFFIX, hub_cache_path
from mmseg_whitebox.utils.tool_error import ToolError

WEIGHTS = 'vit_test_weights.pth'


@pytest.fixture
def hub(tmp_path, monkeypatch):
    """An empty torch hub cache for the test."""
    monkeypatch.setenv('TORCH_HOME', str(tmp_path / 'torch'))
    assert torch.hub.get_dir() == str(tmp_path / 'torch' / 'hub')
    return tmp_path / 'torch' / 'hub' / 'checkpoints'


@pytest.fixture
def server(tmp_path):
    """A local HTTP server of ``served/`` and the paths it was asked for."""
    served = tmp_path / 'served'
    served.mkdir()
    torch.save({'w': torch.arange(3.)}, served / WEIGHTS)
    asked = []

    class Handler(http.server.SimpleHTTPRequestHandler):
        def do_GET(self):
            asked.append(self.path)
            super().do_GET()

        def log_message(self, *args):
            pass

    httpd = http.server.ThreadingHTTPServer(
        ('127.0.0.1', 0), functools.partial(Handler, directory=str(served)))
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f'http://127.0.0.1:{httpd.server_address[1]}', asked
    httpd.shutdown()
    httpd.server_close()


def closed_port_url() -> str:
    return f'http://127.0.0.1:{free_port()}/{WEIGHTS}'


def model_cfg(**model) -> Config:
    return Config(dict(model=model))


def test_what_a_config_loads():
    """model.pretrained (mmseg's configs) and init_cfg checkpoints (the
    white-box encoders' converted files), with the key that sets them."""
    cfg = Config.fromfile(osp.join(
        REPO, 'configs', 'segmenter',
        'segmenter_vit-t_mask_8xb1-160k_ade20k-512x512.py'))
    assert pretrained_checkpoints(cfg) == [
        ('model.pretrained', cfg.model.pretrained)]
    cfg = model_cfg(pretrained=None, backbone=dict(init_cfg=dict(
        type='Pretrained', checkpoint='a.pth')), decode_head=dict(init_cfg=[
            dict(type='Normal'), dict(type='Pretrained_Part',
                                      checkpoint='b.pth')]))
    assert pretrained_checkpoints(cfg) == [
        ('model.backbone.init_cfg.checkpoint', 'a.pth'),
        ('model.decode_head.init_cfg.1.checkpoint', 'b.pth')]
    assert pretrained_checkpoints(Config.fromfile(DEMO_SEGMENTER)) == []


def test_a_missing_local_file_names_its_key(tmp_path):
    missing = str(tmp_path / 'nope.pth')
    cfg = model_cfg(backbone=dict(init_cfg=dict(type='Pretrained',
                                                checkpoint=missing)))
    with pytest.raises(ToolError) as error:
        fetch_pretrained_weights(cfg)
    for word in (f'model.backbone.init_cfg.checkpoint: pretrained weights '
                 f'{missing!r} do not exist', '--cfg-options model.backbone.'
                 'init_cfg.checkpoint=/path/to/weights.pth',
                 'model.backbone.init_cfg.checkpoint=None'):
        assert word in str(error.value)
    torch.save({}, missing)
    fetch_pretrained_weights(cfg)


def test_a_url_is_downloaded_once_into_the_hub_cache(hub, server):
    base, asked = server
    url = f'{base}/{WEIGHTS}'
    cached = hub_cache_path(url)
    assert cached == str(hub / WEIGHTS)
    fetch_pretrained_weights(model_cfg(pretrained=url))
    assert torch.load(cached, weights_only=True)['w'].tolist() == [0, 1, 2]
    fetch_pretrained_weights(model_cfg(pretrained=url))
    assert asked == [f'/{WEIGHTS}']
    assert sorted(os.listdir(hub)) in ([WEIGHTS], [WEIGHTS, WEIGHTS + '.lock'])


def test_a_cached_file_needs_no_network(hub):
    url = closed_port_url()
    hub.mkdir(parents=True)
    torch.save({}, hub / WEIGHTS)
    fetch_pretrained_weights(model_cfg(pretrained=url))


def test_a_url_that_cannot_be_had_is_one_line(hub):
    url = closed_port_url()
    with pytest.raises(ToolError) as error:
        fetch_pretrained_weights(model_cfg(pretrained=url))
    line = str(error.value)
    assert line.startswith('could not download the pretrained weights '
                           f'{url} (')
    assert f'put it at {hub / WEIGHTS}' in line and '\n' not in line
    assert not (hub / WEIGHTS).exists()
    with open(hub / (WEIGHTS + FAILED_SUFFIX)) as f:
        assert f.read() == line + '\n'


def test_a_failure_while_waiting_is_repeated(hub, server):
    """A process that waited for the lock while another one's download
    failed stops with that line, without asking the server; an older
    failure is retried."""
    base, asked = server
    url = f'{base}/{WEIGHTS}'
    hub.mkdir(parents=True)
    note = hub / (WEIGHTS + FAILED_SUFFIX)
    note.write_text('could not download it (on another process)\n')
    later = time.time() + 3600  # written after this process began to wait
    os.utime(note, (later, later))
    with pytest.raises(ToolError, match=r'^could not download it \(on '
                       r'another process\)$'):
        fetch_pretrained_weights(model_cfg(pretrained=url))
    assert asked == []
    earlier = time.time() - 3600  # a run before this one
    os.utime(note, (earlier, earlier))
    fetch_pretrained_weights(model_cfg(pretrained=url))
    assert asked == [f'/{WEIGHTS}']
    assert (hub / WEIGHTS).is_file() and not note.exists()
