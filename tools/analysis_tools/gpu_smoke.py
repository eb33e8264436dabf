"""A GPU check in minutes: every published head and the CBT encoder train in
float32, bfloat16 and float16, then once under DDP.

    python tools/analysis_tools/gpu_smoke.py --out DIR [--device cuda] \
        [--dry-run]

On the visible GPUs: each published decode head (CBSA over-parameterised
and rigorous, MSSA self- and cross-attention, TSSA, Segmenter's mask and
linear heads) on ViT-T, and the CBT-T encoder under its CBSA head, 20
training iterations of 512x512 crops (batch 4) in float32 and with
mmengine's AmpOptimWrapper (dynamic loss scale) in bfloat16 and float16,
from the same weights on the same batches. Checks that every loss is
finite and the last one within 5% of float32's, and reports how many
steps the loss scaler skipped and which scaled-dot-product kernel each
attention ran; then one DDP run (torchrun, one process per visible GPU;
with one GPU the row says "skipped: one GPU"). Writes DIR/gpu_smoke.md
(the tables, with the device name, torch version and date),
DIR/gpu_smoke.json and DIR/ddp.log; exits 1 when a check failed. Meant to
take under 5 minutes on one current GPU. Without a GPU it stops with one
line, exit status 2 (as tools/train.py --device cuda); --dry-run runs the
same plan on the CPU at tiny sizes (DDP as 2 gloo processes). See
docs/benchmarks.md ("GPU smoke check").
"""
import argparse

import mmseg_whitebox  # noqa: F401  (compat + registration first)
from mmseg_whitebox.cli import run_tool, tool_parser
from mmseg_whitebox.cli.options import add_device_arg, add_out_arg


def parse_args(argv=None) -> argparse.Namespace:
    p = tool_parser(__doc__)
    add_out_arg(p, 'folder for gpu_smoke.md, gpu_smoke.json and ddp.log',
                required=True)
    from mmseg_whitebox.analysis.gpu_smoke import NO_GPU_REMEDY
    add_device_arg(p, 'cuda', 'cuda or cuda:N (default: cuda)',
                   remedy=NO_GPU_REMEDY)
    p.add_argument('--dry-run', action='store_true',
                   help='the same plan on the CPU at tiny sizes')
    return p.parse_args(argv)


def main(argv=None) -> None:
    args = parse_args(argv)
    from mmseg_whitebox.analysis.gpu_smoke import REPORT, run_gpu_smoke
    from mmseg_whitebox.utils.tool_error import CheckFailedError
    report = run_gpu_smoke(args.out, args.device, args.dry_run)
    print(f'\nwritten to {args.out}: {REPORT}, gpu_smoke.json, ddp.log')
    if not report['passed']:  # exit 1, one line
        raise CheckFailedError('some checks failed: see the note column '
                               f'of {args.out}/{REPORT}')


if __name__ == '__main__':
    run_tool(main)
