#!/usr/bin/env bash
# Distributed training with torchrun: tools/dist_train.sh CONFIG GPUS [ARGS]
# e.g. tools/dist_train.sh configs/cbsa/cbsa_vit-s_8xb1-160k_ade20k-512x512.py 8
# Multi-node: set NNODES, NODE_RANK, MASTER_ADDR, PORT.
set -euo pipefail
CONFIG=$1
GPUS=$2
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
    "$TOOLS/train.py" "$CONFIG" --launcher pytorch "${@:3}"
