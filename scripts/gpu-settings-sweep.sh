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
# budget forces a smaller one (say so where the numbers are reported).
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

current=""
stop_current() { [[ -n "$current" ]] && RECIPECTL_RUN_DIR="$current" rc stop >> "$OUT/driver.log" 2>&1; current=""; }
trap 'log "interrupted: stopping"; stop_current; exit 130' INT TERM

for setting in "$@"; do
  "$PY" "$ROOT/scripts/settings-arms.py" "$base" "$setting" "$OUT" ${ISL:+--isl "$ISL"} ${OSL:+--osl "$OSL"} \
    ${CONCURRENCY:+--concurrency "$CONCURRENCY"} > /dev/null || { log "$setting: no arms"; continue; }
  for arm in default seed; do
    name="$setting-$arm"; r="$OUT/$name.yaml"
    rc plan "$r" --format json > "$OUT/$name.plan.json" 2> "$OUT/$name.plan.err"
    log "$name: planned (exit $?)"
    current="$OUT/runs-$name"
    t0=$(date +%s)
    RECIPECTL_RUN_DIR="$current" rc launch "$r" --detach --format json > "$OUT/$name.launch.json" 2> "$OUT/$name.launch.err"
    status=$?
    log "$name: launch exit $status after $(( $(date +%s) - t0 ))s"
    if [[ $status -eq 0 ]]; then
      t0=$(date +%s)
      RECIPECTL_RUN_DIR="$current" rc bench "$r" --out "$OUT/$name" --format json > "$OUT/$name.bench.json" \
        2> "$OUT/$name.bench.err"
      log "$name: bench exit $? after $(( $(date +%s) - t0 ))s"
    fi
    stop_current
    log "$name: stopped"
  done
  rc bench compare "$OUT/$setting-default" "$OUT/$setting-seed" > "$OUT/$setting.compare.txt" 2>&1
  log "$setting: compared (exit $?)"
done
"$PY" "$ROOT/scripts/settings-summary.py" "$OUT" > "$OUT/summary.md"
cat "$OUT/summary.md"
