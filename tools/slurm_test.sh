#!/usr/bin/env bash
# Testing under Slurm: tools/slurm_test.sh PARTITION JOB_NAME CONFIG
# CHECKPOINT [ARGS]  (--help)
set -euo pipefail
PROG=$(basename "$0")
TOOLS=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(dirname "$TOOLS")

usage() {
    cat <<USAGE
usage: $PROG PARTITION JOB_NAME CONFIG CHECKPOINT [ARGS...]

Test CHECKPOINT of CONFIG as Slurm job JOB_NAME on PARTITION: srun starts
GPUS tasks of tools/test.py --launcher slurm (one per GPU),
--kill-on-bad-exit=1. ARGS go to tools/test.py (--work-dir, --out,
--show-dir, --cfg-options ...). The metrics equal a one-process run's.

On CPU nodes add --device cpu: no GPUs are asked for and the tasks
communicate with gloo (CPUS_PER_TASK cores each).

$SLURM_ENV_HELP

example:
  $PROG gpu cbsa-test configs/cbsa/cbsa_vit-s_8xb1-160k_ade20k-512x512.py work_dirs/cbsa/iter_161728.pth
USAGE
}

. "$TOOLS/_dist_common.sh"
. "$TOOLS/_slurm_common.sh"
slurm_parse 4 "PARTITION, JOB_NAME, CONFIG and CHECKPOINT" "$@"
PARTITION=$1
JOB_NAME=$2
CONFIG=$3
CHECKPOINT=$4
shift 4
[[ $CHECKPOINT == *://* || -f $CHECKPOINT ]] ||
    fail "checkpoint '$CHECKPOINT' does not exist"
slurm_launch "$PARTITION" "$JOB_NAME" "$TOOLS/test.py" "$CONFIG" \
    "$CHECKPOINT" --launcher slurm "$@"
