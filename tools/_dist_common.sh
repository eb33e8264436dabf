# Shared by tools/dist_train.sh and tools/dist_test.sh (sourced, not run).
# Finds the Python to launch with and starts torchrun through it, so that
# nothing needs to be on PATH (no `torchrun` command, no activated venv).

# The interpreter, into PY (and where it came from into PY_FROM): $PYTHON
# if set, else the active virtualenv's, else the active conda
# environment's, else this checkout's .venv, else python3/python on PATH.
find_python() {
    if [ -n "${PYTHON:-}" ]; then
        PY=$PYTHON PY_FROM=PYTHON
    elif [ -n "${VIRTUAL_ENV:-}" ] && [ -x "$VIRTUAL_ENV/bin/python" ]; then
        PY=$VIRTUAL_ENV/bin/python PY_FROM=VIRTUAL_ENV
    elif [ -n "${CONDA_PREFIX:-}" ] && [ -x "$CONDA_PREFIX/bin/python" ]; then
        PY=$CONDA_PREFIX/bin/python PY_FROM=CONDA_PREFIX
    elif [ -x "$REPO/.venv/bin/python" ]; then
        PY=$REPO/.venv/bin/python PY_FROM="this checkout's .venv"
    else
        PY=$(command -v python3 || command -v python || true)
        PY_FROM=PATH
    fi
}

# One line on stderr: the Python, its torch and the CUDA devices the
# processes start with (exit 2 when that Python has no torch); what torch
# sees goes into SEEN, the number of visible CUDA devices into GPUS_SEEN.
describe_python() {
    local seen
    seen=$("$PY" -c '
import os, torch
n = torch.cuda.device_count() if torch.cuda.is_available() else 0
v = os.environ.get("CUDA_VISIBLE_DEVICES")
print("torch %s, CUDA %s, %d CUDA device(s) visible (CUDA_VISIBLE_DEVICES=%s)"
      % (torch.__version__, torch.version.cuda or "none", n,
         "unset" if v is None else repr(v)))' 2>/dev/null) ||
        fail "no Python with torch found (tried '${PY:-python3}' from $PY_FROM); run \`make install\`, activate the environment that has torch, or set PYTHON=/path/to/venv/bin/python"
    echo "$PROG: Python $PY (from $PY_FROM): $seen" >&2
    SEEN=$seen
    GPUS_SEEN=0
    if [[ $seen =~ ,\ ([0-9]+)\ CUDA\ device ]]; then
        GPUS_SEEN=${BASH_REMATCH[1]}
    fi
}

# check_gpus: one process per GPU needs NPROC visible GPUs on this node;
# fewer would die in torch.cuda.set_device with a traceback (not checked
# for CPU processes, --device cpu)
check_gpus() {
    [ -n "${CPU_PROCESSES:-}" ] && return 0
    [ "$NPROC" -le "${GPUS_SEEN:-0}" ] && return 0
    if [ "${GPUS_SEEN:-0}" -eq 0 ]; then
        fail "GPUS=$NPROC: one process per GPU, but torch sees no CUDA device ($SEEN), and a launched run does not fall back to the CPU unasked. For CPU processes (gloo) add --device cpu; for GPUs install a CUDA build of torch or check the driver (nvidia-smi) and CUDA_VISIBLE_DEVICES"
    fi
    fail "GPUS=$NPROC: one process per GPU, but torch sees $GPUS_SEEN CUDA device(s) on this node ($SEEN): give GPUS=$GPUS_SEEN or fewer, make more GPUs visible (CUDA_VISIBLE_DEVICES), or add --device cpu for CPU processes (gloo)"
}

# The environment variables both scripts read, for their --help.
DIST_ENV_HELP='environment:
  PYTHON        interpreter to use (default: the active virtualenv'"'"'s
                ($VIRTUAL_ENV), else the active conda environment'"'"'s
                ($CONDA_PREFIX), else this checkout'"'"'s .venv/bin/python,
                else python3)
  PORT          master port (default 29500; use different ones for
                concurrent runs)
  NNODES, NODE_RANK, MASTER_ADDR   multi-node runs (defaults 1, 0, 127.0.0.1)

devices: one process per GPU (NCCL); GPUS larger than the number of GPUs
torch sees on this node (0 without one) stops the script before torchrun,
exit 2, unless ARGS has --device cpu: then GPUS processes run on the CPU
and communicate with gloo (GPUs, if any, are hidden from them).'

# parse_count COUNT WHAT ARGS...: --help, then at least COUNT arguments
# (WHAT names them; needs usage()); shared with tools/_slurm_common.sh
parse_count() {
    local count=$1 what=$2
    shift 2
    case "${1:-}" in
        -h | --help) usage; exit 0 ;;
    esac
    if [ $# -lt "$count" ]; then
        usage >&2
        fail "expected $what, got $# argument(s)"
    fi
}

# parse_common COUNT WHAT ARGS...: parse_count, the first argument an
# existing config file
parse_common() {
    parse_count "$@"
    [ -f "$3" ] || fail "config file '$3' does not exist"
}

fail() {
    echo "$PROG: error: $*" >&2
    exit 2
}

check_nproc() {
    [[ $1 =~ ^[1-9][0-9]*$ ]] ||
        fail "GPUS must be the number of processes per node (a positive integer), got '$1'; see $PROG --help"
}

# hide_gpus_for_cpu ARGS...: with --device cpu among the tool's arguments,
# CUDA_VISIBLE_DEVICES='' for the processes (CUDA hidden before it starts)
# and CPU_PROCESSES=1
hide_gpus_for_cpu() {
    local arg previous=
    CPU_PROCESSES=
    for arg in "$@"; do
        if [ "$arg" = --device=cpu ] ||
            { [ "$previous" = --device ] && [ "$arg" = cpu ]; }; then
            export CUDA_VISIBLE_DEVICES=
            CPU_PROCESSES=1
        fi
        previous=$arg
    done
}

# launch SCRIPT ARGS...: one process per GPU (or CPU process) via torchrun.
# A rank that stops on a user's error adds its line to the file
# $MMSEG_WHITEBOX_ERROR_FILE names (mmseg_whitebox/cli/errors.py); when
# torchrun fails, those lines are repeated last, below torchrun's report,
# and the exit status is 2.
launch() {
    local errors status=0
    find_python
    hide_gpus_for_cpu "$@"
    describe_python
    check_gpus
    errors=$(mktemp "${TMPDIR:-/tmp}/mmseg_whitebox-errors.XXXXXX") ||
        fail "cannot create a temporary file in ${TMPDIR:-/tmp}"
    MMSEG_WHITEBOX_ERROR_FILE=$errors \
        PYTHONPATH="$REPO${PYTHONPATH:+:$PYTHONPATH}" "$PY" \
        -m torch.distributed.run \
        --nnodes="${NNODES:-1}" \
        --node_rank="${NODE_RANK:-0}" \
        --master_addr="${MASTER_ADDR:-127.0.0.1}" \
        --nproc_per_node="$NPROC" \
        --master_port="${PORT:-29500}" \
        "$@" &
    TORCHRUN_PID=$!
    # a signal to this script goes on to torchrun, which stops the ranks
    trap 'kill -TERM "$TORCHRUN_PID" 2>/dev/null' TERM INT HUP
    wait "$TORCHRUN_PID" || status=$?
    # a trapped signal ends `wait` early: wait for torchrun's own exit
    while kill -0 "$TORCHRUN_PID" 2>/dev/null; do
        status=0
        wait "$TORCHRUN_PID" || status=$?
    done
    trap - TERM INT HUP
    if [ "$status" -ne 0 ] && [ -s "$errors" ]; then
        awk '!seen[$0]++' "$errors" >&2
        rm -f "$errors"
        exit 2
    fi
    rm -f "$errors"
    exit "$status"
}
