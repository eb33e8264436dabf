#!/usr/bin/env bash
# Training under Slurm: tools/slurm_train.sh PARTITION JOB_NAME CONFIG
# [WORK_DIR] [ARGS]  (--help)
set -euo pipefail
PROG=$(basename "$0")
TOOLS=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(dirname "$TOOLS")

usage() {
    cat <<USAGE
usage: $PROG PARTITION JOB_NAME CONFIG [WORK_DIR] [ARGS...]

Train CONFIG as Slurm job JOB_NAME on PARTITION: srun starts GPUS tasks of
tools/train.py --launcher slurm (one per GPU), --kill-on-bad-exit=1 so one
failing task stops the job. WORK_DIR (a first argument after CONFIG that
does not start with -) becomes --work-dir; ARGS go to tools/train.py
(--resume, --amp, --cfg-options ...).

On CPU nodes add --device cpu: no GPUs are asked for and the tasks
communicate with gloo (CPUS_PER_TASK cores each).

$SLURM_ENV_HELP

examples:
  GPUS=16 $PROG gpu cbsa configs/cbsa/cbsa_vit-s_8xb1-160k_ade20k-512x512.py work_dirs/cbsa
  GPUS=2 GPUS_PER_NODE=2 CPUS_PER_TASK=1 $PROG debug demo CONFIG --device cpu
USAGE
}

. "$TOOLS/_dist_common.sh"
. "$TOOLS/_slurm_common.sh"
slurm_parse 3 "PARTITION, JOB_NAME and CONFIG" "$@"
PARTITION=$1
JOB_NAME=$2
CONFIG=$3
shift 3
WORK_DIR=()
if [ $# -gt 0 ] && [[ $1 != -* ]]; then
    WORK_DIR=(--work-dir "$1")
    shift
fi
slurm_launch "$PARTITION" "$JOB_NAME" "$TOOLS/train.py" "$CONFIG" \
    --launcher slurm "${WORK_DIR[@]}" "$@"
