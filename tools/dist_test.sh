#!/usr/bin/env bash
# Distributed testing: tools/dist_test.sh CONFIG CHECKPOINT GPUS [ARGS]  (--help)
set -euo pipefail
PROG=$(basename "$0")
TOOLS=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(dirname "$TOOLS")

usage() {
    cat <<USAGE
usage: $PROG CONFIG CHECKPOINT GPUS [ARGS...]

Test CHECKPOINT of CONFIG with GPUS processes on this node: tools/test.py
--launcher pytorch, started by torchrun (python -m torch.distributed.run).
ARGS go to tools/test.py (--work-dir, --out, --show-dir, --cfg-options ...).
The metrics equal a one-process run's.

GPUS is the number of processes: one per GPU, or, with --device cpu in
ARGS, CPU processes. The script first prints the Python, torch and CUDA
devices it starts with; when the processes stop on a user's error, its
line comes last and the exit status is 2.

$DIST_ENV_HELP

example:
  $PROG configs/cbsa/cbsa_vit-s_8xb1-160k_ade20k-512x512.py work_dirs/x/iter_160000.pth 8
USAGE
}

. "$TOOLS/_dist_common.sh"
parse_common 3 "CONFIG, CHECKPOINT and GPUS" "$@"
CONFIG=$1
CHECKPOINT=$2
NPROC=$3
shift 3
check_nproc "$NPROC"
[[ $CHECKPOINT == *://* || -f $CHECKPOINT ]] ||
    fail "checkpoint '$CHECKPOINT' does not exist"
launch "$TOOLS/test.py" "$CONFIG" "$CHECKPOINT" --launcher pytorch "$@"
