"""Paint a segmentor's predictions over images, as mmseg's image demo.

    python tools/image_demo.py IMAGE_OR_FOLDER CONFIG CHECKPOINT \
        (--out-file FILE | --out DIR) [--opacity 0.5] [--device cpu] \
        [--title TITLE] [--with-labels] [--cfg-options k=v ...]

A single image goes to --out-file (or DIR/<name>.png); a folder's images
to DIR/<name>.png, with a progress bar. Images of any size: each is
predicted at its own size (the config's test pipeline and sliding window)
and the prediction is painted at the image's resolution by mmseg's
SegLocalVisualizer. The checkpoint is loaded weights-only.
"""
import argparse

import mmseg_whitebox  # noqa: F401  (compat + registration first)
from mmseg_whitebox.apis.image_demo import image_demo
from mmseg_whitebox.cli import add_cfg_options_arg, run_tool, tool_parser
from mmseg_whitebox.cli.options import (add_device_arg, add_out_arg,
                                        add_out_file_arg, add_title_arg)


def parse_args(argv=None) -> argparse.Namespace:
    p = tool_parser(__doc__)
    p.add_argument('img', metavar='IMAGE_OR_FOLDER',
                   help='an image file, or a folder of images')
    p.add_argument('config')
    p.add_argument('checkpoint')
    add_out_file_arg(p, 'overlay file (a single image)')
    add_out_arg(p, 'folder for the overlays (<image name>.png each)')
    add_device_arg(p)
    p.add_argument('--opacity', type=float, default=0.5,
                   help='opacity of the painted prediction, in (0, 1] '
                   '(default 0.5)')
    add_title_arg(p, 'name of the drawn image', default='')
    p.add_argument('--with-labels', action='store_true',
                   help='write class names on the segments')
    add_cfg_options_arg(p)
    return p.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    images, written = image_demo(
        args.img, args.config, args.checkpoint, out_file=args.out_file,
        out_dir=args.out, device=args.device, opacity=args.opacity,
        title=args.title, with_labels=args.with_labels,
        cfg_options=args.cfg_options)
    where = written[0] if len(written) == 1 else args.out
    print(f'\nwrote {len(written)} overlay(s) to {where}')
    return written


if __name__ == '__main__':
    run_tool(main)
