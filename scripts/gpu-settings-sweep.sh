#!/usr/bin/env bash
# The seed's settings, one at a time: for each SETTING, two copies of RECIPE that differ in that
# setting only (the seed's value, "seed", and vLLM's default, "default"; scripts/settings-arms.py),
# each planned (`recipectl plan`, before the launch), launched, swept (`recipectl bench`) and
# stopped; then `recipectl bench compare default seed`. Everything goes to OUT, and
# scripts/settings-summary.py writes OUT/summary.md (per level: TPS/GPU, TTFT, TPOT of both arms)
# and OUT/SETTING.png.
#
#   BUNDLE=DIR bash scripts/gpu-settings-sweep.sh RECIPE SETTING [SETTING ...]
#   SETTING: prefill-mnbt | stream-interval | async-scheduling | ssm-dtype
#
# Each SETTING is two launches: give one call one SETTING where a call's time is bounded (the 35B
# on an H200 took about 4 minutes to start cold). Calls may share OUT: the summary covers every
# SETTING found there. The same command runs on the CPU engine with the local recipe
# (ENGINE=~/.cache/recipectl/engine), which is how this script itself is checked.
#
# Environment: OUT (./gpu-settings), ENGINE (~/.cache/recipectl/engine-cu130), MODELS
# (~/.cache/recipectl/models), BUNDLE (an offline engine bundle, installed when ENGINE is absent);
# ISL, OSL, CONCURRENCY (comma-separated levels) replace the recipe's workload when the time
# budget forces a smaller one (say so where the numbers are reported); PROMPTS replaces
# prompts_per_concurrency. BUDGET (seconds): an arm starts only while the time left is more than
# the longest arm so far took. An arm whose recipe is the same as one already run (the seed's arm
# of every setting, when RECIPE holds the seed's values) is not run again: its results are copied.
# Each arm's capacity lines (NAME.ROLE.capacity.txt) sit beside its plan (NAME.plan.json), so
# scripts/planner-vs-engine.py OUT holds the planner against the engine for every arm.
set -uo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
OUT="${OUT:-$PWD/gpu-settings}"
ENGINE="${ENGINE:-$HOME/.cache/recipectl/engine-cu130}"
MODELS="${MODELS:-$HOME/.cache/recipectl/models}"
[[ $# -ge 2 ]] || { sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
RECIPE="$1"; shift
# shellcheck source=scripts/gpu-driver-env.sh
source "$ROOT/scripts/gpu-driver-env.sh"
make_model "$RECIPE" || { log "the recipe's model could not be made"; exit 2; }
base="$OUT/base.yaml"
sed -e "s#~/.cache/recipectl/models#$MODELS#" "$RECIPE" > "$base"

DEADLINE=$(( $(date +%s) + ${BUDGET:-100000} ))
longest=0
current=""
stop_current() { [[ -n "$current" ]] && RECIPECTL_RUN_DIR="$current" rc stop >> "$OUT/driver.log" 2>&1; current=""; }
trap 'log "interrupted: stopping"; stop_current; exit 130' INT TERM

for setting in "$@"; do
  "$PY" "$ROOT/scripts/settings-arms.py" "$base" "$setting" "$OUT" ${ISL:+--isl "$ISL"} ${OSL:+--osl "$OSL"} \
    ${CONCURRENCY:+--concurrency "$CONCURRENCY"} ${PROMPTS:+--prompts "$PROMPTS"} > /dev/null \
    || { log "$setting: no arms"; continue; }
  for arm in seed default; do
    name="$setting-$arm"; r="$OUT/$name.yaml"
    same="$(grep -v '^name:' "$r" | sha256sum | cut -c1-16)"
    if [[ -f "$OUT/arm-$same" ]]; then
      was="$(cat "$OUT/arm-$same")"
      for f in plan.json plan.err launch.json launch.err bench.json bench.err prefill.capacity.txt decode.capacity.txt; do
        [[ -f "$OUT/$was.$f" ]] && cp "$OUT/$was.$f" "$OUT/$name.$f"
      done
      [[ -d "$OUT/$was" ]] && cp -r "$OUT/$was" "$OUT/$name"
      log "$name: the same recipe as $was: its results"
      continue
    fi
    if (( DEADLINE - $(date +%s) <= longest )); then
      log "$name: not run: $(( DEADLINE - $(date +%s) ))s left, an arm took ${longest}s"
      continue
    fi
    arm_t0=$(date +%s)
    rc plan "$r" --format json > "$OUT/$name.plan.json" 2> "$OUT/$name.plan.err"
    log "$name: planned (exit $?)"
    current="$OUT/runs-$name"
    t0=$(date +%s)
    RECIPECTL_RUN_DIR="$current" rc launch "$r" --detach --format json > "$OUT/$name.launch.json" 2> "$OUT/$name.launch.err"
    status=$?
    log "$name: launch exit $status after $(( $(date +%s) - t0 ))s"
    for role in prefill decode; do
      grep -hE "KV cache size|Maximum concurrency|attention block size|Available KV cache memory|Model loading took|peak|CUDA graph|graph capturing|non-torch|memory profiling" \
        "$current"/latest/"$role"-0.log > "$OUT/$name.$role.capacity.txt" 2>/dev/null
    done
    if [[ $status -eq 0 ]]; then
      t0=$(date +%s)
      RECIPECTL_RUN_DIR="$current" rc bench "$r" --out "$OUT/$name" --format json > "$OUT/$name.bench.json" \
        2> "$OUT/$name.bench.err"
      log "$name: bench exit $? after $(( $(date +%s) - t0 ))s"
    fi
    stop_current
    log "$name: stopped"
    echo "$name" > "$OUT/arm-$same"
    (( $(date +%s) - arm_t0 > longest )) && longest=$(( $(date +%s) - arm_t0 ))
  done
  rc bench compare "$OUT/$setting-default" "$OUT/$setting-seed" > "$OUT/$setting.compare.txt" 2>&1
  log "$setting: compared (exit $?)"
done
"$PY" "$ROOT/scripts/settings-summary.py" "$OUT" > "$OUT/summary.md"
cat "$OUT/summary.md"
