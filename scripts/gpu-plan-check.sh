#!/usr/bin/env bash
# A user's path through `plan --sla` on a GPU host (issue #30's "predict, then measure"): launch the
# recipe, calibrate the running deployment, plan from that calibration, and `plan --check` the
# concurrency the plan chose; then stop it. recipectl's own commands only.
#
#   BUNDLE=DIR OUT=DIR [RECIPE=...] [SLA=...] bash scripts/gpu-plan-check.sh [PHASE...]   # default: launch measure
#
# Phases: `launch` starts the recipe detached (its servers run in their own sessions, so a phase
# in a later call finds them); `measure` calibrates it (`calibrate --run`), plans (`plan --sla
# --calibration`, the table and --format json), checks the chosen point (`plan --sla --check
# --run`) and stops the deployment.
#
# Environment:
#   RECIPE  the recipe (default recipes/h200/qwen3.5-9b-pd-1gpu.yaml: both servers on GPU 0, which
#           plan --sla plans as laid out), its model made under MODELS as the other drivers do
#   SLA     the target (default ttft=2s,itl=50ms)
#   OUT_OF_STEP  1: the check's users start out of step (`plan --check --out-of-step`)
#   CHECK_AT     more points to check after the chosen one, users each ("4 12"), each with the users
#            out of step and together (check-N-oos.out and check-N.out, --format json; each a line
#            in ledger.jsonl), before the stop
#   CHECK_REPEATS  how many times each CHECK_AT point is measured (default 1): the together ones
#            first, all of them, then the out-of-step ones, so a call cut short keeps whole rounds;
#            repeat K of N users writes check-N-rK.out (check-N-oos-rK.out); K=1 keeps the names above
#   OUT     where results go (default ./gpu-plan-check): recipe.yaml, calibration.json,
#           plan.txt, plan.json, check.json, ledger.jsonl, driver.log
#   BUNDLE, ENGINE, MODELS: as in scripts/gpu-driver-env.sh
set -uo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
OUT="${OUT:-$PWD/gpu-plan-check}"
ENGINE="${ENGINE:-$HOME/.cache/recipectl/engine-cu130}"
MODELS="${MODELS:-$HOME/.cache/recipectl/models}"
RECIPE="${RECIPE:-$ROOT/recipes/h200/qwen3.5-9b-pd-1gpu.yaml}"
SLA="${SLA:-ttft=2s,itl=50ms}"
PHASES=("$@")
(( ${#PHASES[@]} )) || PHASES=(launch measure)
if ! nvidia-smi -L >/dev/null 2>&1; then
  echo "no GPU here (nvidia-smi lists none): this driver measures a GPU deployment" >&2
  exit 2
fi
# shellcheck source=scripts/gpu-driver-env.sh
source "$ROOT/scripts/gpu-driver-env.sh"
make_model "$RECIPE" || { log "the model was not made (driver.log)"; exit 2; }
R="$OUT/recipe.yaml"
[[ -f "$R" ]] || sed -e "s#~/.cache/recipectl/models#$MODELS#" "$RECIPE" > "$R"

step() {  # step NAME COMMAND...: run it, its output to OUT/NAME.out and .err, log how it ended
  local name="$1"; shift
  local t0; t0=$(date +%s)
  "$@" > "$OUT/$name.out" 2> "$OUT/$name.err"
  local code=$?
  log "$name: exit $code in $(( $(date +%s) - t0 ))s"
  return $code
}

STEP_ARGS=()
[[ "${OUT_OF_STEP:-0}" == 1 ]] && STEP_ARGS=(--out-of-step)
# CHECK_AT before any phase: a bad one found after the launch would leave its servers running
read -ra check_at <<< "${CHECK_AT:-}"
for n in "${check_at[@]}"; do
  [[ "$n" =~ ^[1-9][0-9]*$ ]] || { log "CHECK_AT: $n is not a number of users"; exit 2; }
done
CHECK_REPEATS="${CHECK_REPEATS:-1}"
[[ "$CHECK_REPEATS" =~ ^[1-9][0-9]*$ ]] || { log "CHECK_REPEATS: $CHECK_REPEATS is not a count"; exit 2; }

for phase in "${PHASES[@]}"; do
  case "$phase" in
    launch) step launch rc launch "$R" --detach --format json || exit 1 ;;
    measure)
      step calibrate rc calibrate "$R" --run "$R" -o "$OUT/calibration.json" --force
      step plan rc plan "$R" --sla "$SLA" --calibration "$OUT/calibration.json"
      step plan-json rc plan "$R" --sla "$SLA" --calibration "$OUT/calibration.json" --format json
      step check rc plan "$R" --sla "$SLA" --calibration "$OUT/calibration.json" --check --run "$R" --format json \
        "${STEP_ARGS[@]}"
      # together first: at the seed's 8,192 / 1,024 its repeats are what a spread is wanted of
      for start in together oos; do
        for (( k = 1; k <= CHECK_REPEATS; k++ )); do
          for n in "${check_at[@]}"; do
            name="check-$n"; args=()
            [[ "$start" == oos ]] && { name+="-oos"; args=(--out-of-step); }
            (( k > 1 )) && name+="-r$k"
            step "$name" rc plan "$R" --sla "$SLA" --calibration "$OUT/calibration.json" --check --run "$R" \
              --concurrency "$n" --format json "${args[@]}"
          done
        done
      done
      cp "$OUT/plan.out" "$OUT/plan.txt" 2>/dev/null
      cp "$OUT/plan-json.out" "$OUT/plan.json" 2>/dev/null
      cp "$OUT/check.out" "$OUT/check.json" 2>/dev/null
      ledger="$("$PY" -c 'import json, sys; print(json.load(open(sys.argv[1]))["ledger"] or "")' "$OUT/check.json" 2>/dev/null)"
      [[ -n "$ledger" ]] && cp "$ledger" "$OUT/ledger.jsonl"
      step stop rc stop "$R"
      ;;
    *) log "unknown phase $phase (launch, measure)"; exit 2 ;;
  esac
done
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader >> "$OUT/driver.log" 2>&1
log "done"
