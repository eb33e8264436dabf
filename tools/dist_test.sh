#!/usr/bin/env bash
# Distributed testing with torchrun: tools/dist_test.sh CONFIG CHECKPOINT GPUS [ARGS]
# Multi-node: set NNODES, NODE_RANK, MASTER_ADDR, PORT.
set -euo pipefail
CONFIG=$1
CHECKPOINT=$2
GPUS=$3
NNODES=${NNODES:-1}
NODE_RANK=${NODE_RANK:-0}
PORT=${PORT:-29500}
MASTER_ADDR=${MASTER_ADDR:-127.0.0.1}
TOOLS=$(dirname "$0")
PYTHONPATH="$TOOLS/..${PYTHONPATH:+:$PYTHONPATH}" \
torchrun \
    --nnodes="$NNODES" \
    --node_rank="$NODE_RANK" \
    --master_addr="$MASTER_ADDR" \
    --nproc_per_node="$GPUS" \
    --master_port="$PORT" \
    "$TOOLS/test.py" "$CONFIG" "$CHECKPOINT" --launcher pytorch "${@:4}"
