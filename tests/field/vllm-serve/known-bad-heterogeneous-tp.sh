#!/usr/bin/env bash
# Source: ai-dynamo/dynamo#10424's Qwen3.5-35B-A3B-FP8 P/D settings on vLLM 0.22.0 with decode at TP4 and
# prefill at TP2. KNOWN BAD: hybrid SSM-FA P/D supports homogeneous TP only (vLLM #36687); heterogeneous TP
# for hybrid models is handled from vLLM PR #49612 (July 2026) — the handshake fails on block sizes before.
pip install vllm==0.22.0

export VLLM_SSM_CONV_STATE_LAYOUT=DS

# prefill
VLLM_NIXL_SIDE_CHANNEL_PORT=5600 CUDA_VISIBLE_DEVICES=0,1 vllm serve Qwen/Qwen3.5-35B-A3B-FP8 \
  --port 8100 --tensor-parallel-size 2 \
  --no-enable-prefix-caching --no-async-scheduling \
  --kv-transfer-config '{"kv_connector":"NixlConnector","kv_role":"kv_producer"}' &

# decode
VLLM_NIXL_SIDE_CHANNEL_PORT=5700 CUDA_VISIBLE_DEVICES=2,3,4,5 vllm serve Qwen/Qwen3.5-35B-A3B-FP8 \
  --port 8200 --tensor-parallel-size 4 \
  --no-enable-prefix-caching --no-async-scheduling \
  --kv-transfer-config '{"kv_connector":"NixlConnector","kv_role":"kv_consumer"}' &

wait
