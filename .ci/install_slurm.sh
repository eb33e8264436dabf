#!/usr/bin/env bash
# Installs Debian's slurm-wlm and munge for tests/test_slurm.py, which starts
# a one-node Slurm on localhost. Exit 0: Slurm's programs are here (already,
# or installed now); exit 1, after one line saying why: they are not, and
# the real Slurm test will skip. Never fails the CI run by itself.
set -uo pipefail

PROGRAMS=(munged slurmctld slurmd srun sinfo scontrol)

missing() {
    local p
    for p in "${PROGRAMS[@]}"; do
        command -v "$p" >/dev/null || echo "$p"
    done
}

if [ -z "$(missing)" ]; then
    echo "install_slurm: slurm-wlm and munge already installed"
    exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
    echo "install_slurm: not root, so slurm-wlm and munge are not installed; the Slurm test (tests/test_slurm.py) will skip"
    exit 1
fi
if ! command -v apt-get >/dev/null; then
    echo "install_slurm: no apt-get (not Debian/Ubuntu); install slurm-wlm and munge by hand or the Slurm test will skip"
    exit 1
fi
log=$(mktemp)
start=$SECONDS
if ! { apt-get update -qq &&
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
        --no-install-recommends slurm-wlm munge; } >"$log" 2>&1; then
    tail -n 20 "$log"
    echo "install_slurm: apt-get install slurm-wlm munge failed (above); the Slurm test will skip"
    exit 1
fi
still=$(missing | tr '\n' ' ')
if [ -n "$still" ]; then
    echo "install_slurm: installed, but still missing: $still; the Slurm test will skip"
    exit 1
fi
echo "install_slurm: installed slurm-wlm and munge in $((SECONDS - start)) s"
