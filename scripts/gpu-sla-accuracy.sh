#!/usr/bin/env bash
# `plan --sla`'s accuracy on a GPU host (issue #30's GPU leg): benchmarks/sla_planner_accuracy.py
# on a P/D deployment, at held-out points of a GPU's sizes; then the same calibration predicting a
# layout it was not measured on: 2 prefill endpoints (both on GPU 0) + 1 decode.
#
#   BUNDLE=DIR OUT=DIR [RECIPE=...] bash scripts/gpu-sla-accuracy.sh [PHASE...]    # default: one two
#
# Phases: `one` launches 1 + 1, calibrates and measures the held-out points; `again` launches it
# anew and measures them from one's calibration (a run that one's time limit cut short, or the
# launch-to-launch spread); `two` launches 2 + 1 and measures them from one's calibration; `self2`
# launches 2 + 1, calibrates it on itself and measures the points from that calibration and from
# one's; `trace` launches 1 + 1 and records each held-out point's requests (--trace: when each
# started, which user sent it, its first token and its end; with OUT_OF_STEP=1 its users start out
# of step), REPEATS waves of them, into OUT/trace/.
#
# Environment:
#   RECIPE   a recipe whose prefill endpoint is on GPU 0 (default recipes/h200/tiny-qwen35-pd-1gpu.yaml;
#            recipes/h200/qwen3.5-9b-pd-1gpu.yaml is the real-size one with decode on GPU 0 too,
#            recipes/h200/qwen3.5-9b-pd-2gpu.yaml the one with decode on GPU 1)
#   SHARE    every server's gpu_memory_utilization (default 0.3): the same in both phases, so the
#            layouts differ in the prefill endpoints only, and three servers fit in phase two
#   OUT      where results go (default ./gpu-sla-accuracy): one/, two/ (results.json, table.md,
#            calibration.json), trace/ (trace.json), the two recipes, driver.log
#   BUNDLE, ENGINE, MODELS: as in scripts/gpu-driver-env.sh
#   REPEATS  measurements per held-out point (default 5)
#   HELD_OUT ISL:OSL:CONCURRENCY,... (default: the tiny recipe's, none of them a calibration point,
#            whose prompts are max_num_batched_tokens / 16, / 4 and / 1 at concurrency 1 and the
#            first two at 4)
#   BUDGET   seconds a phase may take (default 540): a phase still running then is stopped, and
#            keeps the points it measured
#   OUT_OF_STEP  1: each repeat's users start spread over one of their cycles, not all at once
#            (the benchmark's --out-of-step)
set -uo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
OUT="${OUT:-$PWD/gpu-sla-accuracy}"
ENGINE="${ENGINE:-$HOME/.cache/recipectl/engine-cu130}"
MODELS="${MODELS:-$HOME/.cache/recipectl/models}"
RECIPE="${RECIPE:-$ROOT/recipes/h200/tiny-qwen35-pd-1gpu.yaml}"
SHARE="${SHARE:-0.3}"
REPEATS="${REPEATS:-5}"
HELD_OUT="${HELD_OUT:-512:64:1,2048:32:1,1536:64:2,3072:16:4,768:128:8,384:64:16,1024:128:32}"
PHASES=("$@")
(( ${#PHASES[@]} )) || PHASES=(one two)
if ! nvidia-smi -L >/dev/null 2>&1; then
  echo "no GPU here (nvidia-smi lists none): this driver measures a GPU deployment" >&2
  exit 2
fi
# shellcheck source=scripts/gpu-driver-env.sh
source "$ROOT/scripts/gpu-driver-env.sh"
make_model "$RECIPE" || { log "the model was not made (driver.log)"; exit 2; }
export PYTHONPATH="$ROOT"

# The recipes, with the model path made absolute and every server at SHARE of its GPU: 1 + 1, and
# 2 + 1 (a second prefill endpoint on the first one's GPU).
ONE="$OUT/one-prefill.yaml"
TWO="$OUT/two-prefill.yaml"
sed -e "s#~/.cache/recipectl/models#$MODELS#" \
  -e "s#^\(  gpu_memory_utilization:\) [0-9.]*#\1 $SHARE#" "$RECIPE" > "$ONE"
"$PY" - "$ONE" "$TWO" <<'PY'
import sys
text = open(sys.argv[1]).read()
one = "prefill:\n  devices: [[0]]\n"
assert text.count(one) == 1, "the recipe's prefill role does not start with devices: [[0]]"
open(sys.argv[2], "w").write(text.replace(one, "prefill:\n  endpoints: 2\n  devices: [[0], [0]]\n"))
PY

STEP_ARGS=()
[[ "${OUT_OF_STEP:-0}" == 1 ]] && STEP_ARGS=(--out-of-step)

bench() {
  local name="$1"; shift
  local t0; t0=$(date +%s)
  timeout --signal=TERM --kill-after=60 "${BUDGET:-540}" "$PY" "$ROOT/benchmarks/sla_planner_accuracy.py" \
    "$@" --out "$OUT/$name" --repeats "$REPEATS" --held-out "$HELD_OUT" "${STEP_ARGS[@]}" \
    > "$OUT/$name.out" 2> "$OUT/$name.err"
  local code=$?
  log "$name: exit $code in $(( $(date +%s) - t0 ))s"
  tail -40 "$OUT/$name.out" >> "$OUT/driver.log"
  return $code
}

for phase in "${PHASES[@]}"; do
  case "$phase" in
    one) bench one "$ONE" ;;
    trace) bench trace "$ONE" --trace ;;
    again | two | self2)
      if [[ ! -f "$OUT/one/calibration.json" ]]; then log "phase $phase needs $OUT/one/calibration.json"; exit 1; fi
      if [[ "$phase" == self2 ]]; then
        bench self2 "$TWO" --compare "$OUT/one/calibration.json" --compare-on "$ONE" --no-recalibrate
      else
        recipe="$ONE"; [[ "$phase" == two ]] && recipe="$TWO"
        bench "$phase" "$recipe" --calibration "$OUT/one/calibration.json" --calibrated-on "$ONE"
      fi ;;
    *) log "unknown phase $phase (one, again, two, self2, trace)"; exit 2 ;;
  esac
done
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader >> "$OUT/driver.log" 2>&1
log "done"
