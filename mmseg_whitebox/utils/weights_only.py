"""Convert a trusted checkpoint into one that loads weights-only.

Checkpoints written by a plain mmengine run pickle Python objects (message
hub buffers, numpy arrays), so this project refuses to load them: unpickling
can run arbitrary code. If you trust a file, convert it once, from any
directory:

    python -m mmseg_whitebox.utils.weights_only IN.pth OUT.pth --trust

(the same as ``mmseg-whitebox-weights-only IN.pth OUT.pth --trust``, or
``python tools/model_converters/weights_only.py ...`` in a checkout).
OUT.pth holds the same weights and training state as plain data; it can be
used with tools/test.py, --resume, load_from and mmseg.apis.
"""
from __future__ import annotations

import argparse
import os.path as osp
from typing import List, Optional

import torch

from mmseg_whitebox.utils.atomic import atomic_path, check_not_input
from mmseg_whitebox.utils.checkpoint_codec import encode_checkpoint
from mmseg_whitebox.utils.cli import ToolError, run_tool


def parse_args(argv: Optional[List[str]] = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    p.add_argument('src', help='checkpoint to convert')
    p.add_argument('dst', help='where to write the weights-only checkpoint')
    p.add_argument('--trust', action='store_true',
                   help='confirm that SRC comes from a source you trust: it '
                   'is unpickled in full, which can run code it contains')
    return p.parse_args(argv)


def convert(src: str, dst: str) -> None:
    """Load the trusted checkpoint ``src`` in full and write it to ``dst``
    in the weights-only-safe encoding; a ``src`` that is no checkpoint dict
    is a :class:`ToolError`."""
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


def main(argv: Optional[List[str]] = None) -> None:
    """Command line entry: ``main(['IN.pth', 'OUT.pth', '--trust'])``;
    bad input raises :class:`ToolError` (see :func:`cli_main`)."""
    args = parse_args(argv)
    if not args.trust:
        raise ToolError(
            'loading SRC in full can run arbitrary code it contains; '
            'pass --trust if you trust where it came from')
    if not osp.isfile(args.src):
        raise ToolError(f'{args.src!r} does not exist')
    check_not_input(args.dst, [args.src], 'OUT')
    convert(args.src, args.dst)
    print(f'wrote {args.dst} (loads with weights_only=True)')


def cli_main() -> None:
    """Entry of the ``mmseg-whitebox-weights-only`` console script and of
    ``python -m``: :func:`main` on ``sys.argv``, bad input reported as
    ``<prog>: error: ...`` with exit status 2."""
    run_tool(main)


if __name__ == '__main__':
    cli_main()
