#!/usr/bin/env bash
# Install Slurm (Debian's slurm-wlm) and munge, for the Slurm tests (tests/slurm_support.py starts
# its own munged/slurmctld/slurmd from a temp dir; the system services are not used), and iproute2
# + util-linux, with which the two-node cluster makes a network namespace per node (ip, nsenter,
# unshare). Idempotent; needs root and apt-get. Exits non-zero on failure.
set -euo pipefail
log() { printf '[install-slurm] %s\n' "$*" >&2; }

have_all() {
  local b
  for b in sbatch srun squeue sinfo scancel scontrol slurmctld slurmd munged mungekey ip nsenter unshare; do
    command -v "$b" >/dev/null 2>&1 || [[ -x "/usr/sbin/$b" ]] || return 1
  done
}

if have_all; then
  log "slurm-wlm, munge and iproute2 already installed"
  exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
  log "apt-get not found: install slurm-wlm and munge by hand"
  exit 1
fi
if [[ "$(id -u)" != 0 ]]; then
  log "must run as root to apt-get install slurm-wlm munge"
  exit 1
fi

export DEBIAN_FRONTEND=noninteractive
APT=(apt-get -y -q -o DPkg::Lock::Timeout=300 -o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold)
out="$(mktemp)"
trap 'rm -f "$out"' EXIT
log "installing slurm-wlm and munge"
if ! "${APT[@]}" install --no-install-recommends slurm-wlm munge iproute2 util-linux >"$out" 2>&1; then
  log "install failed; running apt-get update and retrying"
  if ! { "${APT[@]}" update >"$out" 2>&1 && "${APT[@]}" install --no-install-recommends slurm-wlm munge iproute2 util-linux >"$out" 2>&1; }; then
    tail -n 30 "$out" >&2
    log "could not install slurm-wlm and munge"
    exit 1
  fi
fi
if ! have_all; then
  tail -n 30 "$out" >&2
  log "slurm-wlm/munge installed but some binaries are missing"
  exit 1
fi
log "installed: $(dpkg-query -W -f='${Package} ${Version}\n' slurm-wlm munge | tr '\n' ' ')"
