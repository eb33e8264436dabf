"""Weights-only checkpoints: the codec, the loader and the converter."""
import collections
import os
import os.path as osp
import pickle
import re
import shlex
import subprocess
import sys

import numpy as np
import pytest
import torch
from mmengine.logging import HistoryBuffer
from mmengine.runner.checkpoint import _load_checkpoint

from mmseg_whitebox.compat import UnsafeCheckpointError
from mmseg_whitebox import commands
from mmseg_whitebox.converters import weights_only
from mmseg_whitebox.utils.checkpoint_codec import (decode_checkpoint,
                                                   encode_checkpoint)
from mmseg_whitebox.utils.tool_error import BAD_INPUT, ToolError

from _helpers import REPO, assert_same, run_tool

Point = collections.namedtuple('Point', 'x y')


def training_state(local_types=True):
    """A checkpoint like mmengine writes; ``local_types`` adds a namedtuple
    defined here (which another process cannot unpickle)."""
    buf = HistoryBuffer([1.0, 0.5], [1, 1], max_length=10)
    state = {
        'meta': {'iter': 4, 'dataset_meta': {'classes': ('a', 'b'),
                                             'palette': [[1, 2, 3]]},
                 'score': np.float64(0.25), 'count': np.int64(3)},
        'state_dict': collections.OrderedDict(w=torch.arange(6.).view(3, 2)),
        'message_hub': {'log_scalars': {'train/loss': buf},
                        'runtime_info': {'arr': np.arange(6).reshape(2, 3),
                                         'tags': {'x', 'y'},
                                         'obj': np.array([None, 'a']),
                                         'raw': b'\x00\xff', 'empty': b'',
                                         'z': 1 + 2j,
                                         'dtypes': [torch.bfloat16,
                                                    torch.bool],
                                         'device': torch.device('cpu')},
                        'resumed_keys': {'train/loss': True}},
        'optimizer': {'param_groups': [{'betas': (0.9, 0.999)}]},
    }
    if local_types:
        state['message_hub']['runtime_info']['point'] = Point(1, 2)
    return state


def test_plain_training_state_is_refused_by_weights_only_load(tmp_path):
    path = tmp_path / 'plain.pth'
    torch.save(training_state(), path)
    with pytest.raises(pickle.UnpicklingError):
        torch.load(path, weights_only=True)


def test_encoded_state_loads_weights_only_and_round_trips(tmp_path):
    state = training_state()
    path = tmp_path / 'safe.pth'
    torch.save(encode_checkpoint(state), path)
    loaded = torch.load(path, weights_only=True)
    assert_same(state, decode_checkpoint(loaded))
    # plain tuples of plain data stay tuples even without decoding
    assert loaded['meta']['dataset_meta']['classes'] == ('a', 'b')


#: the globals torch 2.1's weights-only loader allows (the oldest torch the
#: package supports; torch/_weights_only_unpickler.py there) besides its
#: tensor, storage and rebuild functions
TORCH21_GLOBALS = {'collections OrderedDict', 'torch Size', 'torch Tensor',
                   'torch.nn.parameter Parameter',
                   'torch.serialization _get_layout'} | {
    f'torch {name}' for name in (
        'complex32', 'complex64', 'complex128', 'float16', 'float32',
        'float64', 'int8', 'int16', 'int32', 'int64')}


def test_encoded_state_needs_only_what_torch_2_1_loads(tmp_path):
    """Every global the encoded pickle names is on torch 2.1's allow-list
    (no ``_codecs.encode`` for bytes, no ``torch.device``): checked on any
    torch, so the default stack catches what the legacy stack would."""
    import pickletools
    import zipfile
    path = tmp_path / 'safe.pth'
    torch.save(encode_checkpoint(training_state()), path)
    with zipfile.ZipFile(path) as archive:
        name = next(n for n in archive.namelist() if n.endswith('data.pkl'))
        ops = list(pickletools.genops(archive.read(name)))
    names = {arg for op, arg, _ in ops if op.name == 'GLOBAL'}
    allowed = TORCH21_GLOBALS | {n for n in names if n.startswith(
        ('torch._utils _rebuild_', 'torch._tensor _rebuild_from_type_v2'))
        or (n.startswith('torch ') and n.endswith('Storage'))}
    assert names <= allowed, names - allowed
    assert not {op.name for op, _, _ in ops} & {
        'BINBYTES', 'SHORT_BINBYTES', 'BINBYTES8', 'STACK_GLOBAL'}


def test_mmengine_loader_decodes_and_refuses_unsafe(tmp_path):
    safe, unsafe = tmp_path / 'safe.pth', tmp_path / 'unsafe.pth'
    torch.save(encode_checkpoint(training_state()), safe)
    torch.save(training_state(), unsafe)
    assert_same(training_state(), _load_checkpoint(str(safe)))
    with pytest.raises(
            UnsafeCheckpointError,
            match='`python -m mmseg_whitebox weights-only .* --trust`'):
        _load_checkpoint(str(unsafe))
    with pytest.raises(FileNotFoundError):
        _load_checkpoint(str(tmp_path / 'missing.pth'))


def test_converter_needs_trust_then_converts(tmp_path):
    """The script in tools/ (run from the repository root)."""
    src, dst = tmp_path / 'unsafe.pth', tmp_path / 'converted.pth'
    torch.save(training_state(local_types=False), src)
    refused = run_tool(['tools/model_converters/weights_only.py', str(src),
                        str(dst)], check=False)
    assert refused.returncode == BAD_INPUT
    assert 'weights_only.py: error:' in refused.stderr
    assert '--trust' in refused.stderr and 'Traceback' not in refused.stderr
    assert not osp.exists(dst)
    run_tool(['tools/model_converters/weights_only.py', str(src), str(dst),
              '--trust'])
    assert_same(training_state(local_types=False),
                _load_checkpoint(str(dst)))


def run_elsewhere(args, cwd):
    """``python <args>`` from ``cwd`` (not the repository root)."""
    return subprocess.run([sys.executable] + args, cwd=str(cwd),
                          env=dict(os.environ, PYTHONUNBUFFERED='1'),
                          capture_output=True, text=True, timeout=600)


def test_refusal_command_works_from_any_directory(tmp_path):
    """The command the refusal prints, run as printed from another
    directory, converts the file; bad input there exits with status 2."""
    cwd = tmp_path / 'elsewhere'
    cwd.mkdir()
    assert osp.realpath(cwd) != osp.realpath(REPO)
    src = cwd / 'unsafe model.pth'  # a name that needs quoting
    torch.save(training_state(local_types=False), src)
    with pytest.raises(UnsafeCheckpointError) as info:
        _load_checkpoint(str(src))
    command = re.search(r'`(python -m [^`]*)`', str(info.value)).group(1)
    args = shlex.split(command)
    assert args[:4] == ['python', '-m', 'mmseg_whitebox', 'weights-only']
    assert args[4] == str(src) and args[5:] == ['OUT.pth', '--trust']

    bad = run_elsewhere(args[1:4] + ['missing.pth', 'OUT.pth', '--trust'],
                        cwd)
    assert bad.returncode == BAD_INPUT, bad.stderr
    assert "error: 'missing.pth' does not exist" in bad.stderr
    assert 'Traceback' not in bad.stderr

    done = run_elsewhere(args[1:], cwd)
    assert done.returncode == 0, done.stderr
    assert 'wrote OUT.pth' in done.stdout
    assert_same(training_state(local_types=False),
                _load_checkpoint(str(cwd / 'OUT.pth')))


@pytest.mark.parametrize('case', ['missing', 'same_file', 'not_a_checkpoint',
                                  'not_a_dict'])
def test_converter_bad_input_is_a_tool_error(tmp_path, case):
    src, dst = tmp_path / 'in.pth', tmp_path / 'out.pth'
    torch.save(training_state(local_types=False), src)
    message = {'missing': 'does not exist', 'same_file': 'new file',
               'not_a_checkpoint': 'cannot be read',
               'not_a_dict': 'holds a list'}[case]
    if case == 'missing':
        src = tmp_path / 'missing.pth'
    elif case == 'same_file':
        dst = src
    elif case == 'not_a_checkpoint':
        src.write_text('not a checkpoint')
    elif case == 'not_a_dict':
        torch.save([torch.zeros(1)], src)
    with pytest.raises(ToolError, match=message):
        weights_only.convert(str(src), str(dst))
    assert case == 'same_file' or not osp.exists(dst)


def test_converter_console_script(tmp_path, monkeypatch, capsys):
    """``[project.scripts]`` names an entry that takes no arguments and
    reports bad input like every tool: ``<prog>: error: ...``, status 2."""
    tomllib = pytest.importorskip('tomllib')
    with open(osp.join(REPO, 'pyproject.toml'), 'rb') as f:
        scripts = tomllib.load(f)['project']['scripts']
    module, _, attr = scripts['mmseg-whitebox-weights-only'].partition(':')
    entry = getattr(__import__(module, fromlist=[attr]), attr)
    assert entry is commands.weights_only

    src, dst = tmp_path / 'in.pth', tmp_path / 'sub' / 'out.pth'
    torch.save(training_state(local_types=False), src)
    monkeypatch.setattr(sys, 'argv', ['mmseg-whitebox-weights-only',
                                      str(src), str(dst)])
    with pytest.raises(SystemExit) as info:
        entry()
    assert info.value.code == BAD_INPUT
    assert capsys.readouterr().err.startswith('weights_only.py: error: ')
    monkeypatch.setattr(sys, 'argv', ['mmseg-whitebox-weights-only',
                                      str(src), str(dst), '--trust'])
    entry()
    assert_same(training_state(local_types=False),
                _load_checkpoint(str(dst)))
