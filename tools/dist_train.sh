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

environment:
  PYTHON        interpreter to use (default: the active virtualenv's, else
                this checkout's .venv/bin/python, else python3)
  PORT          master port (default 29500; use different ones for
                concurrent runs)
  NNODES, NODE_RANK, MASTER_ADDR   multi-node runs (defaults 1, 0, 127.0.0.1)

example:
  $PROG configs/cbsa/cbsa_vit-s_8xb1-160k_ade20k-512x512.py 8
USAGE
}

case "${1:-}" in
    -h | --help) usage; exit 0 ;;
esac
. "$TOOLS/_dist_common.sh"
if [ $# -lt 2 ]; then
    usage >&2
    fail "expected CONFIG and GPUS, got $# argument(s)"
fi
CONFIG=$1
NPROC=$2
shift 2
check_nproc "$NPROC"
[ -f "$CONFIG" ] || fail "config file '$CONFIG' does not exist"
launch "$TOOLS/train.py" "$CONFIG" --launcher pytorch "$@"
