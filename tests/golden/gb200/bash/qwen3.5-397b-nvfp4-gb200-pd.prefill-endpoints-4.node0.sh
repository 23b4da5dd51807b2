#!/usr/bin/env bash
# Rendered by recipectl from recipe qwen3.5-397b-nvfp4-gb200-pd.prefill-endpoints-4: the processes of host node0 (node 0).
# Model nvidia/Qwen3.5-397B-A17B-NVFP4, vLLM 0.26.0. Re-render with `recipectl render` rather than editing.
# Logs go to $LOG_DIR (default ./logs/qwen3.5-397b-nvfp4-gb200-pd.prefill-endpoints-4); Ctrl-C or the exit of any process stops all.
set -euo pipefail
: "${HF_TOKEN?HF_TOKEN is not set: export it before running this script}"

LOG_DIR="${LOG_DIR:-./logs/qwen3.5-397b-nvfp4-gb200-pd.prefill-endpoints-4}"
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

# decode-0
setsid env -- \
  CUDA_VISIBLE_DEVICES=0,1,2,3 \
  HF_TOKEN="${HF_TOKEN}" \
  UCX_NET_DEVICES=all \
  VLLM_NIXL_SIDE_CHANNEL_HOST="node0" \
  VLLM_NIXL_SIDE_CHANNEL_PORT=5700 \
  VLLM_SSM_CONV_STATE_LAYOUT=DS \
  vllm serve nvidia/Qwen3.5-397B-A17B-NVFP4 \
  --served-model-name qwen3.5-397b \
  --host 0.0.0.0 \
  --port 8200 \
  --data-parallel-size 8 \
  --data-parallel-size-local 4 \
  --data-parallel-address "node0" \
  --data-parallel-rpc-port 13345 \
  --enable-expert-parallel \
  --language-model-only \
  --max-model-len 16640 \
  --max-num-seqs 640 \
  --async-scheduling \
  --mamba-ssm-cache-dtype bfloat16 \
  --stream-interval 100 \
  --api-server-count 1 \
  --no-enable-prefix-caching \
  --max-cudagraph-capture-size 768 \
  --kv-transfer-config '{"kv_connector":"NixlConnector","kv_role":"kv_consumer","kv_buffer_device":"cuda","kv_connector_extra_config":{"backends":["UCX"]}}' \
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
wait_healthy http://node2:8100/health
wait_healthy http://node2:8101/health
wait_healthy http://node3:8100/health
wait_healthy http://node3:8101/health
wait_healthy http://node0:8200/health

# router: starts once every worker answers /health
setsid env -- \
  vllm-router \
  --vllm-pd-disaggregation \
  --prefill "http://node2:8100" \
  --prefill "http://node2:8101" \
  --prefill "http://node3:8100" \
  --prefill "http://node3:8101" \
  --decode "http://node0:8200" \
  --host 0.0.0.0 \
  --port 30000 \
  --prefill-policy power_of_two \
  --decode-policy round_robin \
  --kv-connector nixl \
  >"$LOG_DIR/router.log" 2>&1 &
pids+=("$!")
echo "started router (pid $!), log $LOG_DIR/router.log"

# The first process to exit ends the deployment on this host (cleanup stops the rest).
wait -n "${pids[@]}"
