"""Weights-only checkpoints: the codec, the loader and the converter."""
import collections
import os.path as osp
import pickle

import numpy as np
import pytest
import torch
from mmengine.logging import HistoryBuffer
from mmengine.runner.checkpoint import _load_checkpoint

from mmseg_whitebox.compat import UnsafeCheckpointError
from mmseg_whitebox.utils.checkpoint_codec import (decode_checkpoint,
                                                   encode_checkpoint)

from _helpers import run_tool

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
                                         'obj': np.array([None, 'a'])},
                        'resumed_keys': {'train/loss': True}},
        'optimizer': {'param_groups': [{'betas': (0.9, 0.999)}]},
    }
    if local_types:
        state['message_hub']['runtime_info']['point'] = Point(1, 2)
    return state


def assert_same(a, b, path='ckpt'):
    if isinstance(a, HistoryBuffer):
        assert isinstance(b, HistoryBuffer), path
        assert a.max_length == b.max_length
        for x, y in zip(a.data, b.data):
            np.testing.assert_array_equal(x, y)
        return
    assert type(a) is type(b) or (isinstance(a, tuple)
                                  and type(b) is tuple), (path, a, b)
    if isinstance(a, dict):
        assert list(a) == list(b), path
        for k in a:
            assert_same(a[k], b[k], f'{path}.{k}')
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), path
        for i, (x, y) in enumerate(zip(a, b)):
            assert_same(x, y, f'{path}[{i}]')
    elif isinstance(a, torch.Tensor):
        assert torch.equal(a, b), path
    elif isinstance(a, np.ndarray):
        assert a.dtype == b.dtype, path
        np.testing.assert_array_equal(a, b)
    else:
        assert a == b, path


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


def test_mmengine_loader_decodes_and_refuses_unsafe(tmp_path):
    safe, unsafe = tmp_path / 'safe.pth', tmp_path / 'unsafe.pth'
    torch.save(encode_checkpoint(training_state()), safe)
    torch.save(training_state(), unsafe)
    assert_same(training_state(), _load_checkpoint(str(safe)))
    with pytest.raises(UnsafeCheckpointError,
                       match='weights_only.py .* --trust'):
        _load_checkpoint(str(unsafe))
    with pytest.raises(FileNotFoundError):
        _load_checkpoint(str(tmp_path / 'missing.pth'))


def test_converter_needs_trust_then_converts(tmp_path):
    src, dst = tmp_path / 'unsafe.pth', tmp_path / 'converted.pth'
    torch.save(training_state(local_types=False), src)
    refused = run_tool(['tools/model_converters/weights_only.py', str(src),
                        str(dst)], check=False)
    assert refused.returncode != 0 and '--trust' in refused.stderr
    assert not osp.exists(dst)
    run_tool(['tools/model_converters/weights_only.py', str(src), str(dst),
              '--trust'])
    assert_same(training_state(local_types=False),
                _load_checkpoint(str(dst)))
