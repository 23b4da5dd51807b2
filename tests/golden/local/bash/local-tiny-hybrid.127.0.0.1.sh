#!/usr/bin/env bash
# Rendered by recipectl from recipe local-tiny-hybrid: the processes of host 127.0.0.1 (node 0).
# Model '~/.cache/recipectl/models/qwen3next-tiny', vLLM 0.32.0. Re-render with `recipectl render` rather than editing.
# Logs go to $LOG_DIR (default ./logs/local-tiny-hybrid); Ctrl-C or the exit of any process stops all.
set -euo pipefail

LOG_DIR="${LOG_DIR:-./logs/local-tiny-hybrid}"
READY_TIMEOUT="${READY_TIMEOUT:-1200}"
mkdir -p "$LOG_DIR"
pids=()

cleanup() {
  trap - EXIT INT TERM
  for pid in "${pids[@]}"; do
    kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null || true
  done
  wait || true
}
trap cleanup EXIT INT TERM

# prefill-0
setsid env -- \
  HF_HUB_OFFLINE=1 \
  TRANSFORMERS_OFFLINE=1 \
  UCX_NET_DEVICES=lo \
  UCX_TLS=tcp,self,sm \
  VLLM_CPU_KVCACHE_SPACE=1 \
  VLLM_CPU_OMP_THREADS_BIND=0 \
  VLLM_NIXL_SIDE_CHANNEL_HOST=127.0.0.1 \
  VLLM_NIXL_SIDE_CHANNEL_PORT=5600 \
  VLLM_NO_USAGE_STATS=1 \
  VLLM_SSM_CONV_STATE_LAYOUT=DS \
  "$HOME"/.cache/recipectl/engine/bin/vllm serve "$HOME"/.cache/recipectl/models/qwen3next-tiny \
  --served-model-name tiny \
  --host 127.0.0.1 \
  --port 8100 \
  --dtype bfloat16 \
  --max-model-len 4096 \
  --max-num-batched-tokens 4096 \
  --mamba-ssm-cache-dtype bfloat16 \
  --enforce-eager \
  --kv-transfer-config '{"kv_connector":"NixlConnector","kv_role":"kv_producer","kv_buffer_device":"cpu","kv_connector_extra_config":{"backends":["UCX"],"kv_lease_duration":600,"num_threads":1}}' \
  >"$LOG_DIR/prefill-0.log" 2>&1 &
pids+=("$!")
echo "started prefill-0 (pid $!), log $LOG_DIR/prefill-0.log"

# decode-0
setsid env -- \
  HF_HUB_OFFLINE=1 \
  TRANSFORMERS_OFFLINE=1 \
  UCX_NET_DEVICES=lo \
  UCX_TLS=tcp,self,sm \
  VLLM_CPU_KVCACHE_SPACE=1 \
  VLLM_CPU_OMP_THREADS_BIND=1 \
  VLLM_NIXL_SIDE_CHANNEL_HOST=127.0.0.1 \
  VLLM_NIXL_SIDE_CHANNEL_PORT=5700 \
  VLLM_NO_USAGE_STATS=1 \
  VLLM_SSM_CONV_STATE_LAYOUT=DS \
  "$HOME"/.cache/recipectl/engine/bin/vllm serve "$HOME"/.cache/recipectl/models/qwen3next-tiny \
  --served-model-name tiny \
  --host 127.0.0.1 \
  --port 8200 \
  --dtype bfloat16 \
  --max-model-len 4096 \
  --mamba-ssm-cache-dtype bfloat16 \
  --enforce-eager \
  --kv-transfer-config '{"kv_connector":"NixlConnector","kv_role":"kv_consumer","kv_buffer_device":"cpu","kv_connector_extra_config":{"backends":["UCX"],"kv_lease_duration":600,"num_threads":1}}' \
  >"$LOG_DIR/decode-0.log" 2>&1 &
pids+=("$!")
echo "started decode-0 (pid $!), log $LOG_DIR/decode-0.log"

wait_healthy() {
  local url=$1 deadline=$((SECONDS + READY_TIMEOUT))
  until curl -sf -o /dev/null "$url"; do
    for pid in "${pids[@]}"; do
      if ! kill -0 "$pid" 2>/dev/null; then
        echo "a process exited before $url answered (see $LOG_DIR)" >&2
        return 1
      fi
    done
    if ((SECONDS > deadline)); then
      echo "timed out after ${READY_TIMEOUT}s waiting for $url" >&2
      return 1
    fi
    sleep 5
  done
}

# vLLM's NIXL connector on the CPU platform moves each worker's main thread, the one running the
# forward pass, to the host's last core, whatever VLLM_CPU_OMP_THREADS_BIND said: every endpoint
# of the host would compute on that one core (docs/engine-cpu.md). Once an endpoint answers, each
# thread of its processes allowed none of its cores is put back on them, as recipectl launch does.
repin_threads() {
  # $3: the endpoint's cores as ranges ("0-3,8"), compared range to range, so a long list costs no
  # more than a short one
  local name=$1 sid=$2 list=$3 pid task allowed range lo hi mine mlo mhi hit moved=0 failed=0
  for pid in $(ps -o pid= -s "$sid" 2>/dev/null); do
    for task in /proc/"$pid"/task/*; do
      allowed=$(awk '/^Cpus_allowed_list/ {print $2}' "$task/status" 2>/dev/null) || continue
      [[ -n $allowed ]] || continue
      hit=0
      for range in ${allowed//,/ }; do
        lo=${range%-*} hi=${range#*-}
        for mine in ${list//,/ }; do
          mlo=${mine%-*} mhi=${mine#*-}
          if ((lo <= mhi && mlo <= hi)); then hit=1; break 2; fi
        done
      done
      if ((hit == 1)); then continue; fi
      if taskset -p -c "$list" "${task##*/}" >/dev/null 2>&1; then
        moved=$((moved + 1))
      elif [[ -d $task ]]; then
        failed=$((failed + 1))  # not a thread that exited since: taskset refused the cores
      fi
    done
  done
  if ((moved > 0)); then echo "$name: $moved thread(s) the engine had put off its cores put back on cores $list"; fi
  if ((failed > 0)); then
    echo "$name: $failed thread(s) off its cores could not be put on cores $list (taskset refused them:" \
      "cores this host lacks, or outside this shell's own; compare nproc and the recipe's cpu_cores)" >&2
  fi
  return 0
}
wait_healthy http://127.0.0.1:8100/health
repin_threads prefill-0 "${pids[0]}" 0
wait_healthy http://127.0.0.1:8200/health
repin_threads decode-0 "${pids[1]}" 1
wait_healthy http://127.0.0.1:8100/health
wait_healthy http://127.0.0.1:8200/health

# router: starts once every worker answers /health
setsid env -- \
  "$HOME"/.cache/recipectl/engine/bin/vllm-router \
  --vllm-pd-disaggregation \
  --prefill http://127.0.0.1:8100 \
  --decode http://127.0.0.1:8200 \
  --host 127.0.0.1 \
  --port 30000 \
  --kv-connector nixl \
  --health-check-timeout-secs 60 \
  --health-failure-threshold 10 \
  --health-success-threshold 1 \
  --health-check-interval-secs 30 \
  --disable-circuit-breaker \
  >"$LOG_DIR/router.log" 2>&1 &
pids+=("$!")
echo "started router (pid $!), log $LOG_DIR/router.log"

# The first process to exit ends the deployment on this host (cleanup stops the rest).
wait -n "${pids[@]}"
