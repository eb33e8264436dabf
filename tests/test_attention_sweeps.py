"""The noise sweep over mmseg's own configs, inherited and shrunk
(tests/_mmseg_families.py): every attention module found, removed and
measured once per image, decoder sweeps equal with and without the shared
encoder, a user's attention registered through ``custom_imports``, the
tool on Swin and DeepLabV3, and a 2-process sweep equal to one process."""
import json
import os
import os.path as osp
import subprocess
import sys

import pytest
import torch
from mmengine.config import Config
from mmengine.registry import init_default_scope

from mmseg_whitebox.robustness import NoiseSweepOptions, run_noise_sweep
from mmseg_whitebox.utils.tool_error import InputError

from _helpers import REPO, run_tool
from _mmseg_families import FAMILIES
from test_attention_registry import (attention_modules, build,
                                     family_config, family_data,  # noqa
                                     quiet_init_log)  # noqa: F401


def save_random_weights(name, folder, data_root) -> str:
    model = build(name, folder, data_root)
    path = osp.join(str(folder), f'{name}.pth')
    torch.save(dict(state_dict=model.state_dict()), path)
    return path


@pytest.mark.slow
@pytest.mark.parametrize('name', list(FAMILIES))
def test_sweep_over_mmseg_configs(name, family_data, tmp_path):
    """``--sigmas 0 0.1 --draws 1`` on each family's attention target:
    every attention module a site, its removal recorded, usage counted
    once per validation image (2) at every site."""
    family = FAMILIES[name]
    ckpt = save_random_weights(name, tmp_path, family_data)
    config = family_config(name, family_data, tmp_path)
    options = NoiseSweepOptions(
        sigmas=[0.0, 0.1], draws=1, target=family['target'],
        out=str(tmp_path / 'out'), work_dir=str(tmp_path / 'work'),
        progress=False)
    if not family['classes']:
        with pytest.raises(InputError, match='the decode head has no '
                           'attention layers'):
            run_noise_sweep(config, ckpt, options, log=lambda *a: None)
        return
    messages = []
    data = run_noise_sweep(config, ckpt, options, log=messages.append)
    expected = len(attention_modules(build(name, tmp_path), family))
    usage = data['attention_usage']
    assert len(usage) == expected
    assert all(row['images'] == 2 for row in usage), usage
    (ablation, ) = data['ablation'].values()
    assert len(ablation['sites']) == expected
    assert [p['sigma'] for p in data['points']] == [0.0, 0.1]
    assert data['points'][0]['mIoU_mean'] == data['clean']['mIoU']
    if family['target'] == 'decoder-attention' and name != 'knet':
        # the decoder's noise settings share one encoder pass: the same
        # figures as one setting at a time (mmcv's MHA: Segmenter's)
        assert any('shared-encoder sweep' in m for m in messages), messages
        options.out, options.shared_encoder = str(tmp_path / 'one'), False
        one = run_noise_sweep(config, ckpt, options, log=lambda *a: None)
        assert one['points'] == data['points']


def test_sweep_tool_on_swin_and_deeplab(family_data, tmp_path):
    """Through tools/noise_robustness.py: Swin's encoder attention swept
    (exit 0), DeepLabV3's decoder attention refused (exit 2, one line
    naming the part)."""
    out = {}
    for name, code in (('swin', 0), ('deeplabv3', 2)):
        ckpt = save_random_weights(name, tmp_path, family_data)
        config = family_config(name, family_data, tmp_path)
        result = run_tool(['tools/noise_robustness.py', config, ckpt,
                           '--sigmas', '0', '0.1', '--draws', '1',
                           '--target', FAMILIES[name]['target'],
                           '--out', str(tmp_path / name),
                           '--work-dir', str(tmp_path / f'w-{name}')],
                          check=False)
        out[name] = result.stdout + result.stderr
        assert result.returncode == code, out[name][-3000:]
    assert 'encoder-attention: its 8 attention sites removed' in out['swin']
    with open(tmp_path / 'swin' / 'results.json') as f:
        assert len(json.load(f)['attention_usage']) == 8
    (line, ) = [ln for ln in out['deeplabv3'].splitlines()
                if 'error:' in ln]
    assert 'the decode head has no attention layers' in line


TOY_ATTENTION = """
import torch
import torch.nn as nn
from mmseg.models.decode_heads.fcn_head import FCNHead
from mmseg.registry import MODELS

from mmseg_whitebox.models import register_attention


@register_attention('inside')
class ToyAttention(nn.Module):
    def __init__(self, channels):
        super().__init__()
        self.qk = nn.Conv2d(channels, 2 * channels, 1)
        self.out = nn.Conv2d(channels, channels, 1)

    def forward(self, x):
        b, c, h, w = x.shape
        q, k = self.qk(x).flatten(2).chunk(2, 1)
        attn = torch.softmax(q.transpose(1, 2) @ k / c**0.5, -1)
        y = (x.flatten(2) @ attn.transpose(1, 2)).view(b, c, h, w)
        return x + self.out(y)


@MODELS.register_module()
class ToyAttentionHead(FCNHead):
    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.attention = ToyAttention(self.channels)

    def forward(self, inputs):
        return self.cls_seg(self.attention(self.convs(
            self._transform_inputs(inputs))))
"""


def test_a_users_attention_registered_through_custom_imports(
        family_data, tmp_path, monkeypatch):
    """A config's ``custom_imports`` loads a user's module whose attention
    class declares its convention: the sweep finds, removes and measures
    it like mmseg's."""
    (tmp_path / 'toy_attention.py').write_text(TOY_ATTENTION)
    monkeypatch.syspath_prepend(str(tmp_path))
    config = tmp_path / 'toy.py'
    family_config('deeplabv3', family_data, tmp_path)
    config.write_text("""_base_ = './deeplabv3.py'
custom_imports = dict(imports=['toy_attention'], allow_failed_imports=False)
model = dict(decode_head=dict(
    _delete_=True, type='ToyAttentionHead', in_channels=512, in_index=3,
    channels=16, num_convs=1, num_classes=150, concat_input=False))
""")
    from mmseg.registry import MODELS
    init_default_scope('mmseg')
    cfg = Config.fromfile(str(config))
    torch.manual_seed(0)
    model = MODELS.build(cfg.model)
    ckpt = str(tmp_path / 'toy.pth')
    torch.save(dict(state_dict=model.state_dict()), ckpt)
    data = run_noise_sweep(str(config), ckpt, NoiseSweepOptions(
        sigmas=[0.1], draws=1, out=str(tmp_path / 'out'),
        work_dir=str(tmp_path / 'work'), progress=False),
        log=lambda *a: None)
    (usage, ) = data['attention_usage']
    assert usage['site'] == 'decode_head.attention'
    assert usage['kind'] == 'ToyAttention' and usage['images'] == 2
    assert usage['ratio_mean'] > 0
    (ablation, ) = data['ablation'].values()
    assert ablation['sites'] == ['decode_head.attention']
    sys.modules.pop('toy_attention', None)


@pytest.mark.slow
@pytest.mark.distributed
def test_two_process_sweep_of_mmseg_encoder_attention(family_data, tmp_path):
    """SegFormer's encoder attention swept by tools/noise_robustness.py on
    2 gloo processes (rank 1 holds the second image) equals one process
    (on one thread, as torchrun's): every field but wall times."""
    from test_distributed import _same_results, torchrun_command
    ckpt = save_random_weights('segformer', tmp_path, family_data)
    config = family_config('segformer', family_data, tmp_path)
    args = ['tools/noise_robustness.py', config, ckpt, '--sigmas', '0.1',
            '--draws', '2', '--target', 'encoder-attention']
    env = dict(os.environ, CUDA_VISIBLE_DEVICES='', PYTHONUNBUFFERED='1',
               PYTHONPATH=REPO)
    proc = subprocess.run(
        torchrun_command(*args, '--out', str(tmp_path / 'two'),
                         '--work-dir', str(tmp_path / 'w2'), '--launcher',
                         'pytorch', '--device', 'cpu'),
        cwd=REPO, env=env, text=True, capture_output=True, timeout=300)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-6000:]
    run_tool(args + ['--out', str(tmp_path / 'one'), '--work-dir',
                     str(tmp_path / 'w1')], env=dict(OMP_NUM_THREADS='1'))
    results = {}
    for run in ('one', 'two'):
        with open(tmp_path / run / 'results.json') as f:
            results[run] = json.load(f)
    usage = results['two']['attention_usage']
    assert len(usage) == 4 and all(r['images'] == 2 for r in usage), usage
    _same_results(results['one'], results['two'])
