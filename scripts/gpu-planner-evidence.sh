#!/usr/bin/env bash
# The planner against the engine on a GPU host: for each recipe, `recipectl plan` first (before
# anything starts), then `recipectl launch`, each role's own capacity lines from its log, `stop`.
# Everything goes to OUT; planner-vs-engine.py writes OUT/summary.md (per role: block size,
# KV-cache tokens and maximum concurrency, planned and measured, and the difference).
#
#   BUNDLE=DIR bash scripts/gpu-planner-evidence.sh [RECIPE ...]
#   # default recipes: recipes/h200/tiny-qwen35-pd.yaml recipes/h200/qwen3.5-35b-a3b-2gpu-pd.yaml
#
# Environment: OUT (./gpu-planner), ENGINE (~/.cache/recipectl/engine-cu130), MODELS
# (~/.cache/recipectl/models), BUNDLE (an offline engine bundle, installed when ENGINE is absent).
set -uo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
OUT="${OUT:-$PWD/gpu-planner}"
ENGINE="${ENGINE:-$HOME/.cache/recipectl/engine-cu130}"
MODELS="${MODELS:-$HOME/.cache/recipectl/models}"
# shellcheck source=scripts/gpu-driver-env.sh
source "$ROOT/scripts/gpu-driver-env.sh"

recipes=("$@")
[[ ${#recipes[@]} -gt 0 ]] || recipes=("$ROOT/recipes/h200/tiny-qwen35-pd.yaml"
                                      "$ROOT/recipes/h200/qwen3.5-35b-a3b-2gpu-pd.yaml")
for recipe in "${recipes[@]}"; do
  name="$(basename "$recipe" .yaml)"
  make_model "$recipe" || { log "$name: its model could not be made"; continue; }
  r="$OUT/$name.yaml"
  sed -e "s#~/.cache/recipectl/models#$MODELS#" "$recipe" > "$r"
  rc plan "$r" --format json > "$OUT/$name.plan.json" 2> "$OUT/$name.plan.err"
  log "$name: planned (exit $?)"
  runs="$OUT/runs-$name"
  t0=$(date +%s)
  RECIPECTL_RUN_DIR="$runs" rc launch "$r" --detach --format json > "$OUT/$name.launch.json" 2> "$OUT/$name.launch.err"
  log "$name: launch exit $? after $(( $(date +%s) - t0 ))s"
  for role in prefill decode; do
    grep -hE "KV cache size|Maximum concurrency|attention block size|Available KV cache memory|Model loading took|peak|CUDA graph|graph capturing|non-torch|memory profiling" \
      "$runs"/latest/"$role"-0.log > "$OUT/$name.$role.capacity.txt" 2>/dev/null
  done
  RECIPECTL_RUN_DIR="$runs" rc stop >> "$OUT/driver.log" 2>&1
  log "$name: stopped"
done
python3 "$ROOT/scripts/planner-vs-engine.py" "$OUT" > "$OUT/summary.md"
cat "$OUT/summary.md"
