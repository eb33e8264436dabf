"""Robustness to input corruptions: the ImageNet-C benchmark for a segmentor.

    python tools/analysis_tools/test_corruption_robustness.py CONFIG \
        CHECKPOINT [--corruptions benchmark|all|NAME ...] \
        [--severities 1 2 3 4 5] [--seed 0] [--out DIR] [--resume] \
        [--cfg-options k=v ...]

Evaluates the model clean and under every corruption x severity, with the
config's test pipeline, test loop and IoUMetric (as tools/test.py): an
ImageCorruption transform (the imagecorruptions package's ImageNet-C
corruptions, deterministic per image) is inserted right after
LoadImageFromFile. Reports, as mmdetection's test_robustness.py:

    mPC = mean over corruptions c and severities s of mIoU(c, s)
    rPC = mPC / clean mIoU

Corruptions: names, or the groups benchmark (the 15 ImageNet-C ones, the
default), validation (speckle_noise, gaussian_blur, spatter, saturate),
noise, blur, weather, digital, all. Results are saved after each
evaluation (OUT/results.{json,csv}, OUT/table.{md,csv}); --resume skips
what is done. OUT/corruption_robustness.png plots mIoU against severity.
Needs the corruptions extra: pip install -e '.[corruptions]'.
"""
import argparse
import os.path as osp

import mmseg_whitebox  # noqa: F401  (compat + registration first)
from mmseg_whitebox.robustness import RunnerEvaluation
from mmseg_whitebox.robustness.corruptions import (
    SEVERITIES, CorruptionBenchmark, CorruptionError, CorruptionStore,
    build_corruption_runner, check_severities, find_corruption_transforms,
    load_imagecorruptions, markdown_table, resolve_corruptions)
from mmseg_whitebox.utils.cli import (ToolError, add_cfg_options_arg,
                                      add_checkpoint_check_args,
                                      check_checkpoint, checkpoint_check_hook,
                                      resumable, run_tool, tool_parser)
from mmseg_whitebox.utils.run_checks import reported_errors


def parse_args(argv=None) -> argparse.Namespace:
    p = tool_parser(__doc__)
    p.add_argument('config', help='config file path')
    p.add_argument('checkpoint', help='checkpoint file')
    p.add_argument('--corruptions', nargs='+', default=['benchmark'],
                   help='corruption names or groups (default: benchmark, '
                   'the 15 ImageNet-C corruptions)')
    p.add_argument('--severities', nargs='+', default=list(SEVERITIES),
                   help='severities, integers 1..5 (default: all five)')
    p.add_argument('--seed', type=int, default=0,
                   help='base seed of the per-image corruption seeds')
    p.add_argument('--out',
                   help='results folder (default: work_dirs/'
                   'corruption_robustness/<config name>)')
    p.add_argument('--resume', action='store_true',
                   help='continue the results in --out, skipping finished '
                   'evaluations')
    p.add_argument('--name', help='plot title label (default: config name)')
    p.add_argument('--work-dir',
                   help='folder for the Runner\'s logs (default: --out)')
    add_checkpoint_check_args(p)
    add_cfg_options_arg(p)
    return p.parse_args(argv)


def parse_severities(values) -> list:
    try:
        ints = [int(v) for v in values]
        if any(str(i) != str(v).strip() for i, v in zip(ints, values)):
            raise ValueError
    except ValueError:
        raise ToolError(f'--severities must be integers in 1..5, got '
                        f'{" ".join(map(str, values))}') from None
    try:
        return check_severities(ints)
    except CorruptionError as exc:
        raise ToolError(f'--severities: {exc}') from None


def main(argv=None):
    args = parse_args(argv)
    try:
        load_imagecorruptions()
        corruptions = resolve_corruptions(args.corruptions)
    except ImportError as exc:
        raise ToolError(str(exc)) from None
    except CorruptionError as exc:
        raise ToolError(f'--corruptions: {exc}') from None
    severities = parse_severities(args.severities)
    if not osp.isfile(args.config):
        raise ToolError(f'config file {args.config!r} does not exist')
    check_checkpoint(args.checkpoint)
    name = osp.splitext(osp.basename(args.config))[0]
    out = args.out or osp.join('work_dirs', 'corruption_robustness', name)
    try:
        CorruptionStore.check_out_dir(out, args.resume)
    except FileExistsError as exc:
        raise ToolError(str(exc)) from None
    setup = dict(config=args.config, checkpoint=args.checkpoint,
                 seed=args.seed, cfg_options=args.cfg_options or {},
                 metric='mIoU', name=args.name or name,
                 corruptions=corruptions, severities=severities)
    try:
        store = CorruptionStore(out, setup, resume=args.resume)
    except CorruptionError as exc:
        raise ToolError(str(exc)) from None

    try:
        runner = build_corruption_runner(args.config, args.checkpoint,
                                         args.cfg_options,
                                         args.work_dir or out, args.seed)
    except CorruptionError as exc:
        raise ToolError(str(exc)) from None
    runner.register_hook(checkpoint_check_hook(args))
    with reported_errors(runner.cfg):
        evaluation = RunnerEvaluation(runner)
    transforms = find_corruption_transforms(
        runner.test_loop.dataloader.dataset)
    bench = CorruptionBenchmark(evaluation, transforms, store,
                                on_progress=lambda s: print(s, flush=True))
    todo = bench.pending()
    print(f'{len(corruptions)} corruption(s) x {len(severities)} '
          f'severit{"y" if len(severities) == 1 else "ies"}: '
          f'{len(todo)} evaluation(s) to run'
          + (f' ({len(corruptions) * len(severities) + 1 - len(todo)} '
             'done before)' if args.resume else ''), flush=True)

    def plot():
        if store.data.get('clean') or store.data['results']:
            return store.plot(args.name or name)
        return None

    try:
        with resumable(out, 'evaluations', plot), \
                reported_errors(runner.cfg):
            bench.run()
    except CorruptionError as exc:
        raise ToolError(str(exc)) from None
    finally:
        evaluation.close()
    png = plot()
    summary = store.summary()
    print()
    print(markdown_table(summary, store.values(), severities))
    print(f'results: {osp.join(out, "results.json")}, '
          f'{osp.join(out, "table.md")}, {osp.join(out, "table.csv")}\n'
          f'plot: {png}')
    return store.data


if __name__ == '__main__':
    run_tool(main)
