"""Time onnxruntime against PyTorch: whole-image inference of the demo models.

    python tools/analysis_tools/benchmark_onnx.py \
        [--models segmenter cbsa ...] [--shape 512 683] [--threads N] \
        [--repeats 5] [--warmup 1] [--out work_dirs/benchmark_onnx]

Each demo model (make demo's configs; default: all of them but mmseg's
attention heads, nonlocal, danet, isanet and ann) is built with
random weights, exported with --dynamic and its deployment metadata, and
predicts one image both ways: OnnxSegmentor (onnxruntime, CPU) and mmseg's
inference_model (PyTorch, CPU), end to end and the network alone. One line
per model: the median times, their ratio (onnxruntime / PyTorch), the
argmax agreement and the largest logit difference of the two predictions.
Writes benchmark.json, benchmark.md and the graphs to --out. Needs the
deploy extra. The last measurements are in docs/benchmarks.md ("ONNX
inference").
"""
import argparse

import mmseg_whitebox  # noqa: F401  (compat + registration first)
from mmseg_whitebox.analysis import benchmark as common
from mmseg_whitebox.apis import config_path
from mmseg_whitebox.apis.demo_models import (DEMO_MODELS,
                                             MMSEG_ATTENTION_HEADS)
from mmseg_whitebox.cli import run_tool, tool_parser
from mmseg_whitebox.cli.options import (add_models_arg, add_out_arg,
                                        add_seed_arg, add_shape_arg,
                                        add_threads_arg, add_timing_args,
                                        check_measurement_args)
from mmseg_whitebox.utils.tool_error import ToolError


def parse_args(argv=None) -> argparse.Namespace:
    p = tool_parser(__doc__)
    add_models_arg(p, DEMO_MODELS, [name for name in DEMO_MODELS
                                    if name not in MMSEG_ATTENTION_HEADS],
                   'demo models to time (default: all but '
                   f'{", ".join(MMSEG_ATTENTION_HEADS)})')
    add_shape_arg(p, 'the image predicted', default=(512, 683), minimum=16)
    add_threads_arg(p, 'CPU threads of torch and onnxruntime alike')
    add_timing_args(p, repeats=5, warmup=1)
    add_seed_arg(p, 'seed of the random weights and image (default 0)')
    add_out_arg(p, 'output folder (default: work_dirs/benchmark_onnx)',
                default='work_dirs/benchmark_onnx')
    args = p.parse_args(argv)
    check_measurement_args(p, args)
    if args.threads is not None and args.threads < 1:
        p.error('--threads must be >= 1')
    return args


def main(argv=None):
    args = parse_args(argv)
    from mmseg_whitebox.analysis.onnx_benchmark import benchmark_onnx
    try:
        configs = {name: config_path(DEMO_MODELS[name])
                   for name in args.models}
    except FileNotFoundError as exc:
        raise ToolError(str(exc)) from exc
    options = common.BenchmarkOptions(repeats=args.repeats,
                                      warmup=args.warmup, max_seconds=None,
                                      seed=args.seed)
    report = benchmark_onnx(configs, args.out, args.shape,
                            args.threads, options)
    print(f'\nwritten to {args.out}: benchmark.json, benchmark.md')
    return report


if __name__ == '__main__':
    run_tool(main)
