#!/usr/bin/env bash
# Rendered by recipectl from recipe qwen3.5-35b-a3b-h200-pd: the processes of host node0 (node 0).
# Model Qwen/Qwen3.5-35B-A3B, vLLM 0.26.0. Re-render with `recipectl render` rather than editing.
# Logs go to $LOG_DIR (default ./logs/qwen3.5-35b-a3b-h200-pd); Ctrl-C or the exit of any process stops all.
set -euo pipefail
: "${HF_TOKEN?HF_TOKEN is not set: export it before running this script}"

LOG_DIR="${LOG_DIR:-./logs/qwen3.5-35b-a3b-h200-pd}"
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
  CUDA_VISIBLE_DEVICES=4,5 \
  HF_TOKEN="${HF_TOKEN}" \
  UCX_NET_DEVICES=all \
  VLLM_NIXL_SIDE_CHANNEL_HOST="node0" \
  VLLM_NIXL_SIDE_CHANNEL_PORT=5600 \
  VLLM_SSM_CONV_STATE_LAYOUT=DS \
  vllm serve Qwen/Qwen3.5-35B-A3B \
  --served-model-name qwen3.5-35b \
  --host 0.0.0.0 \
  --port 8100 \
  --data-parallel-size 2 \
  --enable-expert-parallel \
  --language-model-only \
  --max-model-len 16640 \
  --max-num-batched-tokens 16384 \
  --async-scheduling \
  --mamba-ssm-cache-dtype bfloat16 \
  --api-server-count 1 \
  --no-enable-prefix-caching \
  --kv-transfer-config '{"kv_connector":"NixlConnector","kv_role":"kv_producer","kv_buffer_device":"cuda","kv_connector_extra_config":{"backends":["UCX"]}}' \
  >"$LOG_DIR/prefill-0.log" 2>&1 &
pids+=("$!")
echo "started prefill-0 (pid $!), log $LOG_DIR/prefill-0.log"

# prefill-1
setsid env -- \
  CUDA_VISIBLE_DEVICES=6,7 \
  HF_TOKEN="${HF_TOKEN}" \
  UCX_NET_DEVICES=all \
  VLLM_NIXL_SIDE_CHANNEL_HOST="node0" \
  VLLM_NIXL_SIDE_CHANNEL_PORT=5602 \
  VLLM_SSM_CONV_STATE_LAYOUT=DS \
  vllm serve Qwen/Qwen3.5-35B-A3B \
  --served-model-name qwen3.5-35b \
  --host 0.0.0.0 \
  --port 8101 \
  --data-parallel-size 2 \
  --enable-expert-parallel \
  --language-model-only \
  --max-model-len 16640 \
  --max-num-batched-tokens 16384 \
  --async-scheduling \
  --mamba-ssm-cache-dtype bfloat16 \
  --api-server-count 1 \
  --no-enable-prefix-caching \
  --kv-transfer-config '{"kv_connector":"NixlConnector","kv_role":"kv_producer","kv_buffer_device":"cuda","kv_connector_extra_config":{"backends":["UCX"]}}' \
  >"$LOG_DIR/prefill-1.log" 2>&1 &
pids+=("$!")
echo "started prefill-1 (pid $!), log $LOG_DIR/prefill-1.log"

# decode-0
setsid env -- \
  CUDA_VISIBLE_DEVICES=0,1,2,3 \
  HF_TOKEN="${HF_TOKEN}" \
  UCX_NET_DEVICES=all \
  VLLM_NIXL_SIDE_CHANNEL_HOST="node0" \
  VLLM_NIXL_SIDE_CHANNEL_PORT=5700 \
  VLLM_SSM_CONV_STATE_LAYOUT=DS \
  vllm serve Qwen/Qwen3.5-35B-A3B \
  --served-model-name qwen3.5-35b \
  --host 0.0.0.0 \
  --port 8200 \
  --data-parallel-size 4 \
  --enable-expert-parallel \
  --language-model-only \
  --max-model-len 16640 \
  --async-scheduling \
  --mamba-ssm-cache-dtype bfloat16 \
  --stream-interval 100 \
  --api-server-count 1 \
  --no-enable-prefix-caching \
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
wait_healthy http://node0:8100/health
wait_healthy http://node0:8101/health
wait_healthy http://node0:8200/health

# router: starts once every worker answers /health
setsid env -- \
  vllm-router \
  --vllm-pd-disaggregation \
  --prefill "http://node0:8100" \
  --prefill "http://node0:8101" \
  --decode "http://node0:8200" \
  --host 0.0.0.0 \
  --port 30000 \
  --prefill-policy round_robin \
  --kv-connector nixl \
  >"$LOG_DIR/router.log" 2>&1 &
pids+=("$!")
echo "started router (pid $!), log $LOG_DIR/router.log"

# The first process to exit ends the deployment on this host (cleanup stops the rest).
wait -n "${pids[@]}"
