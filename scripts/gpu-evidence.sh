#!/usr/bin/env bash
# Evidence that recipectl drives a real hybrid P/D deployment on a GPU host, with the project's own
# commands only: environment doctor, launch, doctor against the deployment (health, P/D proof,
# parity, GSM8K), plan vs the engine's own capacity lines, a short bench sweep, stop; then two
# negative runs. Every log and JSON result goes to one folder; evidence-summary.py condenses it.
#
#   bash scripts/gpu-evidence.sh [main|negative|all]      # default: all
#
# Environment:
#   OUT      where results go (default ./gpu-evidence)
#   BUNDLE   an offline engine bundle (build-offline-bundle.sh) to install when the engine is absent
#   ENGINE   the engine venv (default ~/.cache/recipectl/engine-cu130, as the recipe says)
#   RECIPE   the recipe (default: recipes/h200/tiny-qwen35-pd-1gpu.yaml on a host with one GPU,
#            prefill and decode sharing it; recipes/h200/tiny-qwen35-pd.yaml on two or more)
#   BUDGET   seconds this script may take in all (default 560); phases that no longer fit are skipped
#   SKIP_GDN_FORCED=1  skip starting the deployment with the missing GDN backend (preflight only)
set -uo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
OUT="${OUT:-$PWD/gpu-evidence}"
ENGINE="${ENGINE:-$HOME/.cache/recipectl/engine-cu130}"
GPUS="$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | grep -c .)"
if [[ -z "${RECIPE:-}" ]]; then
  RECIPE="$ROOT/recipes/h200/tiny-qwen35-pd.yaml"
  (( GPUS == 1 )) && RECIPE="$ROOT/recipes/h200/tiny-qwen35-pd-1gpu.yaml"
fi
MODELS="${MODELS:-$HOME/.cache/recipectl/models}"
PHASES="${1:-all}"
START=$(date +%s)
DEADLINE=$(( START + ${BUDGET:-560} ))
E="$OUT/evidence"
mkdir -p "$E"
# Hosts that share GPUs keep NVLink multicast off; the engine inherits these.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 VLLM_NO_USAGE_STATS=1
export RECIPECTL_RUN_DIR="$E/runs" RECIPECTL_ENGINE_VENV="$ENGINE"

log() { echo "[$(date +%T) +$(( $(date +%s) - START ))s] $*" | tee -a "$E/driver.log"; }
left() { echo $(( DEADLINE - $(date +%s) )); }
rc() { PYTHONPATH="$ROOT" "$ENGINE/bin/python" -m recipectl "$@"; }
# run NAME CMD...: stdout to NAME.json (or .txt), stderr to NAME.err, exit code logged
run() {
  local name="$1"; shift
  local t0; t0=$(date +%s)
  "$@" > "$E/$name.out" 2> "$E/$name.err"
  local code=$?
  log "$name: exit $code in $(( $(date +%s) - t0 ))s"
  return $code
}

install_engine() {
  if [[ -x "$ENGINE/bin/vllm" ]]; then return 0; fi
  if [[ -z "${BUNDLE:-}" ]]; then log "no engine in $ENGINE and no BUNDLE"; exit 2; fi
  run install bash "$ROOT/scripts/install-offline-bundle.sh" "$BUNDLE" "$ENGINE" || exit 2
  cat "$E/install.out" >> "$E/driver.log"
}

make_models() {
  RECIPECTL_ENGINE_VENV="$ENGINE" KIND=qwen35 run model-qwen35 bash "$ROOT/scripts/make-tiny-model.sh" "$MODELS/qwen35-tiny"
}

# A copy of the recipe with its model path made absolute and optional edits (sed expressions).
variant() {
  local name="$1"; shift
  sed -e "s#~/.cache/recipectl/models#$MODELS#" "$@" "$RECIPE" > "$E/$name.yaml"
  echo "$E/$name.yaml"
}

USED_FILE="$HOME/.cache/recipectl/gpu-evidence-recipe"   # kept for a later call's negative phase
USED="$(cat "$USED_FILE" 2>/dev/null || true)"
phase_main() {
  local r; r=$(variant recipe)
  run validate rc validate "$r" --format json
  run doctor-env rc doctor "$r" --format json
  # A failed launch is the finding: launch has stopped what it started and said why (launch.err).
  # Nothing else is started in its place, so the evidence is of this recipe or of nothing.
  if ! run launch rc launch "$r" --detach --format json; then
    log "launch failed:"; tail -30 "$E/launch.err" | tee -a "$E/driver.log"
    return 1
  fi
  USED="$r"
  mkdir -p "$(dirname "$USED_FILE")" && cp "$USED" "$USED_FILE.yaml" && echo "$USED_FILE.yaml" > "$USED_FILE"
  run status rc status "$r" --format json
  run doctor rc doctor "$r" --format json
  run plan rc plan "$r" --format json
  grep -h "KV cache size\|Maximum concurrency\|GPU KV cache\|Available KV cache memory\|block size\|GDN\|gdn" \
    "$E"/runs/latest/prefill-0.log "$E"/runs/latest/decode-0.log > "$E/engine-capacity-lines.txt" 2>/dev/null
  if (( $(left) > 150 )); then
    run bench rc bench "$r" --out "$E/bench" --format json
  else
    log "bench skipped: $(left)s left"
  fi
  run stop rc stop "$r"
}

# Negative runs start from the recipe that worked (or the default one).
base_variant() {
  local name="$1"; shift
  local src="${USED:-$(variant recipe)}"
  sed "$@" "$src" > "$E/$name.yaml"
  echo "$E/$name.yaml"
}

phase_negative() {
  # 1. DS layout unset: the rules refuse before anything starts.
  # (the role's env keeps one harmless entry: an empty env: would be a schema error instead)
  local ds; ds=$(base_variant no-ds -e 's/VLLM_SSM_CONV_STATE_LAYOUT: DS/RECIPECTL_NEGATIVE_RUN: "no DS layout"/')
  run neg-ds-validate rc validate "$ds" --format json
  run neg-ds-launch rc launch "$ds" --detach
  run neg-ds-stop rc stop "$ds"    # nothing to stop when the rules refused, as they should
  log "DS unset: $(grep -o 'HYB00[0-9]' "$E/neg-ds-validate.out" | sort -u | tr '\n' ' ')"
  # ... and past the rules (declared ignored), the engine dies at connector setup; launch says why.
  if (( $(left) > 240 )); then
    local forced; forced=$(base_variant no-ds-forced -e 's/VLLM_SSM_CONV_STATE_LAYOUT: DS/RECIPECTL_NEGATIVE_RUN: "no DS layout"/' -e "\$a ignore:\n  HYB001: negative run, proves the engine dies without DS")
    run neg-ds-forced-launch rc launch "$forced" --detach --timeout 300
    run neg-ds-forced-stop rc stop "$forced"
    grep -h "3-read\|DS conv\|cause\|fix" "$E/neg-ds-forced-launch.err" | head -5 | tee -a "$E/driver.log"
  fi
  # 2. GDN prefill backend not installed (auto = FlashInfer on Hopper): launch's preflight refuses ...
  local gdn; gdn=$(base_variant gdn-auto -e '/gdn_prefill_backend/d')
  run neg-gdn-launch rc launch "$gdn" --detach
  # ... and started anyway, /health passes, the first request fails; doctor names the cause.
  if (( $(left) > 150 )) && [[ "${SKIP_GDN_FORCED:-0}" != 1 ]]; then
    if run neg-gdn-forced-launch rc launch "$gdn" --detach --no-preflight; then
      run neg-gdn-doctor rc doctor "$gdn" --format json --no-env --no-gsm8k --no-parity
      run neg-gdn-stop rc stop "$gdn"
    fi
  fi
}

collect() {
  cp -r "$E"/runs/*/ "$E/run-logs" 2>/dev/null
  nvidia-smi > "$E/nvidia-smi.txt" 2>&1
  PYTHONPATH="$ROOT" "$ENGINE/bin/python" "$ROOT/scripts/evidence-summary.py" "$E" > "$OUT/summary.md" 2>> "$E/driver.log"
  tar -C "$OUT" -czf "$OUT/evidence.tar.gz" evidence
  log "results in $OUT (summary.md, evidence.tar.gz)"
}

trap 'rc stop >/dev/null 2>&1; collect' EXIT
if (( GPUS == 0 )); then
  log "no NVIDIA GPU on this host (nvidia-smi lists none): the GPU evidence needs one; the CPU recipe is recipes/local/"
  exit 2
fi
log "host: $(nvidia-smi --query-gpu=name --format=csv,noheader | paste -sd, -); recipe $(basename "$RECIPE"); phases: $PHASES; budget $(left)s"
install_engine
make_models
case "$PHASES" in
  main) phase_main ;;
  negative) phase_negative ;;
  all) phase_main && phase_negative ;;   # negative runs only beside a deployment that worked
  *) echo "usage: gpu-evidence.sh [main|negative|all]" >&2; exit 2 ;;
esac
