#!/usr/bin/env bash
# Start `vllm serve` once per line of a configs file (scripts/gpu-memory-configs.txt), one engine at
# a time on one GPU, each with dummy weights; keep its memory lines (profiling, "Available KV cache
# memory", "GPU KV cache size", the actual-usage summary) in $OUT/NAME.memory.txt and the whole log
# in $OUT/NAME.log; stop it as soon as the last of those lines appears or after LIMIT seconds.
#
#   ENGINE=~/.cache/recipectl/engine-cu130 OUT=/tmp/out bash scripts/gpu-memory-evidence.sh \
#       scripts/gpu-memory-configs.txt [NAME ...]
#
# Names select lines (default: all). Environment: ENGINE (the engine venv), MODELS
# (~/.cache/recipectl/models), OUT (./gpu-memory), LIMIT (seconds per engine, 540), PORT (8199),
# GPU (CUDA_VISIBLE_DEVICES, 0). Expected seconds per start-up are in the configs file; keep a
# command under the device's 600 s by running one NAME per call.
set -uo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
CONFIGS="${1:?usage: gpu-memory-evidence.sh CONFIGS [NAME ...]}"; shift
ENGINE="${ENGINE:-$HOME/.cache/recipectl/engine-cu130}"
MODELS="${MODELS:-$HOME/.cache/recipectl/models}"
OUT="${OUT:-$PWD/gpu-memory}"; LIMIT="${LIMIT:-540}"; PORT="${PORT:-8199}"
mkdir -p "$OUT"
export CUDA_VISIBLE_DEVICES="${GPU:-0}" PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 \
  VLLM_NO_USAGE_STATS=1 VLLM_USE_FLASHINFER_SAMPLER=0
LINES='Model loading took|attention block size|Profiling CUDA graph|Estimated CUDA graph|Available KV cache memory|KV cache size|Maximum concurrency|CUDA graph pool memory|Free memory on device|memory profiling|Error|error:'

while IFS=$'\t' read -r name kind args; do
  [[ -z "$name" || "$name" == \#* ]] && continue
  if [[ $# -gt 0 ]] && ! printf '%s\n' "$@" | grep -qx "$name"; then continue; fi
  model="$MODELS/$kind-memory"
  KIND="$kind" RECIPECTL_ENGINE_VENV="$ENGINE" bash "$ROOT/scripts/make-tiny-model.sh" "$model" \
    < /dev/null > "$OUT/$name.model.log" 2>&1 || { echo "$name: model $kind failed (see $OUT/$name.model.log)"; continue; }
  t0=$(date +%s)
  # shellcheck disable=SC2086  # the configs file's arguments are split on purpose
  setsid "$ENGINE/bin/vllm" serve "$model" --port "$PORT" --load-format dummy --language-model-only \
    $args < /dev/null > "$OUT/$name.log" 2>&1 &
  pid=$!
  while kill -0 "$pid" 2>/dev/null && (( $(date +%s) - t0 < LIMIT )); do
    grep -q "Free memory on device" "$OUT/$name.log" && break       # printed after graph capture
    grep -q "KV cache size" "$OUT/$name.log" && grep -q -- "--enforce-eager" <<<"$args" && break
    sleep 2
  done
  kill -TERM -- "-$pid" 2>/dev/null; sleep 5; kill -KILL -- "-$pid" 2>/dev/null; wait "$pid" 2>/dev/null
  grep -aE "$LINES" "$OUT/$name.log" | tr '\r' '\n' | grep -aE "$LINES" > "$OUT/$name.memory.txt"
  echo "$name: $(( $(date +%s) - t0 ))s"; cat "$OUT/$name.memory.txt"
done < "$CONFIGS"
