"""Interpretability measurements of a trained white-box decoder.

    python tools/analysis_tools/coding_rate.py CONFIG CHECKPOINT \
        [--num-images 50] [--eps 0.1] [--maps 2] [--out DIR] \
        [--cfg-options k=v ...]

1. Per layer, the compression term R_c (CRATE eq. 8 / CBSA eq. 2, with the
   layer's own subspaces) and its normalised variant (unit-length tokens)
   of the residual stream entering and leaving the layer, averaged over
   --num-images test images (the CBSA paper's Fig. 5 measurement):
   OUT/coding_rate.{json,csv,png}.
2. For CBSA heads, the extraction attention maps (which pixels each
   representative gathers) of every layer overlaid on the first --maps test
   images (CBSA paper Fig. 7 style): OUT/extraction_<image>_layer<i>.png.
"""
import argparse
import os.path as osp

import mmseg_whitebox  # noqa: F401  (compat + registration first)
from mmseg_whitebox.analysis.coding_rate_report import coding_rate_report
from mmseg_whitebox.apis.model_index import read_config
from mmseg_whitebox.cli import (add_cfg_options_arg, add_device_arg,
                                run_tool, tool_parser)


def parse_args(argv=None) -> argparse.Namespace:
    p = tool_parser(__doc__)
    p.add_argument('config')
    p.add_argument('checkpoint')
    p.add_argument('--num-images', type=int, default=50,
                   help='test images to measure on (default 50)')
    p.add_argument('--eps', type=float, default=0.1,
                   help='quantisation precision epsilon (default 0.1, i.e. '
                   'eps^2 = 0.01 as the CBSA code)')
    p.add_argument('--maps', type=int, default=2,
                   help='images to draw CBSA extraction maps for (0: none)')
    p.add_argument('--out', help='output folder (default: work_dirs/'
                   'coding_rate/<config name>)')
    add_device_arg(p, 'cpu', 'where the model runs (default cpu)')
    add_cfg_options_arg(p)
    return p.parse_args(argv)


def main(argv=None) -> list:
    args = parse_args(argv)
    cfg = read_config(args.config, args.cfg_options)
    name = osp.splitext(osp.basename(args.config))[0]
    out = args.out or osp.join('work_dirs', 'coding_rate', name)
    report = coding_rate_report(cfg, args.checkpoint, out, args.num_images,
                                args.eps, args.maps, args.device, name)
    print(f'compression term R_c per decoder layer ({report["images"]} '
          f'images, eps {args.eps}); in -> out of each layer, own subspaces')
    print(f'{"layer":<34}{"R_c in":>10}{"R_c out":>10}{"norm in":>10}'
          f'{"norm out":>10}')
    for r in report['rows']:
        print(f'[{r["layer"]}] {r["site"]:<30}{r["rate_in_mean"]:>10.2f}'
              f'{r["rate_out_mean"]:>10.2f}{r["normalized_in_mean"]:>10.2f}'
              f'{r["normalized_out_mean"]:>10.2f}')
    print('wrote ' + ', '.join(report['files']))
    return report['files']


if __name__ == '__main__':
    run_tool(main)
