# shellcheck shell=bash
# Sourced by the GPU drivers (gpu-planner-evidence.sh, gpu-settings-sweep.sh) after they set ROOT,
# OUT, ENGINE and MODELS: the environment the engine inherits, log(), rc() (this checkout's
# recipectl), the engine installed from BUNDLE when ENGINE has none, and make_model.
mkdir -p "$OUT"
# Hosts that share GPUs keep NVLink multicast off; the engine inherits these.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 VLLM_NO_USAGE_STATS=1
export RECIPECTL_ENGINE_VENV="$ENGINE"
START=$(date +%s)
log() { echo "[$(date +%T) +$(( $(date +%s) - START ))s] $*" | tee -a "$OUT/driver.log"; }

if [[ ! -x "$ENGINE/bin/vllm" ]]; then
  [[ -n "${BUNDLE:-}" ]] || { log "no engine in $ENGINE and no BUNDLE"; exit 2; }
  bash "$ROOT/scripts/install-offline-bundle.sh" "$BUNDLE" "$ENGINE" >> "$OUT/driver.log" 2>&1 || exit 2
  log "engine installed"
fi
# recipectl from this checkout: its own environment where there is one, else the engine's Python
if [[ -x "$ROOT/.venv/bin/python" ]]; then PY="$ROOT/.venv/bin/python"; else PY="$ENGINE/bin/python"; fi
rc() { PYTHONPATH="$ROOT" "$PY" -m recipectl "$@"; }

# make_model RECIPE: the model RECIPE names under ~/.cache/recipectl/models, made in MODELS (a tiny
# random Qwen3.5, or the 35B's or 9B's configuration for dummy weights) unless it is there: the kind is
# guessed from the name, and a model of another kind (the CPU recipe's) is never made over.
make_model() {
  local dir kind
  dir="$(sed -n 's#^  path: ~/.cache/recipectl/models/\([^ ]*\).*#\1#p' "$1" | head -1)"
  [[ -n "$dir" && ! -e "$MODELS/$dir/config.json" ]] || return 0
  kind=qwen35; [[ "$dir" == qwen35-35b-a3b* ]] && kind=qwen35-35b-a3b; [[ "$dir" == qwen35-9b* ]] && kind=qwen35-9b
  KIND=$kind bash "$ROOT/scripts/make-tiny-model.sh" "$MODELS/$dir" >> "$OUT/driver.log" 2>&1
}
