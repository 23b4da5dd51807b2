#!/usr/bin/env bash
# Rendered by recipectl from recipe qwen3.5-397b-nvfp4-gb200-pd.prefill-endpoints-4: the processes of host node3 (node 3).
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

# prefill-2
setsid env -- \
  CUDA_VISIBLE_DEVICES=0,1 \
  HF_TOKEN="${HF_TOKEN}" \
  UCX_NET_DEVICES=all \
  VLLM_NIXL_SIDE_CHANNEL_HOST="node3" \
  VLLM_NIXL_SIDE_CHANNEL_PORT=5600 \
  VLLM_SSM_CONV_STATE_LAYOUT=DS \
  vllm serve nvidia/Qwen3.5-397B-A17B-NVFP4 \
  --served-model-name qwen3.5-397b \
  --host 0.0.0.0 \
  --port 8100 \
  --data-parallel-size 2 \
  --enable-expert-parallel \
  --language-model-only \
  --max-model-len 16640 \
  --max-num-batched-tokens 16384 \
  --async-scheduling \
  --mamba-ssm-cache-dtype bfloat16 \
  --gdn-prefill-backend flashinfer \
  --stream-interval 100 \
  --api-server-count 1 \
  --no-enable-prefix-caching \
  --kv-transfer-config '{"kv_connector":"NixlConnector","kv_role":"kv_producer","kv_buffer_device":"cuda","kv_connector_extra_config":{"backends":["UCX"]}}' \
  >"$LOG_DIR/prefill-2.log" 2>&1 &
pids+=("$!")
echo "started prefill-2 (pid $!), log $LOG_DIR/prefill-2.log"

# prefill-3
setsid env -- \
  CUDA_VISIBLE_DEVICES=2,3 \
  HF_TOKEN="${HF_TOKEN}" \
  UCX_NET_DEVICES=all \
  VLLM_NIXL_SIDE_CHANNEL_HOST="node3" \
  VLLM_NIXL_SIDE_CHANNEL_PORT=5602 \
  VLLM_SSM_CONV_STATE_LAYOUT=DS \
  vllm serve nvidia/Qwen3.5-397B-A17B-NVFP4 \
  --served-model-name qwen3.5-397b \
  --host 0.0.0.0 \
  --port 8101 \
  --data-parallel-size 2 \
  --enable-expert-parallel \
  --language-model-only \
  --max-model-len 16640 \
  --max-num-batched-tokens 16384 \
  --async-scheduling \
  --mamba-ssm-cache-dtype bfloat16 \
  --gdn-prefill-backend flashinfer \
  --stream-interval 100 \
  --api-server-count 1 \
  --no-enable-prefix-caching \
  --kv-transfer-config '{"kv_connector":"NixlConnector","kv_role":"kv_producer","kv_buffer_device":"cuda","kv_connector_extra_config":{"backends":["UCX"]}}' \
  >"$LOG_DIR/prefill-3.log" 2>&1 &
pids+=("$!")
echo "started prefill-3 (pid $!), log $LOG_DIR/prefill-3.log"

# The first process to exit ends the deployment on this host (cleanup stops the rest).
wait -n "${pids[@]}"
