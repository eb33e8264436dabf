#!/usr/bin/env bash
# Distributed training: tools/dist_train.sh CONFIG GPUS [ARGS]  (--help)
set -euo pipefail
PROG=$(basename "$0")
TOOLS=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(dirname "$TOOLS")

usage() {
    cat <<USAGE
usage: $PROG CONFIG GPUS [ARGS...]

Train CONFIG with GPUS processes on this node: tools/train.py --launcher
pytorch, started by torchrun (python -m torch.distributed.run). ARGS go to
tools/train.py (--work-dir, --resume, --cfg-options ...).

GPUS is the number of processes: one per GPU, or, with --device cpu in
ARGS, CPU processes. The script first prints the Python, torch and CUDA
devices it starts with; when the processes stop on a user's error, its
line comes last and the exit status is 2.

$DIST_ENV_HELP

example:
  $PROG configs/cbsa/cbsa_vit-s_8xb1-160k_ade20k-512x512.py 8
  $PROG configs/segmenter/segmenter_vit-demo_mask_1xb8-800iter_synthade-128x128.py 2 --device cpu
USAGE
}

. "$TOOLS/_dist_common.sh"
parse_common 2 "CONFIG and GPUS" "$@"
CONFIG=$1
NPROC=$2
shift 2
check_nproc "$NPROC"
launch "$TOOLS/train.py" "$CONFIG" --launcher pytorch "$@"
