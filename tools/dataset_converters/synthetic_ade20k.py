"""Write the synthetic ADE20K-layout dataset used by the demo and tests.

    python tools/dataset_converters/synthetic_ade20k.py \
        --data-root data/synthetic
    python tools/dataset_converters/synthetic_ade20k.py \
        --data-root data/synthetic-context --variant context --num-train 400

Creates DATA_ROOT/ADEChallengeData2016/{images,annotations}/{training,
validation} (see mmseg_whitebox.datasets.synthetic_ade20k). Rerunning with
the same arguments keeps the existing files.
"""
import argparse
import time

from mmseg_whitebox.cli import run_tool, tool_parser
from mmseg_whitebox.cli.options import (add_data_root_arg, add_seed_arg,
                                        add_shape_arg)
from mmseg_whitebox.datasets.synthetic_ade20k import (
    SyntheticADE20KSpec,
    VARIANTS,
    chance_miou,
    generate_synthetic_ade20k,
    load_meta)
from mmseg_whitebox.utils.tool_error import ToolError


def parse_args(argv=None) -> argparse.Namespace:
    defaults = SyntheticADE20KSpec()
    p = tool_parser(__doc__)
    add_data_root_arg(p, 'where the dataset is written: the parent folder '
                      'of ADEChallengeData2016', required=True)
    p.add_argument('--variant', choices=VARIANTS, default=defaults.variant,
                   help='appearance: class from colour x texture; context: '
                   'class also depends on a landmark elsewhere in the image')
    p.add_argument('--num-classes', type=int, default=defaults.num_classes,
                   help='number of shape classes (besides the background '
                   'and, for context, the landmark)')
    p.add_argument('--num-train', type=int, default=defaults.num_train)
    p.add_argument('--num-val', type=int, default=defaults.num_val)
    add_shape_arg(p, 'largest image size; each image is randomly up to '
                  '--size-jitter smaller per side',
                  default=defaults.image_size)
    p.add_argument('--size-jitter', type=float, default=defaults.size_jitter)
    add_seed_arg(p, f'seed of the images (default {defaults.seed})',
                 defaults.seed)
    p.add_argument('--overwrite', action='store_true',
                   help='replace a different synthetic dataset in '
                   'DATA_ROOT')
    return p.parse_args(argv)


def main(argv=None) -> str:
    args = parse_args(argv)
    # bad settings: an InputError (a ToolError) from the spec's checks
    spec = SyntheticADE20KSpec(
        variant=args.variant, num_classes=args.num_classes,
        num_train=args.num_train, num_val=args.num_val,
        image_size=args.shape, size_jitter=args.size_jitter,
        seed=args.seed)
    start = time.time()
    try:
        root = generate_synthetic_ade20k(args.data_root, spec,
                                         overwrite=args.overwrite)
    except FileExistsError as exc:  # a folder it refuses to write into
        raise ToolError(str(exc)) from exc
    meta = load_meta(root)
    names = ', '.join(meta['classes_present'].values())
    print(f'{root}: {spec.num_train} training + {spec.num_val} validation '
          f'images ({time.time() - start:.1f}s)\n'
          f'classes present ({len(meta["classes_present"])}): {names}\n'
          f'chance mIoU (uniform guess among them): '
          f'{chance_miou(meta["val_pixel_counts"]):.2f}')
    return root


if __name__ == '__main__':
    run_tool(main)
