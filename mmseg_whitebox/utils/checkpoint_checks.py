"""Checks that keep a wrong checkpoint from becoming wrong numbers.

mmengine loads with ``strict=False`` and only logs missing, unexpected and
mis-shaped keys, so another architecture or ``num_classes`` evaluates to a
meaningless mIoU and NaN/Inf weights to one class everywhere. Here such a
load is an error naming the keys and the fix, unless partial loading is
asked for. The Runner hooks applying them are in
:mod:`mmseg_whitebox.engine.hooks.checkpoint_check_hooks`.
"""
from __future__ import annotations

import os
import re
import zipfile
from typing import Any, Dict, Iterable, List, Mapping, Optional, Tuple

import torch
from mmengine.logging import print_log

from mmseg_whitebox.utils.distributed import unwrap_model
from mmseg_whitebox.utils.tool_error import InputError

#: how many keys an error message lists
SHOWN = 5
#: the first bytes of the two formats ``torch.save`` writes
_ZIP_MAGIC = b'PK\x03\x04'
_PICKLE_PROTO = b'\x80'


def check_checkpoint_file(filename: str) -> None:
    """Refuse an empty, truncated or damaged file or one that is not a
    torch checkpoint, saying so. Local files only; a missing one is left
    to the caller."""
    if '://' in filename or not os.path.isfile(filename):
        return
    size = os.path.getsize(filename)
    if size == 0:
        raise InputError(
            f'checkpoint {filename!r} is empty (0 bytes): the save or the '
            'download was interrupted. Use another checkpoint (e.g. an '
            'earlier iter_*.pth in the work dir) or download it again')
    with open(filename, 'rb') as f:
        head = f.read(64)
    if head.startswith(_ZIP_MAGIC):
        if zipfile.is_zipfile(filename):
            _check_zip_members(filename)
            return
        # torch's zip format with its end cut off (its header is ASCII)
        raise InputError(
            f'checkpoint {filename!r} is truncated ({size} bytes; a torch '
            'zip file without its end): the save, download or copy was '
            'interrupted. Use another checkpoint (e.g. an earlier '
            'iter_*.pth in the work dir) or copy/download it again')
    if head.startswith(_PICKLE_PROTO):
        return  # the legacy (non-zip) torch format
    text = head.decode('utf-8', errors='replace')
    looks = ('an HTML page (a failed or redirected download?)'
             if re.search(r'<(!doctype|html|\?xml)', text, re.I) else
             'a text file' if head.isascii() else 'another kind of file')
    raise InputError(
        f'{filename!r} is not a PyTorch checkpoint: it starts with '
        f'{head[:24]!r}, {looks}. Pass the .pth file that tools/train.py '
        'wrote (WORK_DIR/iter_*.pth) or download the checkpoint again')


def _check_zip_members(filename: str) -> None:
    """Every member of a torch zip checkpoint reads back with its CRC."""
    try:
        with zipfile.ZipFile(filename) as archive:
            bad = archive.testzip()
    except (zipfile.BadZipFile, EOFError, OSError) as exc:
        bad = f'{type(exc).__name__}: {exc}'
    if bad is not None:
        raise InputError(
            f'checkpoint {filename!r} is damaged (unreadable part: {bad}): '
            'it was not written or copied completely (a crash, a full disk '
            'or an interrupted copy). Use another copy, or an earlier '
            'iter_*.pth in the work dir')


def check_checkpoint(path: Optional[str]) -> None:
    """A local checkpoint exists and passes :func:`check_checkpoint_file`;
    a URL is left to the loader."""
    if not path:
        return
    if '://' not in path and not os.path.isfile(path):
        raise InputError(f'checkpoint {path!r} does not exist')
    check_checkpoint_file(path)


def state_dict_of(checkpoint: Mapping[str, Any]) -> Dict[str, Any]:
    """The weights of a loaded checkpoint, with mmengine's default key
    revision (a leading ``module.`` removed)."""
    state = checkpoint.get('state_dict', checkpoint)
    return {re.sub(r'^module\.', '', k): v for k, v in state.items()}


def compare_state_dict(
        model: torch.nn.Module, state_dict: Mapping[str, Any]
) -> Tuple[List[str], List[str], List[Tuple[str, tuple, tuple]]]:
    """``(missing, unexpected, mismatched)`` keys of ``state_dict`` for
    ``model``; mismatched as ``(key, checkpoint shape, model shape)``."""
    # mmengine loads into the model inside wrappers and TTA models
    own = unwrap_model(model).state_dict()
    # BatchNorm's step counter is absent from old checkpoints, harmlessly
    missing = [k for k in own if k not in state_dict
               and not k.endswith('num_batches_tracked')]
    unexpected = [k for k in state_dict if k not in own]
    mismatched = [(k, tuple(v.shape), tuple(own[k].shape))
                  for k, v in state_dict.items()
                  if k in own and isinstance(v, torch.Tensor)
                  and tuple(v.shape) != tuple(own[k].shape)]
    return missing, unexpected, mismatched


def added_parameters(model: torch.nn.Module) -> List[str]:
    """Keys a converted checkpoint may lack: the modules'
    ``added_parameters`` (e.g. QKVCBSA's step sizes)."""
    return [f'{name}.{param}' if name else param
            for name, module in model.named_modules()
            for param in getattr(module, 'added_parameters', ())]


def nonfinite_weights(state_dict: Mapping[str, Any]
                      ) -> List[Tuple[str, int, int]]:
    """``(key, non-finite count, numel)`` of floating tensors with NaN/Inf."""
    bad = []
    for key, value in state_dict.items():
        if (isinstance(value, torch.Tensor) and value.is_floating_point()
                and not bool(torch.isfinite(value).all())):
            count = int((~torch.isfinite(value)).sum())
            bad.append((key, count, value.numel()))
    return bad


def _keys(items: List[str]) -> str:
    more = f', ... ({len(items)} in all)' if len(items) > SHOWN else ''
    return ', '.join(items[:SHOWN]) + more


def check_state_dict(model: torch.nn.Module,
                     state_dict: Mapping[str, Any],
                     source: str = 'the checkpoint',
                     allow_partial: bool = False,
                     allow_nonfinite: bool = False,
                     partial_flag: str = 'allow_partial=True',
                     nonfinite_flag: str = 'allow_nonfinite=True',
                     optional: Iterable[str] = ()) -> None:
    """Raise unless ``state_dict`` fits ``model`` exactly and is finite.

    With ``allow_partial``/``allow_nonfinite`` the problem is logged as a
    warning instead. ``*_flag`` name the override in the message (the
    tools name their command-line flags). Keys in ``optional`` may be
    missing (parameters the model adds to what it loads).
    """
    missing, unexpected, mismatched = compare_state_dict(model, state_dict)
    optional = set(optional)
    missing = [k for k in missing if k not in optional]
    if missing or unexpected or mismatched:
        parts = []
        if mismatched:
            parts.append(f'{len(mismatched)} with another shape (' + _keys(
                [f'{k}: checkpoint {tuple(a)} vs model {tuple(b)}'
                 for k, a, b in mismatched]) + ')')
        if missing:
            parts.append(f'{len(missing)} missing from the checkpoint ('
                         + _keys(missing) + ')')
        if unexpected:
            parts.append(f'{len(unexpected)} not in the model ('
                         + _keys(unexpected) + ')')
        message = (
            f'{source} does not fit the model: ' + '; '.join(parts) +
            '. It was probably trained with another architecture or another '
            'num_classes, and evaluating it would report meaningless '
            'numbers. Use the config it was trained with, or pass '
            f'{partial_flag} to load the matching weights anyway (the rest '
            'keep their initialisation)')
        _refuse_unless(allow_partial, InputError,
                       'partial checkpoint load', message)
    bad = nonfinite_weights(state_dict)
    if bad:
        total = sum(v.numel() for v in state_dict.values()
                    if isinstance(v, torch.Tensor))
        listed = _keys([f'{k} ({n} of {size})' for k, n, size in bad])
        message = (
            f'{source} has non-finite (NaN/Inf) weights in {len(bad)} '
            f'tensor(s) ({sum(n for _, n, _ in bad)} of {total} values): '
            f'{listed}. Its predictions would be NaN (argmax: one class '
            'everywhere) and the metrics meaningless; the training probably '
            'diverged (lower the learning rate, clip gradients). Use an '
            f'earlier checkpoint, or pass {nonfinite_flag} to evaluate it '
            'anyway')
        _refuse_unless(allow_nonfinite, InputError,
                       'non-finite weights', message)


def _refuse_unless(allowed: bool, error: type, what: str,
                   message: str) -> None:
    """Raise ``error(message)``, or log it as a warning if allowed."""
    if not allowed:
        raise error(message)
    print_log(f'{what} (allowed): {message}', logger='current', level=30)


def load_checkpoint(model: torch.nn.Module, filename: str,
                    map_location: Any = 'cpu',
                    allow_partial: bool = False,
                    allow_nonfinite: bool = False) -> dict:
    """mmengine's ``load_checkpoint`` with :func:`check_state_dict`;
    returns the checkpoint and sets ``model.dataset_meta`` from it."""
    from mmengine.runner.checkpoint import _load_checkpoint, load_state_dict
    check_checkpoint_file(filename)
    checkpoint = _load_checkpoint(filename, map_location=map_location)
    state = state_dict_of(checkpoint)
    check_state_dict(model, state, f'checkpoint {filename!r}',
                     allow_partial, allow_nonfinite)
    load_state_dict(model, state, strict=False)
    meta = checkpoint.get('meta', {}) if isinstance(checkpoint, dict) else {}
    if 'dataset_meta' in meta:
        model.dataset_meta = meta['dataset_meta']
    return checkpoint


def init_model(config: Any, checkpoint: Optional[str] = None,
               device: str = 'cpu', cfg_options: Optional[dict] = None,
               allow_partial: bool = False,
               allow_nonfinite: bool = False) -> torch.nn.Module:
    """mmseg's ``init_model`` with the checkpoint loaded by
    :func:`load_checkpoint`."""
    from mmseg.apis import init_model as mmseg_init_model
    model = mmseg_init_model(config, None, device=device,
                             cfg_options=cfg_options)
    if checkpoint is not None:
        load_checkpoint(model, checkpoint, allow_partial=allow_partial,
                        allow_nonfinite=allow_nonfinite)
    return model
