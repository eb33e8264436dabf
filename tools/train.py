"""Train a segmentor; the same options as mmseg's ``tools/train.py``.

    python tools/train.py CONFIG [--work-dir DIR] [--resume]
        [--amp] [--amp-dtype float16|bfloat16] [--auto-scale-lr]
        [--cfg-options k=v ...] [--launcher pytorch] [--device cuda|cpu]

``--device``: cuda when a GPU is visible, else cpu; a launched run
(``--launcher``) without a visible GPU stops unless ``--device cpu`` asks
for CPU processes (docs/training.md, "Distributed runs"). ``--amp`` trains
under float16 autocast with a dynamic loss scale (as mmseg's);
``--amp-dtype bfloat16`` under bfloat16 (docs/training.md, "Mixed
precision"). ``--auto-scale-lr`` scales the learning rate by the world
batch over the config's ``auto_scale_lr.base_batch_size``, as mmseg's.
"""
import argparse
import sys

import mmseg_whitebox  # noqa: F401  (compat + registration first)
from mmseg_whitebox.apis.training import train_model
from mmseg_whitebox.cli import add_common_args, load_config, run_tool
from mmseg_whitebox.cli.options import add_amp_args


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description='Train a segmentor')
    parser.add_argument('config', help='train config file path')
    parser.add_argument(
        '--resume',
        action='store_true',
        help='resume from the latest checkpoint in the work dir '
        '(or from load_from, if the config sets it)')
    add_amp_args(parser, 'train', note=', with a dynamic loss scale as '
                 'mmseg\'s --amp; needs a GPU')
    parser.add_argument(
        '--auto-scale-lr',
        action='store_true',
        help='scale the learning rate to this run\'s world batch (GPUs x '
        'batch size), from the config\'s auto_scale_lr.base_batch_size, '
        'as mmseg\'s --auto-scale-lr')
    add_common_args(parser)
    return parser.parse_args(argv)


def main(argv=None) -> None:
    args = parse_args(argv)
    cfg = load_config(args)
    counter = train_model(cfg, args.resume, args.amp, args.amp_dtype,
                          args.auto_scale_lr, args.device)
    if counter.summary():  # of the last validation, repeated at the end
        print(f'WARNING: {counter.summary()}', file=sys.stderr)


if __name__ == '__main__':
    run_tool(main)
