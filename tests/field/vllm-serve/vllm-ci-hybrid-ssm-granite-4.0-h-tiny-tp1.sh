#!/bin/bash
# Source: vllm-project/vllm tests/v1/kv_connector/nixl_integration/config_sweep_accuracy_test.sh (commit
# 01cc1d3e), hybrid_ssm_configs[0] (HYBRID_SSM=1), run by its NIXL P/D CI through run_accuracy_test.sh (commit
# 002a1057): a Mamba2 hybrid (GraniteMoeHybrid) at TP1/TP1. The sweep passes its configuration as the
# environment of the run script, which builds each `vllm serve` line from variables with defaults
# (`${X:-default}`), an assigned KV_CONFIG and `$PORT`; the original builds each command as a string and evals
# it, restated here as the commands it runs, with the sweep's comma-separated extra arguments read into an
# array. Restated for recipectl's corpus; vLLM's CI runs it against its head.
set -xe

# the sweep's configuration, as the run script's environment
export VLLM_SSM_CONV_STATE_LAYOUT=DS
export GPU_MEMORY_UTILIZATION=0.8
export MODEL_NAMES=ibm-granite/granite-4.0-h-tiny
export VLLM_SERVE_EXTRA_ARGS=--max-model-len,8192,--trust-remote-code

KV_BUFFER_DEVICE="cuda"
DECODER_KV_LAYOUT=${DECODER_KV_LAYOUT:-"HND"}
KV_CONFIG='{"kv_connector":"NixlConnector","kv_role":"kv_both"}'
MODEL_NAME=${MODEL_NAMES:-"Qwen/Qwen3-0.6B"}
PREFILLER_TP_SIZE=${PREFILLER_TP_SIZE:-1}
DECODER_TP_SIZE=${DECODER_TP_SIZE:-1}
GPU_MEMORY_UTILIZATION=${GPU_MEMORY_UTILIZATION:-0.2}
PREFILL_BLOCK_SIZE=${PREFILL_BLOCK_SIZE:-128}
DECODE_BLOCK_SIZE=${DECODE_BLOCK_SIZE:-128}
IFS=',' read -r -a EXTRA_ARGS <<< "${VLLM_SERVE_EXTRA_ARGS:-}"

PORT=8100
SIDE_CHANNEL_PORT=5559
CUDA_VISIBLE_DEVICES=0 VLLM_KV_CACHE_LAYOUT='HND' UCX_NET_DEVICES=all VLLM_NIXL_SIDE_CHANNEL_PORT=$SIDE_CHANNEL_PORT \
  vllm serve $MODEL_NAME \
  --port $PORT \
  --enforce-eager --block-size ${PREFILL_BLOCK_SIZE} \
  --gpu-memory-utilization $GPU_MEMORY_UTILIZATION \
  --tensor-parallel-size $PREFILLER_TP_SIZE \
  --kv-transfer-config "$KV_CONFIG" \
  "${EXTRA_ARGS[@]}" &

PORT=8200
SIDE_CHANNEL_PORT=5659
CUDA_VISIBLE_DEVICES=1 VLLM_KV_CACHE_LAYOUT=$DECODER_KV_LAYOUT UCX_NET_DEVICES=all VLLM_NIXL_SIDE_CHANNEL_PORT=$SIDE_CHANNEL_PORT \
  vllm serve $MODEL_NAME \
  --port $PORT \
  --enforce-eager --block-size ${DECODE_BLOCK_SIZE} \
  --gpu-memory-utilization $GPU_MEMORY_UTILIZATION \
  --kv-transfer-config "$KV_CONFIG" \
  --tensor-parallel-size $DECODER_TP_SIZE \
  "${EXTRA_ARGS[@]}" &

python3 tests/v1/kv_connector/nixl_integration/toy_proxy_server.py --port 8192 \
  --prefiller-hosts localhost --prefiller-ports 8100 --decoder-hosts localhost --decoder-ports 8200 &
