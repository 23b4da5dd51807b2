#!/usr/bin/env bash
# Source: ai-dynamo/dynamo#10424's Qwen3.5-35B-A3B-FP8 P/D settings on vLLM 0.22.0 with
# kv_load_failure_policy recompute on decode. KNOWN BAD: a failed transfer (a restarted prefill) is then
# recomputed silently on decode, hiding the fault (vllm-project/vllm#49238); `fail` makes it visible.
pip install vllm==0.22.0

export VLLM_SSM_CONV_STATE_LAYOUT=DS

# prefill
VLLM_NIXL_SIDE_CHANNEL_PORT=5600 CUDA_VISIBLE_DEVICES=0,1 vllm serve Qwen/Qwen3.5-35B-A3B-FP8 \
  --port 8100 --tensor-parallel-size 2 \
  --no-enable-prefix-caching --no-async-scheduling \
  --kv-transfer-config '{"kv_connector":"NixlConnector","kv_role":"kv_producer"}' &

# decode
VLLM_NIXL_SIDE_CHANNEL_PORT=5700 CUDA_VISIBLE_DEVICES=2,3 vllm serve Qwen/Qwen3.5-35B-A3B-FP8 \
  --port 8200 --tensor-parallel-size 2 \
  --no-enable-prefix-caching --no-async-scheduling \
  --kv-transfer-config '{"kv_connector":"NixlConnector","kv_role":"kv_consumer","kv_load_failure_policy":"recompute"}' &

wait
