"""Weights-only-safe checkpoints.

``torch.load(weights_only=True)`` refuses the Python objects an mmengine
checkpoint holds (``HistoryBuffer``, numpy arrays and scalars), and
allow-listing them would mean allow-listing ``getattr`` too.
:func:`encode_checkpoint` turns each into a tagged dict of primitives and
tensors, :func:`decode_checkpoint` rebuilds the few types below. Primitives
are what torch 2.1's weights-only loader accepts: ``bytes``, ``complex``,
``torch.device`` and ``torch.dtype`` are tagged too.
"""
from __future__ import annotations

import warnings
from collections import OrderedDict
from typing import Any, Callable, Dict

import numpy as np
import torch

TAG = '__mmseg_whitebox_type__'

_PRIMITIVES = (str, int, float, bool, type(None), torch.Tensor, torch.Size)


def _history_buffer_cls():
    from mmengine.logging import HistoryBuffer
    return HistoryBuffer


def _encode_history_buffer(buf: Any) -> Dict[str, Any]:
    log_history, count_history = buf.data
    return {
        TAG: 'HistoryBuffer',
        'log_history': _encode(log_history, 'log_history'),
        'count_history': _encode(count_history, 'count_history'),
        'max_length': int(buf.max_length),
    }


def _decode_history_buffer(obj: Dict[str, Any]) -> Any:
    log_history = _decode(obj['log_history'])
    count_history = _decode(obj['count_history'])
    return _history_buffer_cls()(
        list(log_history), list(count_history), max_length=obj['max_length'])


def _encode_ndarray(arr: np.ndarray) -> Dict[str, Any]:
    if arr.dtype == object:
        return {TAG: 'ndarray_object', 'shape': list(arr.shape),
                'items': [_encode(x, 'ndarray item') for x in arr.ravel()]}
    return {TAG: 'ndarray', 'dtype': arr.dtype.str, 'shape': list(arr.shape),
            'data': _bytes_tensor(arr.tobytes())}


def _decode_ndarray(obj: Dict[str, Any]) -> np.ndarray:
    flat = np.frombuffer(obj['data'].numpy().tobytes(),
                         dtype=np.dtype(obj['dtype']))
    return flat.reshape(obj['shape']).copy()


def _bytes_tensor(data: bytes) -> torch.Tensor:
    if not data:
        return torch.empty(0, dtype=torch.uint8)
    return torch.frombuffer(bytearray(data), dtype=torch.uint8)


def _decode_ndarray_object(obj: Dict[str, Any]) -> np.ndarray:
    arr = np.empty(len(obj['items']), dtype=object)
    for i, item in enumerate(obj['items']):
        arr[i] = _decode(item)
    return arr.reshape(obj['shape'])


def _encode_np_scalar(value: np.generic) -> Dict[str, Any]:
    return {TAG: 'np_scalar', 'dtype': value.dtype.str, 'value': value.item()}


def _decode_np_scalar(obj: Dict[str, Any]) -> np.generic:
    return np.dtype(obj['dtype']).type(obj['value'])


_DECODERS: Dict[str, Callable[[Dict[str, Any]], Any]] = {
    'HistoryBuffer': _decode_history_buffer,
    'ndarray': _decode_ndarray,
    'ndarray_object': _decode_ndarray_object,
    'np_scalar': _decode_np_scalar,
    'tuple': lambda obj: tuple(_decode(x) for x in obj['items']),
    'set': lambda obj: set(_decode(x) for x in obj['items']),
    'bytes': lambda obj: obj['data'].numpy().tobytes(),
    'complex': lambda obj: complex(obj['real'], obj['imag']),
    'dtype': lambda obj: getattr(torch, obj['name']),
    'device': lambda obj: torch.device(obj['name']),
}


def _encode(obj: Any, path: str) -> Any:
    # numpy first: np.float64 is also a Python float
    if isinstance(obj, np.ndarray):
        return _encode_ndarray(obj)
    if isinstance(obj, np.generic):
        return _encode_np_scalar(obj)
    if isinstance(obj, _PRIMITIVES):
        return obj
    if isinstance(obj, bytes):
        return {TAG: 'bytes', 'data': _bytes_tensor(obj)}
    if isinstance(obj, complex):
        return {TAG: 'complex', 'real': obj.real, 'imag': obj.imag}
    if isinstance(obj, torch.dtype):
        return {TAG: 'dtype', 'name': str(obj).rpartition('.')[2]}
    if isinstance(obj, torch.device):
        return {TAG: 'device', 'name': str(obj)}
    if isinstance(obj, _history_buffer_cls()):
        return _encode_history_buffer(obj)
    if isinstance(obj, dict):
        items = [(k, _encode(v, f'{path}.{k}')) for k, v in obj.items()]
        return OrderedDict(items) if isinstance(obj, OrderedDict) else dict(
            items)
    if isinstance(obj, list):
        return [_encode(v, f'{path}[{i}]') for i, v in enumerate(obj)]
    if isinstance(obj, tuple):
        items = [_encode(v, f'{path}[{i}]') for i, v in enumerate(obj)]
        if type(obj) is tuple and all(a is b for a, b in zip(items, obj)):
            return obj  # a plain tuple of plain data loads as it is
        # namedtuples, or tuples holding encoded objects
        return {TAG: 'tuple', 'items': items}
    if isinstance(obj, (set, frozenset)):
        return {TAG: 'set', 'items': [_encode(v, path) for v in obj]}
    warnings.warn(
        f'checkpoint entry {path} of type {type(obj).__qualname__} cannot be '
        'stored weights-only; its repr() is saved instead.', stacklevel=3)
    return {TAG: 'repr', 'type': type(obj).__qualname__, 'repr': repr(obj)}


def _decode(obj: Any) -> Any:
    if isinstance(obj, dict):
        tag = obj.get(TAG)
        if tag is not None:
            decoder = _DECODERS.get(tag)
            return obj if decoder is None else decoder(obj)
        items = [(k, _decode(v)) for k, v in obj.items()]
        return OrderedDict(items) if isinstance(obj, OrderedDict) else dict(
            items)
    if isinstance(obj, list):
        return [_decode(v) for v in obj]
    return obj


def encode_checkpoint(checkpoint: Dict[str, Any]) -> Dict[str, Any]:
    """Return a copy of ``checkpoint`` that ``torch.load(weights_only=True)``
    accepts. Tensors are shared, not copied."""
    return _encode(checkpoint, 'checkpoint')


def decode_checkpoint(checkpoint: Any) -> Any:
    """Inverse of :func:`encode_checkpoint`; a no-op on plain checkpoints."""
    return _decode(checkpoint)
