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

GPUS is the number of processes: one per GPU; on a machine without CUDA the
processes run on the CPU and communicate with gloo.

$DIST_ENV_HELP

example:
  $PROG configs/cbsa/cbsa_vit-s_8xb1-160k_ade20k-512x512.py 8
USAGE
}

. "$TOOLS/_dist_common.sh"
parse_common 2 "CONFIG and GPUS" "$@"
CONFIG=$1
NPROC=$2
shift 2
check_nproc "$NPROC"
launch "$TOOLS/train.py" "$CONFIG" --launcher pytorch "$@"
