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

GPUS is the number of processes: one per GPU; on a machine without CUDA the
processes run on the CPU and communicate with gloo.

environment:
  PYTHON        interpreter to use (default: the active virtualenv's, else
                this checkout's .venv/bin/python, else python3)
  PORT          master port (default 29500; use different ones for
                concurrent runs)
  NNODES, NODE_RANK, MASTER_ADDR   multi-node runs (defaults 1, 0, 127.0.0.1)

example:
  $PROG configs/cbsa/cbsa_vit-s_8xb1-160k_ade20k-512x512.py work_dirs/x/iter_160000.pth 8
USAGE
}

case "${1:-}" in
    -h | --help) usage; exit 0 ;;
esac
. "$TOOLS/_dist_common.sh"
if [ $# -lt 3 ]; then
    usage >&2
    fail "expected CONFIG, CHECKPOINT and GPUS, got $# argument(s)"
fi
CONFIG=$1
CHECKPOINT=$2
NPROC=$3
shift 3
check_nproc "$NPROC"
[ -f "$CONFIG" ] || fail "config file '$CONFIG' does not exist"
[[ $CHECKPOINT == *://* || -f $CHECKPOINT ]] ||
    fail "checkpoint '$CHECKPOINT' does not exist"
launch "$TOOLS/test.py" "$CONFIG" "$CHECKPOINT" --launcher pytorch "$@"
