#!/usr/bin/env bash
# Source: vllm-project/vllm#42182 (see qwen35-27b-gb200-tp1-prefill.sh): the decode server, TP1, async
# scheduling on. KNOWN BAD: the P/D async-scheduling race on the KV consumer (vLLM #37285, #42182;
# fixed by #45357 and #48481, both first released in 0.26.0).
export VLLM_SSM_CONV_STATE_LAYOUT=DS
export VLLM_NIXL_SIDE_CHANNEL_PORT=5700
CUDA_VISIBLE_DEVICES=1 vllm serve Qwen/Qwen3.5-27B \
    --port 8200 \
    --tensor-parallel-size 1 \
    --async-scheduling \
    --no-enable-prefix-caching \
    --kv-transfer-config '{"kv_connector":"NixlConnector","kv_role":"kv_consumer"}'
