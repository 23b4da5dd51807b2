#!/usr/bin/env bash
# Source: ai-dynamo/dynamo#10424 (Qwen3.5 GSM8K async-scheduling agg-vs-disagg repro): Qwen3.5-35B-A3B-FP8,
# TP2 prefill + TP2 decode on one 8 x H100 node, vLLM 0.22.0, bf16 KV cache, prefix caching off, async
# scheduling off (the control), NixlConnector with the DS conv-state layout. Ran successfully (GSM8K ~0.61
# strict, equal to aggregated). Written as plain vllm serve command lines for recipectl's corpus.
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
  --kv-transfer-config '{"kv_connector":"NixlConnector","kv_role":"kv_consumer"}' &

wait
