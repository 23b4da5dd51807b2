#!/usr/bin/env bash
# Make the tiny random-weight hybrid model of the local recipe (fixed seed, no hub access).
# Idempotent: does nothing when the model is already there with the same parameters.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
VENV="${RECIPECTL_ENGINE_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/recipectl/engine}"
OUT="${1:-${XDG_CACHE_HOME:-$HOME/.cache}/recipectl/models/qwen3next-tiny}"
KIND="${KIND:-hybrid}"
if [[ ! -x "$VENV/bin/python" ]]; then
  echo "no engine in $VENV: run scripts/install-engine.sh first" >&2
  exit 1
fi
PYTHONPATH="$ROOT" HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 \
  "$VENV/bin/python" -m recipectl.tinymodel --out "$OUT" --kind "$KIND" --seed "${SEED:-0}"
