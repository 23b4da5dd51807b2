#!/usr/bin/env bash
# Source: vllm-project/recipes Qwen/Qwen3-Next.md's MTP settings (--speculative-config qwen3_next_mtp, 2 tokens)
# on the decode role of a Qwen3-Next-80B-A3B P/D pair with the DS conv-state layout. KNOWN BAD: speculative
# decoding crashes on transferred requests with the DS layout (vLLM #38897, #38898: mamba_cache_mode=align is not
# implemented for the DS layout).
export VLLM_SSM_CONV_STATE_LAYOUT=DS

# prefill
VLLM_NIXL_SIDE_CHANNEL_PORT=5600 CUDA_VISIBLE_DEVICES=0,1,2,3 vllm serve Qwen/Qwen3-Next-80B-A3B-Instruct \
  --port 8100 --tensor-parallel-size 4 --no-enable-prefix-caching \
  --kv-transfer-config '{"kv_connector":"NixlConnector","kv_role":"kv_producer"}' &

# decode
VLLM_NIXL_SIDE_CHANNEL_PORT=5700 CUDA_VISIBLE_DEVICES=4,5,6,7 vllm serve Qwen/Qwen3-Next-80B-A3B-Instruct \
  --port 8200 --tensor-parallel-size 4 --no-enable-prefix-caching \
  --speculative-config '{"method": "qwen3_next_mtp", "num_speculative_tokens": 2}' \
  --kv-transfer-config '{"kv_connector":"NixlConnector","kv_role":"kv_consumer"}' &

wait
