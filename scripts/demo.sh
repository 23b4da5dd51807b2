#!/usr/bin/env bash
# The main job on the local default recipe, from a fresh machine:
#   set up, validate, launch the real P/D deployment (prefill + decode + router over NIXL),
#   send a completion through the router, prove the KV moved, stop everything.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"
RECIPE="${RECIPE:-recipes/local/tiny-hybrid-cpu.yaml}"
RECIPECTL_EXTRAS="" bash scripts/setup.sh   # the main job needs no test tools
RC=.venv/bin/recipectl

"$RC" validate "$RECIPE"
trap '"$RC" stop >/dev/null 2>&1 || true' EXIT
"$RC" launch "$RECIPE" --detach
echo
echo "== a completion through the router"
.venv/bin/python - <<'PY'
import httpx, json
r = httpx.post("http://127.0.0.1:30000/v1/completions", timeout=120,
               json={"model": "tiny", "prompt": "the quick brown fox jumps over the lazy dog " * 8,
                     "max_tokens": 16, "temperature": 0})
r.raise_for_status()
print(json.dumps(r.json()["choices"][0]["text"]))
PY
echo
echo "== doctor: health, P/D proof, parity, GSM8K pipeline (accuracy not gated on random weights)"
"$RC" doctor "$RECIPE" || status=$?
"$RC" stop
trap - EXIT
exit "${status:-0}"
