#!/usr/bin/env bash
# Source: vllm-project/recipes Qwen/Qwen3-Next.md (Qwen3-Next-80B-A3B-Instruct on 4 x H200, TP4, nightly vLLM;
# "Qwen3-Next currently does not support automatic prefix caching") split into one TP4 prefill and one TP4
# decode with vLLM's NixlConnector and the DS conv-state layout, as vLLM's disaggregated-serving docs set them.
# Written as plain vllm serve command lines for recipectl's corpus; no vLLM version is pinned.
export VLLM_SSM_CONV_STATE_LAYOUT=DS

# prefill
VLLM_NIXL_SIDE_CHANNEL_PORT=5600 CUDA_VISIBLE_DEVICES=0,1,2,3 vllm serve Qwen/Qwen3-Next-80B-A3B-Instruct \
  --port 8100 --tensor-parallel-size 4 --served-model-name qwen3-next \
  --no-enable-prefix-caching \
  --kv-transfer-config '{"kv_connector":"NixlConnector","kv_role":"kv_producer"}' &

# decode
VLLM_NIXL_SIDE_CHANNEL_PORT=5700 CUDA_VISIBLE_DEVICES=4,5,6,7 vllm serve Qwen/Qwen3-Next-80B-A3B-Instruct \
  --port 8200 --tensor-parallel-size 4 --served-model-name qwen3-next \
  --no-enable-prefix-caching \
  --kv-transfer-config '{"kv_connector":"NixlConnector","kv_role":"kv_consumer"}' &

wait
