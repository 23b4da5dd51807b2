#!/usr/bin/env bash
# Source: vllm-project/vllm#42182 "Qwen3.5-27B Disagg accuracy gsm8k collapses with async scheduling when
# TP==1": the reporter's prefill server on GB200, vLLM 0.20.2rc1.dev265 (a development build), TP1, async
# scheduling on, NixlConnector, DS conv-state layout. Written for recipectl's corpus from those settings.
# KNOWN BAD together with qwen35-27b-gb200-tp1-decode.sh: GSM8K collapsed to ~0.12 (fixed in vLLM 0.26).
export VLLM_SSM_CONV_STATE_LAYOUT=DS
export VLLM_NIXL_SIDE_CHANNEL_PORT=5600
CUDA_VISIBLE_DEVICES=0 vllm serve Qwen/Qwen3.5-27B \
    --port 8100 \
    --tensor-parallel-size 1 \
    --async-scheduling \
    --no-enable-prefix-caching \
    --kv-transfer-config '{"kv_connector":"NixlConnector","kv_role":"kv_producer"}'
