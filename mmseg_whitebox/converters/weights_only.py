"""Convert a trusted checkpoint into one that loads weights-only.

A plain mmengine run's checkpoint pickles Python objects, which this
project refuses to load (unpickling can run arbitrary code). Convert a
file you trust once (``python -m mmseg_whitebox weights-only IN.pth
OUT.pth --trust``, or :func:`convert`): OUT.pth holds the same weights and
training state as plain data.
"""
from __future__ import annotations

import os.path as osp

import torch

from mmseg_whitebox.utils.atomic import atomic_path, check_not_input
from mmseg_whitebox.utils.checkpoint_codec import encode_checkpoint
from mmseg_whitebox.utils.tool_error import ToolError


def convert(src: str, dst: str) -> None:
    """Load the trusted checkpoint ``src`` in full and write it to ``dst``
    in the weights-only-safe encoding (a bad ``src`` or ``dst`` is a
    :class:`ToolError`)."""
    if not osp.isfile(src):
        raise ToolError(f'{src!r} does not exist')
    check_not_input(dst, [src], 'OUT')
    try:
        checkpoint = torch.load(src, map_location='cpu', weights_only=False)
    except Exception as exc:  # torch raises many kinds for a foreign file
        raise ToolError(f'{src!r} cannot be read as a torch checkpoint '
                        f'({type(exc).__name__}: {exc})') from exc
    if not isinstance(checkpoint, dict):
        raise ToolError(f'{src!r} holds a {type(checkpoint).__name__}, not '
                        'a checkpoint dict')
    with atomic_path(dst) as tmp:  # dst is complete, or as before
        torch.save(encode_checkpoint(checkpoint), tmp)
        torch.load(tmp, map_location='cpu', weights_only=True)  # verify
