"""Export a segmentor to ONNX and check it with onnxruntime against PyTorch.

    python tools/deployment/export_onnx.py CONFIG CHECKPOINT --shape H [W] \
        --out-file FILE [--dynamic] [--check-shapes H[xW] ...] [--opset N] \
        [--check-image IMAGE] [--json REPORT] [--cfg-options k=v ...]

The whole segmentor (encoder + decode head, white-box or Segmenter) in
tensor mode, plus the bilinear resize to the input size: the graph maps a
normalised image (1, 3, H, W) (after mmseg's data preprocessing: mean/std,
BGR->RGB) to the seg_logits (1, classes, H, W) that inference_model
returns in whole mode. Exported with torch's dynamo exporter, standard
ONNX operators only; --dynamic leaves H and W free (any size of at least
one token per side, and as many as CBSA's representatives grid needs).
The graph's metadata holds what runs around it from an image to
inference_model's prediction (the config's test resize, normalisation,
padding, whole or sliding-window inference, classes, palette): see
mmseg_whitebox.deployment.OnnxSegmentor and
tools/deployment/onnx_inference.py.

The graph is then run with onnxruntime (CPU) and compared with PyTorch on
random inputs at the export shape and, with --dynamic, at --check-shapes
sizes (default: one non-square size). It prints the largest logit
difference and the argmax agreement per size. --out-file is written only when
the agreement everywhere is at least --min-agreement (99.9%); otherwise
the graph is kept as OUT_STEM.failed.onnx, the tool says so and exits
with status 1 (bad input exits with 2, before anything is written). With
--check-image, OnnxSegmentor and inference_model also predict that image
and are compared the same way. Needs the deploy extra: pip install -c
constraints.txt -e ".[deploy]".
"""
import argparse

import mmseg_whitebox  # noqa: F401  (compat + registration first)
from mmseg_whitebox.cli import add_cfg_options_arg, run_tool, tool_parser
from mmseg_whitebox.cli.options import (add_json_arg, add_out_file_arg,
                                        add_shape_arg, add_shapes_arg)


def parse_args(argv=None) -> argparse.Namespace:
    p = tool_parser(__doc__)
    p.add_argument('config')
    p.add_argument('checkpoint')
    add_shape_arg(p, 'input size of the export', required=True)
    add_out_file_arg(p, 'the .onnx file to write', required=True)
    p.add_argument('--dynamic', action='store_true',
                   help='free input height and width (batch stays 1)')
    add_shapes_arg(p, 'with --dynamic: other sizes to check (default: 3/4 '
                   'of H x 5/4 of W in whole patches)', flag='--check-shapes')
    p.add_argument('--opset', type=int, default=None,
                   help='ONNX opset (default: the exporter\'s)')
    p.add_argument('--min-agreement', type=float, default=0.999,
                   help='fail below this argmax agreement (default 0.999)')
    p.add_argument('--check-image', metavar='IMAGE',
                   help='also compare OnnxSegmentor with inference_model '
                   'on this image (logits and argmax)')
    add_json_arg(p, 'also write the parity report here')
    add_cfg_options_arg(p)
    return p.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    from mmseg_whitebox.deployment.onnx_export import export_and_check
    report = export_and_check(
        args.config, args.checkpoint, args.out_file, args.shape,
        dynamic=args.dynamic, opset=args.opset,
        other_shapes=args.check_shapes, cfg_options=args.cfg_options,
        min_agreement=args.min_agreement, report_file=args.json,
        check_image=args.check_image)
    print(f'wrote {args.out_file}')
    return report


if __name__ == '__main__':
    run_tool(main)
