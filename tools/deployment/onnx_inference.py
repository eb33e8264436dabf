"""Overlay the predictions of an exported model, run with onnxruntime.

    python tools/deployment/onnx_inference.py MODEL.onnx IMAGE_OR_FOLDER \
        --out DIR [--provider NAME ...] [--opacity 0.5] [--threads N]

MODEL.onnx is a graph written by tools/deployment/export_onnx.py (with
--dynamic for images of any size): its metadata holds the config's test
resize, normalisation, padding, inference mode (whole or sliding window),
classes and palette, and each image goes through them around the graph
(mmseg_whitebox.deployment.OnnxSegmentor; no torch needed for that
part). Each image's prediction, at the image's size, is drawn over it in
DIR/<image name>.png with a title naming the model and the image and a
legend of the classes present; a folder's images get a progress bar.
Execution providers: CPUExecutionProvider by default, any that this
onnxruntime has with --provider (in order of preference).
"""
import argparse

import mmseg_whitebox  # noqa: F401  (compat + registration first)
from mmseg_whitebox.cli import run_tool, tool_parser
from mmseg_whitebox.cli.options import add_out_arg, add_threads_arg
from mmseg_whitebox.deployment.onnx_inference import onnx_inference


def parse_args(argv=None) -> argparse.Namespace:
    p = tool_parser(__doc__)
    p.add_argument('model', metavar='MODEL.onnx',
                   help='a graph written by export_onnx.py')
    p.add_argument('img', metavar='IMAGE_OR_FOLDER',
                   help='an image file, or a folder of images')
    add_out_arg(p, 'folder for the overlays (<image name>.png each)',
                required=True)
    p.add_argument('--provider', nargs='+', default=None, metavar='NAME',
                   help='onnxruntime execution providers, in order of '
                   'preference (default: CPUExecutionProvider)')
    p.add_argument('--opacity', type=float, default=0.5,
                   help='opacity of the painted prediction, in (0, 1] '
                   '(default 0.5)')
    add_threads_arg(p, "onnxruntime's CPU threads (default: its choice)")
    return p.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    images, written = onnx_inference(
        args.model, args.img, args.out, providers=args.provider,
        opacity=args.opacity, threads=args.threads)
    print(f'\nwrote {len(written)} overlay(s) to {args.out}')
    return written


if __name__ == '__main__':
    run_tool(main)
