# Shared by tools/dist_train.sh and tools/dist_test.sh (sourced, not run).
# Finds the Python to launch with and starts torchrun through it, so that
# nothing needs to be on PATH (no `torchrun` command, no activated venv).

# The interpreter: $PYTHON if set, else the active virtualenv's, else this
# checkout's .venv, else python3/python on PATH.
find_python() {
    local candidate
    if [ -n "${PYTHON:-}" ]; then
        candidate=$PYTHON
    elif [ -n "${VIRTUAL_ENV:-}" ] && [ -x "$VIRTUAL_ENV/bin/python" ]; then
        candidate=$VIRTUAL_ENV/bin/python
    elif [ -x "$REPO/.venv/bin/python" ]; then
        candidate=$REPO/.venv/bin/python
    else
        candidate=$(command -v python3 || command -v python || true)
    fi
    if [ -z "$candidate" ] || ! "$candidate" -c \
        'import importlib.util as u, sys; sys.exit(u.find_spec("torch") is None)' \
        2>/dev/null; then
        fail "no Python with torch found (tried '${candidate:-python3}'); run \`make install\` or set PYTHON=/path/to/venv/bin/python"
    fi
    echo "$candidate"
}

# The environment variables both scripts read, for their --help.
DIST_ENV_HELP='environment:
  PYTHON        interpreter to use (default: the active virtualenv'"'"'s, else
                this checkout'"'"'s .venv/bin/python, else python3)
  PORT          master port (default 29500; use different ones for
                concurrent runs)
  NNODES, NODE_RANK, MASTER_ADDR   multi-node runs (defaults 1, 0, 127.0.0.1)'

# parse_common COUNT WHAT ARGS...: --help, then at least COUNT arguments
# (WHAT names them), the first an existing config file (needs usage()).
parse_common() {
    local count=$1 what=$2
    shift 2
    case "${1:-}" in
        -h | --help) usage; exit 0 ;;
    esac
    if [ $# -lt "$count" ]; then
        usage >&2
        fail "expected $what, got $# argument(s)"
    fi
    [ -f "$1" ] || fail "config file '$1' does not exist"
}

fail() {
    echo "$PROG: error: $*" >&2
    exit 2
}

check_nproc() {
    [[ $1 =~ ^[1-9][0-9]*$ ]] ||
        fail "GPUS must be the number of processes per node (a positive integer), got '$1'; see $PROG --help"
}

# launch SCRIPT ARGS...: one process per GPU (or CPU process) via torchrun
launch() {
    local python
    python=$(find_python)
    PYTHONPATH="$REPO${PYTHONPATH:+:$PYTHONPATH}" exec "$python" \
        -m torch.distributed.run \
        --nnodes="${NNODES:-1}" \
        --node_rank="${NODE_RANK:-0}" \
        --master_addr="${MASTER_ADDR:-127.0.0.1}" \
        --nproc_per_node="$NPROC" \
        --master_port="${PORT:-29500}" \
        "$@"
}
