"""What a GPU holds before its KV cache: weights by quantization layout, and the overheads vLLM
subtracts (activation peak, CUDA graphs, non-torch memory).

The overheads follow vLLM 0.26.0 (``Worker.determine_available_memory``, vllm/v1/worker/
gpu_worker.py): ``ceil(total x utilization)`` minus weights, minus the *non-torch increase* and the
*torch peak increase* measured around ``GPUModelRunner.profile_run`` (``memory_profiling``,
vllm/utils/mem_utils.py), minus ``profile_cudagraph_memory``'s estimate
(``VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS``, on by default since 0.21). :func:`engine_overheads`
builds each term from the role's settings and the model's dimensions; docs/gpu-evidence.md holds
the measurements they are checked against.
"""

from __future__ import annotations

import math

from pydantic import BaseModel, ConfigDict, Field

from recipectl.models.spec import ModelSpec

GiB = 1 << 30
MiB = 1 << 20


# ----- memory ----------------------------------------------------------------------------------
class Overheads(BaseModel):
    """Memory vLLM takes before the KV cache, besides weights. The defaults are the planner's
    older fixed assumptions (for direct callers of ``plan_role``); a recipe's plan uses
    :func:`engine_overheads`, built from the role's settings. Check either against the engine's
    "Available KV cache memory" log line.

    ``activation_peak_bytes``: transient peak of the profile run (``max_num_batched_tokens`` worth
    of activations, MoE workspaces, all-to-all buffers). ``cudagraph_bytes``: the CUDA-graph
    estimate vLLM subtracts since 0.21. ``non_torch_bytes``: CUDA context, NCCL, NIXL buffers.
    """

    # built when first used: `validate` imports this module and, unless it plans, never does
    model_config = ConfigDict(frozen=True, defer_build=True)

    activation_peak_bytes: int = Field(default=4 * GiB, ge=0)
    cudagraph_bytes: int = Field(default=1 * GiB, ge=0)
    non_torch_bytes: int = Field(default=1 * GiB, ge=0)

    @property
    def total(self) -> int:
        return self.activation_peak_bytes + self.cudagraph_bytes + self.non_torch_bytes


# ----- the engine's overheads, term by term -----------------------------------------------------
# torch's cuBLAS workspace, allocated through the caching allocator by the first matmul, which is
# in the profile run (dummy weights are never multiplied before it): torch's default on Hopper and
# later, CUBLAS_WORKSPACE_CONFIG ":4096:8" (8 x 4,096 KiB). Not read in this repository's sources:
# torch is on the GPU image; the 35B-A3B's two peaks (docs/gpu-evidence.md) are each ~0.03 GiB
# above the other terms, as this predicts.
CUBLAS_WORKSPACE_BYTES = 32 * MiB
# Triton's autotuner times candidate configs with triton.testing.do_bench, which clears the L2
# between runs by writing a torch buffer of 256 MiB (runtime driver
# ``get_empty_cache_for_benchmark``, Triton 3.x). The GDN prefill kernels vLLM carries
# (vllm/third_party/flash_linear_attention/ops: chunk_delta_h, chunk_o, wy_fast, solve_tril,
# cumsum, l2norm) are @triton.autotune'd, so the first forward of a hybrid model on the Triton
# GDN backend holds it. Checked on the tiny model (peak 0.29 / 0.30 GiB, docs/gpu-evidence.md).
TRITON_AUTOTUNE_FLUSH_BYTES = 256 * MiB
# Non-torch memory (CUDA module images, cuBLAS/NCCL handles, allocator slack) cannot be read off
# the source: it is cudaMemGetInfo minus torch's reservations. Measured at TP1 on H200 with vLLM
# 0.26.0: 0.25 GiB (Qwen3.5-35B-A3B, both roles) and 0.23 GiB (tiny Qwen3.5, both roles);
# the 35B's figure is used. Several GPUs per rank add NCCL's buffers and vLLM's custom
# all-reduce: not measured yet, the earlier 1 GiB assumption is kept for them.
NON_TORCH_TP1_BYTES = GiB // 4
NON_TORCH_MULTI_GPU_BYTES = 1 * GiB
# CUDA-graph estimate (GPUModelRunner.profile_cudagraph_memory): per mode, the free-memory drop of
# capturing the largest size ("first capture") and the second-largest ("per graph", at least
# 1 MiB, ``max(mem_samples[1], 1 << 20)``); the estimate is max(first captures) + the sum of
# (graphs - 1) x per-graph over the modes. Only the graph count and the 1 MiB floor come from the
# source; the driver memory a capture takes does not. Two assumptions, one from each measured
# model (docs/gpu-evidence.md, 51 PIECEWISE + 51 FULL graphs each): the tiny model's 0.18 GiB is
# the floor (100 x 1 MiB) plus an 84 MiB first capture, taken as the first capture of every
# model; the 35B-A3B's 0.64 GiB leaves 5.7 MiB per graph, taken as 0.143 MiB per layer
# (40 layers). The term is < 1.1% of either model's cache; tests/test_plan_memory.py bounds it.
CUDAGRAPH_FIRST_CAPTURE_BYTES = 84 * MiB
CUDAGRAPH_PER_GRAPH_PER_LAYER_BYTES = int(0.143 * MiB)
CUDAGRAPH_MIN_PER_GRAPH_BYTES = 1 * MiB


def _round_up(n: int, to: int) -> int:
    return -(-n // to) * to


def moe_workspace_bytes(spec: ModelSpec, num_tokens: int, tp: int, act_bytes: int = 2) -> int:
    """The fused-MoE workspace, which stays allocated after the forward (``WorkspaceManager``,
    vllm/v1/worker/workspace.py, grown to the largest request). ``FusedMoEModularKernel.
    _allocate_buffers`` (vllm/model_executor/layers/fused_moe/modular_kernel.py) takes, unchunked
    (M_chunk = M_full), one buffer of max(workspace13, output) and one of workspace2, each rounded
    up to 256 B (``get_simultaneous``); ``TritonExperts.workspace_shapes`` (experts/triton_moe.py):
    workspace13 = (M, topk, max(N/2, K)), workspace2 = (M, topk, max(N, K)), output (M, K), with
    N = 2 x moe_intermediate / TP (gate and up) and K = hidden; activation dtype."""
    if not spec.moe_layer_count:
        return 0
    m, topk, k = num_tokens, spec.num_experts_per_tok, spec.hidden_size
    n = 2 * spec.moe_intermediate_size // tp
    ws13 = max(m * topk * max(n // 2, k), m * k) * act_bytes
    ws2 = m * topk * max(n, k) * act_bytes
    return _round_up(ws13, 256) + _round_up(ws2, 256)


def sampler_peak_bytes(spec: ModelSpec, num_reqs: int, sm_count: int, act_bytes: int = 2) -> int:
    """What ``GPUModelRunner._dummy_sampler_run`` (vllm/v1/worker/gpu_model_runner.py) holds at
    its peak for ``num_reqs`` dummy requests of vocabulary V: the last hidden states and their
    ``rand_like`` copy (2 x reqs x hidden, model dtype), the logits (reqs x V, model dtype, from
    ``compute_logits``; all-gathered, so the full vocabulary on every TP rank), then in
    ``Sampler.forward`` (vllm/v1/sample/sampler.py) a float32 copy (``logits.to(float32)``),
    ``softmax`` probabilities and the exponential noise ``q`` of ``random_sample``
    (vllm/v1/sample/ops/topk_topp_sampler.py): 3 float32 copies; and the Triton top-k/top-p
    buffer, ``min(next_pow2(min(SMs, reqs)), SMs)`` rows of V float32, kept for later
    (``apply_top_k_top_p_triton``, ops/topk_topp_triton.py). The second warm-up call (with a
    generator) frees the first call's float32 copies before making its own: same peak."""
    v = spec.vocab_size
    rows = min(1 << max(0, min(sm_count, num_reqs) - 1).bit_length(), sm_count)
    return 2 * num_reqs * spec.hidden_size * act_bytes + num_reqs * v * (act_bytes + 3 * 4) + rows * v * 4


def activation_peak_bytes(
    spec: ModelSpec, *, max_num_batched_tokens: int, max_num_seqs: int, tp: int, sm_count: int
) -> int:
    """The torch peak increase of ``profile_run``: ``_dummy_run(max_num_tokens)`` then the sampler
    warm-up on ``min(max_num_tokens, max_num_seqs)`` requests (the dummy batch's request count,
    ``_dummy_run``). Held throughout: the cuBLAS workspace, the MoE workspace and the forward's
    hidden states (tokens x hidden, kept by ``profile_run`` until the end). On top, the larger of
    the Triton autotuner's L2-flush buffer (first forward of a GDN model) and the sampler's
    transients. The forward's own transients at the autotune are taken to be covered by the held
    terms (on the tiny model they are within its 0.01 GiB log precision)."""
    tokens = max_num_batched_tokens
    held = CUBLAS_WORKSPACE_BYTES + moe_workspace_bytes(spec, tokens, tp) + tokens * spec.hidden_size * 2
    flush = TRITON_AUTOTUNE_FLUSH_BYTES if spec.num_linear_attention_layers else 0
    sampler = sampler_peak_bytes(spec, min(tokens, max_num_seqs), sm_count)
    return held + max(flush, sampler)


def cudagraph_capture_sizes(
    max_num_seqs: int, max_num_batched_tokens: int, max_capture_size: int | None = None, num_spec: int = 0
) -> list[int]:
    """``VllmConfig._set_cudagraph_sizes`` (vllm/config/vllm.py): the largest size is
    ``min(max_num_seqs x (1 + spec tokens) x 2, 512)`` unless set, capped at the token budget;
    sizes 1, 2, 4, every 8 below 256, every 16 from 256, plus the token budget if it fits."""
    top = max_capture_size or min(max_num_seqs * (1 + num_spec) * 2, 512)
    top = min(max_num_batched_tokens, top)
    sizes = [i for i in (1, 2, 4) if i <= top]
    if top >= 8:
        sizes += list(range(8, min(top + 1, 256), 8))
    if top >= 256:
        sizes += list(range(256, top + 1, 16))
    if max_num_batched_tokens <= top:
        sizes.append(max_num_batched_tokens)
    return sorted(set(sizes))


def cudagraph_estimate_bytes(
    spec: ModelSpec,
    *,
    max_num_seqs: int,
    max_num_batched_tokens: int,
    max_capture_size: int | None = None,
    enforce_eager: bool = False,
    num_spec: int = 0,
) -> int:
    """``profile_cudagraph_memory``'s estimate under the default FULL_AND_PIECEWISE mode
    (``MambaModelConfig`` turns it on for hybrid models): PIECEWISE graphs for every capture size,
    FULL graphs for the uniform-decode sizes (<= max_num_seqs x (1 + spec tokens)). 0 with
    ``enforce_eager``. The per-capture bytes are the assumptions above."""
    if enforce_eager:
        return 0
    sizes = cudagraph_capture_sizes(max_num_seqs, max_num_batched_tokens, max_capture_size, num_spec)
    modes = [len(sizes), sum(s <= max_num_seqs * (1 + num_spec) for s in sizes)]
    modes = [n for n in modes if n]
    per_graph = max(CUDAGRAPH_MIN_PER_GRAPH_BYTES, CUDAGRAPH_PER_GRAPH_PER_LAYER_BYTES * spec.num_hidden_layers)
    return CUDAGRAPH_FIRST_CAPTURE_BYTES + sum(n - 1 for n in modes) * per_graph


def engine_overheads(
    spec: ModelSpec,
    *,
    max_num_batched_tokens: int,
    max_num_seqs: int,
    tp: int = 1,
    dp: int = 1,
    sm_count: int,
    enforce_eager: bool = False,
    max_capture_size: int | None = None,
    num_spec: int = 0,
) -> "Overheads":
    """The three overheads of one GPU worker of a role, from its effective settings."""
    return Overheads(
        activation_peak_bytes=activation_peak_bytes(
            spec, max_num_batched_tokens=max_num_batched_tokens, max_num_seqs=max_num_seqs, tp=tp, sm_count=sm_count
        ),
        cudagraph_bytes=cudagraph_estimate_bytes(
            spec,
            max_num_seqs=max_num_seqs,
            max_num_batched_tokens=max_num_batched_tokens,
            max_capture_size=max_capture_size,
            enforce_eager=enforce_eager,
            num_spec=num_spec,
        ),
        non_torch_bytes=NON_TORCH_TP1_BYTES if tp * dp == 1 else NON_TORCH_MULTI_GPU_BYTES,
    )


def cache_bytes_per_gpu(
    gpu_memory_bytes: int, gpu_memory_utilization: float, weight_bytes: int, overheads: Overheads
) -> int:
    """Mirrors ``Worker.determine_available_memory``: ``ceil(total * utilization)`` minus what
    the profile run consumed (weights, non-torch, activation peak) minus the CUDA-graph estimate."""
    requested = math.ceil(gpu_memory_bytes * gpu_memory_utilization)
    return requested - weight_bytes - overheads.total


class QuantScheme(BaseModel):
    """Bytes per parameter of each part of a checkpoint."""

    model_config = ConfigDict(frozen=True)

    routed_experts: float
    mlp: float  # shared experts and dense MLPs
    mixers: float  # attention and GDN projections
    other: float = 2.0  # embeddings, lm_head, router, norms, conv: kept in bf16


QUANT_SCHEMES: dict[str, QuantScheme] = {
    "bf16": QuantScheme(routed_experts=2, mlp=2, mixers=2),
    # Block-scaled FP8 (128x128 scales: +4/16384 B/param, ignored).
    "fp8": QuantScheme(routed_experts=1, mlp=1, mixers=1),
    # NVFP4: 4-bit values + one fp8 scale per 16 = 0.5625 B/param. ModelOpt NVFP4 checkpoints of
    # hybrid models exclude self_attn*/linear_attn* and lm_head (their hf_quant_config.json
    # exclude_modules), so the mixers stay bf16.
    "nvfp4": QuantScheme(routed_experts=0.5625, mlp=0.5625, mixers=2),
}


def weight_bytes_per_gpu(
    spec: ModelSpec, quantization: str, tp: int, dp: int, ep: bool, include_mtp: bool = False
) -> int:
    """Weight bytes on one GPU. With expert parallelism (DEP) the routed experts are spread over
    EP = DP x TP ranks and everything else is replicated per DP rank (TP-sharded inside it);
    without it every part is TP-sharded and replicated per DP rank. Counts are approximated
    from the dims (:meth:`ModelSpec.param_counts`)."""
    q = QUANT_SCHEMES[quantization]
    c = spec.param_counts()
    experts = c.routed_experts * q.routed_experts / (tp * dp if ep else tp)
    rest = (c.shared_experts + c.dense_mlp) * q.mlp + (c.attention + c.linear_attention) * q.mixers
    rest += (c.embedding + c.lm_head + c.router + c.norms) * q.other
    if include_mtp:  # the MTP layer: a full-attention decoder layer with the model's MoE
        experts += c.mtp_routed_experts * q.routed_experts / (tp * dp if ep else tp)
        rest += (c.mtp - c.mtp_routed_experts) * q.mixers
    return int(experts + rest / tp)
