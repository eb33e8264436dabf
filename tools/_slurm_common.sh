# Shared by tools/slurm_train.sh and tools/slurm_test.sh (sourced, not run,
# after tools/_dist_common.sh, whose fail and find_python it uses).
# Starts one task per GPU (or CPU process) with srun; each task runs the
# tool with --launcher slurm, which reads its rank from srun's variables.

# The environment variables both scripts read, for their --help.
SLURM_ENV_HELP='environment:
  GPUS           tasks (processes) in all, one per GPU (default 8)
  GPUS_PER_NODE  tasks per node (default 8; at most GPUS)
  CPUS_PER_TASK  CPU cores per task (default 5)
  GRES           the generic resources asked per node (default
                 gpu:<tasks per node>); none asks for no GPUs, and so does
                 --device cpu among ARGS: a CPU-only cluster or CPU run
  SRUN_ARGS      more srun options, split at spaces (e.g. "--quotatype=auto")
  MASTER_PORT    rendezvous port (default 29500; use different ones for
                 concurrent jobs on one node)
  PYTHON         interpreter to use (see tools/dist_train.sh --help)'

# slurm_parse COUNT WHAT ARGS...: parse_count (tools/_dist_common.sh),
# then a partition, a job name and an existing config file
slurm_parse() {
    parse_count "$@"
    shift 2
    [ -n "$1" ] || fail "PARTITION is empty; name a Slurm partition (sinfo lists them)"
    [ -n "$2" ] || fail "JOB_NAME is empty"
    [ -f "$3" ] || fail "config file '$3' does not exist"
}

# slurm_positive NAME VALUE: VALUE must be a positive integer.
slurm_positive() {
    [[ $2 =~ ^[1-9][0-9]*$ ]] ||
        fail "$1 must be a positive integer, got '$2'; see $PROG --help"
}

# slurm_launch PARTITION JOB_NAME SCRIPT ARGS...: srun SCRIPT ARGS in GPUS
# tasks, GPUS_PER_NODE per node (ARGS carry --launcher slurm).
slurm_launch() {
    local partition=$1 job_name=$2 script=$3
    shift 3
    local gpus=${GPUS:-8} per_node=${GPUS_PER_NODE:-8}
    local cpus=${CPUS_PER_TASK:-5}
    slurm_positive GPUS "$gpus"
    slurm_positive GPUS_PER_NODE "$per_node"
    slurm_positive CPUS_PER_TASK "$cpus"
    [ "$per_node" -le "$gpus" ] || per_node=$gpus
    command -v srun >/dev/null ||
        fail "srun not found on PATH; run on a Slurm login node (or use tools/dist_train.sh / tools/dist_test.sh on one machine)"

    # the GPUs asked per node: none for a CPU run (--device cpu)
    local gres=${GRES-gpu:$per_node} prev= arg
    if [ -z "${GRES+set}" ]; then
        for arg in "$@"; do
            if [ "$arg" = --device=cpu ] ||
                { [ "$prev" = --device ] && [ "$arg" = cpu ]; }; then
                gres=none
            fi
            prev=$arg
        done
    fi
    local -a gres_opt=()
    [ -z "$gres" ] || [ "$gres" = none ] || gres_opt=("--gres=$gres")
    local -a extra=()
    read -r -a extra <<<"${SRUN_ARGS:-}"

    find_python
    hide_gpus_for_cpu "$@"
    describe_python
    local -a cmd=(srun -p "$partition" --job-name="$job_name"
        "${gres_opt[@]}" --ntasks="$gpus" --ntasks-per-node="$per_node"
        --cpus-per-task="$cpus" --kill-on-bad-exit=1 "${extra[@]}"
        "$PY" -u "$script" "$@")
    echo "$PROG: ${cmd[*]}" >&2
    PYTHONPATH="$REPO${PYTHONPATH:+:$PYTHONPATH}" exec "${cmd[@]}"
}
