"""Convert a trusted checkpoint into one that loads weights-only.

Checkpoints written by a plain mmengine run pickle Python objects (message
hub buffers, numpy arrays), so this project refuses to load them: unpickling
can run arbitrary code. If you trust a file, convert it once:

    python tools/model_converters/weights_only.py IN.pth OUT.pth --trust

OUT.pth holds the same weights and training state as plain data; it can be
used with tools/test.py, --resume, load_from and mmseg.apis.
"""
import argparse
import os.path as osp
import sys

sys.path.insert(
    0, osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__)))))
import torch  # noqa: E402

from mmseg_whitebox.utils.checkpoint_codec import encode_checkpoint  # noqa


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    p.add_argument('src', help='checkpoint to convert')
    p.add_argument('dst', help='where to write the weights-only checkpoint')
    p.add_argument('--trust', action='store_true',
                   help='confirm that SRC comes from a source you trust: it '
                   'is unpickled in full, which can run code it contains')
    return p.parse_args(argv)


def main(argv=None) -> None:
    args = parse_args(argv)
    if not args.trust:
        raise SystemExit(
            'error: loading SRC in full can run arbitrary code it contains; '
            'pass --trust if you trust where it came from')
    if not osp.isfile(args.src):
        raise SystemExit(f'error: {args.src!r} does not exist')
    if osp.abspath(args.src) == osp.abspath(args.dst):
        raise SystemExit('error: write to a new file, SRC stays as it is')
    checkpoint = torch.load(args.src, map_location='cpu', weights_only=False)
    if not isinstance(checkpoint, dict):
        raise SystemExit(f'error: {args.src} holds a {type(checkpoint)}, '
                         'not a checkpoint dict')
    encoded = encode_checkpoint(checkpoint)
    torch.save(encoded, args.dst)
    torch.load(args.dst, map_location='cpu', weights_only=True)  # verify
    print(f'wrote {args.dst} (loads with weights_only=True)')


if __name__ == '__main__':
    main()
