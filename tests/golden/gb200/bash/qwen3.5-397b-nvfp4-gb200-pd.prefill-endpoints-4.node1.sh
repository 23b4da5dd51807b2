#!/usr/bin/env bash
# Rendered by recipectl from recipe qwen3.5-397b-nvfp4-gb200-pd.prefill-endpoints-4: the processes of host node1 (node 1).
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

# decode-0-node1
setsid env -- \
  CUDA_VISIBLE_DEVICES=0,1,2,3 \
  HF_TOKEN="${HF_TOKEN}" \
  UCX_NET_DEVICES=all \
  VLLM_NIXL_SIDE_CHANNEL_HOST="node1" \
  VLLM_NIXL_SIDE_CHANNEL_PORT=5700 \
  VLLM_SSM_CONV_STATE_LAYOUT=DS \
  vllm serve nvidia/Qwen3.5-397B-A17B-NVFP4 \
  --served-model-name qwen3.5-397b \
  --data-parallel-size 8 \
  --data-parallel-size-local 4 \
  --data-parallel-start-rank 4 \
  --data-parallel-address "node0" \
  --data-parallel-rpc-port 13345 \
  --headless \
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
  >"$LOG_DIR/decode-0-node1.log" 2>&1 &
pids+=("$!")
echo "started decode-0-node1 (pid $!), log $LOG_DIR/decode-0-node1.log"

# The first process to exit ends the deployment on this host (cleanup stops the rest).
wait -n "${pids[@]}"
