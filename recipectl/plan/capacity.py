"""vLLM's KV-cache capacity arithmetic for hybrid (GDN + attention) and plain models.

Pure functions, no I/O. Each one names the vLLM function it mirrors. The source read is vLLM
0.32.0 (the wheel installed by ``scripts/install-engine.sh``; ``vllm/_version.py`` carries no
commit id), files:

- ``vllm/v1/kv_cache_interface.py``: ``FullAttentionSpec``/``AttentionSpec.page_size_bytes``,
  ``MambaSpec.page_size_bytes`` / ``max_memory_usage_bytes``;
- ``vllm/model_executor/layers/mamba/mamba_utils.py``:
  ``MambaStateShapeCalculator.gated_delta_net_state_shape``,
  ``MambaStateDtypeCalculator.gated_delta_net_state_dtype``;
- ``vllm/platforms/interface.py``: ``Platform._align_hybrid_block_size``;
- ``vllm/v1/core/kv_cache_utils.py``: ``_get_kv_cache_groups_uniform_page_size``,
  ``_get_kv_cache_bytes_per_block``, ``get_kv_cache_config_from_groups``,
  ``get_max_concurrency_for_kv_cache_config``, ``get_kv_cache_capacity``;
- ``vllm/v1/worker/gpu_worker.py``: ``Worker.determine_available_memory`` (+ ``request_memory``);
- ``vllm/benchmarks/datasets/utils.py``: ``get_sampling_params`` (random dataset lengths).

The resulting plan is :func:`recipectl.plan.plan_role`; this module holds the pieces.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from pydantic import BaseModel, ConfigDict, Field

from recipectl.effective import PLATFORM_BLOCK_DEFAULTS
from recipectl.models.spec import ModelSpec

GiB = 1 << 30
MiB = 1 << 20

DTYPE_BYTES: dict[str, int] = {
    "float32": 4, "fp32": 4, "float": 4,
    "bfloat16": 2, "bf16": 2, "float16": 2, "fp16": 2, "half": 2,
    "fp8": 1, "fp8_e4m3": 1, "fp8_e5m2": 1, "fp8_inc": 1,
}


def dtype_bytes(dtype: str) -> int:
    """Bytes per element of a vLLM cache/model dtype name (nvfp4 KV is not modelled)."""
    try:
        return DTYPE_BYTES[dtype.lower()]
    except KeyError:
        raise ValueError(f"unsupported dtype {dtype!r}; known: {sorted(DTYPE_BYTES)}") from None


def resolve_cache_dtype(cache_dtype: str, model_dtype: str) -> str:
    """``auto`` means the model dtype, as in ``vllm.utils.torch_utils.get_kv_cache_torch_dtype``."""
    return model_dtype if cache_dtype == "auto" else cache_dtype


# ----- attention -------------------------------------------------------------------------------
def kv_heads_per_rank(num_kv_heads: int, tp: int) -> int:
    """``max(1, kv_heads // tp)``: mirrors ``ModelConfig.get_num_kv_heads`` (heads are
    replicated when TP exceeds the KV head count)."""
    return max(1, num_kv_heads // tp)


def attention_page_bytes_per_token(spec: ModelSpec, tp: int, kv_cache_dtype: str) -> int:
    """One token of one full-attention layer on one rank: ``2 * kv_heads_per_rank * head_dim *
    dtype_bytes``. Mirrors ``AttentionSpec.page_size_bytes`` with ``block_size=1``."""
    return 2 * kv_heads_per_rank(spec.num_key_value_heads, tp) * spec.head_dim * dtype_bytes(
        kv_cache_dtype)


def attention_kv_bytes_per_token(spec: ModelSpec, tp: int, kv_cache_dtype: str,
                                 extra_attention_layers: int = 0) -> int:
    """KV bytes one token costs on one rank over all full-attention layers (no block rounding)."""
    layers = spec.num_full_attention_layers + extra_attention_layers
    return layers * attention_page_bytes_per_token(spec, tp, kv_cache_dtype)


# ----- GDN state -------------------------------------------------------------------------------
def _divide(a: int, b: int, what: str) -> int:
    if a % b:
        raise ValueError(f"{what} ({a}) is not divisible by tensor parallel size {b}")
    return a // b


def gdn_state_shapes(spec: ModelSpec, tp: int, num_spec: int = 0
                     ) -> tuple[tuple[int, int], tuple[int, int, int]]:
    """(conv, temporal) state shapes of one GDN layer on one rank. Mirrors
    ``MambaStateShapeCalculator.gated_delta_net_state_shape``: conv ``(conv_dim/TP, K-1+num_spec)``
    (the SD/DS layout only transposes it), temporal ``(num_v_heads/TP, v_dim, k_dim)``."""
    conv = (_divide(spec.gdn_conv_dim, tp, "GDN conv_dim"),
            spec.linear_conv_kernel_dim - 1 + num_spec)
    temporal = (_divide(spec.linear_num_value_heads, tp, "linear_num_value_heads"),
                spec.linear_value_head_dim, spec.linear_key_head_dim)
    return conv, temporal


def gdn_state_bytes_per_layer(spec: ModelSpec, tp: int, conv_dtype: str, ssm_dtype: str,
                              num_spec: int = 0) -> tuple[int, int]:
    """(conv bytes, temporal/SSM bytes) of one GDN layer for one request on one rank: the
    unpadded ``MambaSpec.page_size_bytes``. The conv state is in the mamba cache dtype (``auto``:
    the model dtype), the temporal state in the SSM cache dtype."""
    conv, temporal = gdn_state_shapes(spec, tp, num_spec)
    return (math.prod(conv) * dtype_bytes(conv_dtype),
            math.prod(temporal) * dtype_bytes(ssm_dtype))


def gdn_state_bytes_per_request(spec: ModelSpec, tp: int, conv_dtype: str, ssm_dtype: str,
                                num_spec: int = 0) -> int:
    """GDN state of one request on one rank, all GDN layers, before page padding."""
    return spec.num_linear_attention_layers * sum(
        gdn_state_bytes_per_layer(spec, tp, conv_dtype, ssm_dtype, num_spec))


def resolve_ssm_dtype(spec: ModelSpec, mamba_ssm_cache_dtype: str, conv_dtype: str) -> str:
    """The temporal-state dtype vLLM ends up with. ``auto`` takes the HF config's
    ``mamba_ssm_dtype`` for Qwen3.5 (``Qwen3_5ForConditionalGenerationConfig``), else falls back
    to the conv dtype (``MambaStateDtypeCalculator._mamba_state_dtype``)."""
    if mamba_ssm_cache_dtype != "auto":
        return mamba_ssm_cache_dtype
    return spec.mamba_ssm_dtype or conv_dtype


# ----- block size / page alignment -------------------------------------------------------------
def align_hybrid_block_size(attn_page_bytes_per_token: int, mamba_page_bytes: int,
                            block_size: int, kernel_block_size: int) -> tuple[int, int]:
    """(attention block size in tokens, padded mamba page bytes). Mirrors
    ``Platform._align_hybrid_block_size``: the attention block grows (by multiples of
    ``max(smallest kernel block, block_size)``) until one attention page covers a mamba page,
    never shrinks, and the mamba page is padded to exactly the attention page.

    ``kernel_block_size`` is the backend's smallest supported kernel block: 16 for FlashAttention
    and FlashInfer on CUDA (the SM100 default is FlashInfer), 32 for the CPU backend. The block
    size going in is vLLM's default: 16 on CUDA, 128 on CPU (``CpuPlatform``).
    """
    alignment = max(kernel_block_size, block_size)
    attn_block = alignment * math.ceil(mamba_page_bytes / (alignment * attn_page_bytes_per_token))
    attn_block = kernel_block_size * math.ceil(attn_block / kernel_block_size)
    block_size = max(block_size, attn_block)
    return block_size, block_size * attn_page_bytes_per_token


class StatePages(BaseModel):
    """The page geometry of one role: what a transferred block is made of. Prefill and decode
    must agree on it, or the NIXL handshake fails ("Local block size X is not divisible by remote
    block size Y") or the bytes are read as something else."""

    model_config = ConfigDict(frozen=True)

    block_size: int  # attention block in tokens, after hybrid alignment
    attention_page_bytes: int  # one attention layer, one block
    attention_bytes_per_token: int  # one attention layer, one token
    conv_bytes: int  # one GDN layer's conv state, one request
    ssm_bytes: int  # one GDN layer's temporal (SSM) state, one request


def state_pages(spec: ModelSpec, *, tp: int, kv_dtype: str, conv_dtype: str, ssm_dtype: str,
                block_size: int, kernel_block_size: int, num_spec: int = 0) -> StatePages:
    """A role's pages from concrete dtypes (no ``auto``): the attention page per token, the GDN
    state per layer and, for a hybrid model, the attention block grown until one page covers the
    GDN state (``Platform._align_hybrid_block_size``)."""
    attn_1tok = attention_page_bytes_per_token(spec, tp, kv_dtype)
    conv_b, ssm_b = (gdn_state_bytes_per_layer(spec, tp, conv_dtype, ssm_dtype, num_spec)
                     if spec.num_linear_attention_layers else (0, 0))
    page = block_size * attn_1tok
    if spec.num_linear_attention_layers:
        block_size, page = align_hybrid_block_size(attn_1tok, conv_b + ssm_b, block_size, kernel_block_size)
    return StatePages(block_size=block_size, attention_page_bytes=page, attention_bytes_per_token=attn_1tok,
                      conv_bytes=conv_b, ssm_bytes=ssm_b)


class CacheGroup(BaseModel):
    """One KV-cache group: layers sharing a block table (vLLM ``KVCacheGroupSpec``)."""

    model_config = ConfigDict(frozen=True)

    kind: str  # "attention" | "mamba"
    num_layers: int  # real layers (a short group is padded to group_size in bytes per block)


def kv_cache_groups(num_attention_layers: int, num_mamba_layers: int) -> list[CacheGroup]:
    """Mirrors ``_get_kv_cache_groups_uniform_page_size``: layers of one type form a bucket;
    the group size is the smallest bucket (or the largest when it is < 1.5x the smallest);
    each bucket splits into ``ceil(len / group_size)`` groups, layers taken with stride."""
    buckets = [("attention", num_attention_layers), ("mamba", num_mamba_layers)]
    buckets = [(k, n) for k, n in buckets if n]
    if len(buckets) == 1:  # one group with every layer (_get_kv_cache_groups_uniform_spec)
        return [CacheGroup(kind=buckets[0][0], num_layers=buckets[0][1])]
    group_size = min(n for _, n in buckets)
    if max(n for _, n in buckets) < group_size * 1.5:
        group_size = max(n for _, n in buckets)
    groups: list[CacheGroup] = []
    for kind, n in buckets:
        num_groups = math.ceil(n / group_size)
        groups += [CacheGroup(kind=kind, num_layers=len(range(i, n, num_groups)))
                   for i in range(num_groups)]
    return groups


def bytes_per_block(groups: Sequence[CacheGroup], page_bytes: int) -> int:
    """Bytes one block id costs in the shared pool: the largest group's layers x page.
    Mirrors ``_get_kv_cache_bytes_per_block`` (all pages equal after alignment)."""
    return max(g.num_layers for g in groups) * page_bytes


def blocks_per_request(groups: Sequence[CacheGroup], num_tokens: int, block_size: int,
                       mamba_blocks: int) -> int:
    """Block ids one request of ``num_tokens`` holds: ``ceil(tokens / block)`` per attention
    group plus ``mamba_blocks`` per mamba group (the ``required`` sum of
    ``get_max_concurrency_for_kv_cache_config``)."""
    per_attn = math.ceil(num_tokens / block_size)
    return sum(per_attn if g.kind == "attention" else mamba_blocks for g in groups)


def mamba_blocks_per_request(enable_prefix_caching: bool, num_spec: int = 0) -> int:
    """``MambaSpec.max_memory_usage_bytes / page``: 1 (+speculative) per request, 2 (+spec) in
    ``align`` mode, which prefix caching turns on for hybrid models (``MambaModelConfig``)."""
    return (2 if enable_prefix_caching else 1) + num_spec


def max_concurrency(num_blocks: int, groups: Sequence[CacheGroup], max_model_len: int,
                    block_size: int, mamba_blocks: int) -> float:
    """Mirrors ``get_max_concurrency_for_kv_cache_config``: pool / blocks per request at
    ``max_model_len`` (the null block is not subtracted, as in vLLM's log line)."""
    return num_blocks / blocks_per_request(groups, max_model_len, block_size, mamba_blocks)


def cache_tokens(concurrency: float, max_model_len: int) -> int:
    """``int(concurrency * max_model_len)``: "KV cache size: N tokens" (``get_kv_cache_capacity``).

    For a hybrid model this is not a count of token slots: it is concurrency x length."""
    return int(concurrency * max_model_len)


# ----- memory ----------------------------------------------------------------------------------
class Overheads(BaseModel):
    """Memory vLLM takes before the KV cache, besides weights. These are assumptions, not
    measurements: check them against the engine's "Available KV cache memory" log line.

    ``activation_peak_bytes``: transient peak of the profile run (``max_num_batched_tokens`` worth
    of activations, MoE workspaces, all-to-all buffers). ``cudagraph_bytes``: the CUDA-graph
    estimate vLLM subtracts since 0.21. ``non_torch_bytes``: CUDA context, NCCL, NIXL buffers.
    """

    model_config = ConfigDict(frozen=True)

    activation_peak_bytes: int = Field(default=4 * GiB, ge=0)
    cudagraph_bytes: int = Field(default=1 * GiB, ge=0)
    non_torch_bytes: int = Field(default=1 * GiB, ge=0)

    @property
    def total(self) -> int:
        return self.activation_peak_bytes + self.cudagraph_bytes + self.non_torch_bytes


def cache_bytes_per_gpu(gpu_memory_bytes: int, gpu_memory_utilization: float,
                        weight_bytes: int, overheads: Overheads) -> int:
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


def weight_bytes_per_gpu(spec: ModelSpec, quantization: str, tp: int, dp: int, ep: bool,
                         include_mtp: bool = False) -> int:
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


# ----- workload --------------------------------------------------------------------------------
def random_dataset_ranges(isl: int, osl: int, range_ratio: float, num_special_tokens: int = 0
                          ) -> tuple[tuple[int, int], tuple[int, int]]:
    """((input low, high), (output low, high)), both inclusive. Mirrors ``get_sampling_params``
    of ``vllm bench``'s random dataset: ``[floor(L(1-r)), ceil(L(1+r))]`` drawn uniformly with
    ``rng.integers(low, high + 1)``; the prompt loses the tokenizer's special tokens first and the
    output is at least 1; ``0 <= r < 1``."""
    if not 0.0 <= range_ratio < 1.0:
        raise ValueError("range_ratio must be in [0, 1)")
    real_isl = max(0, isl - num_special_tokens)
    in_lo, in_hi = math.floor(real_isl * (1 - range_ratio)), math.ceil(real_isl * (1 + range_ratio))
    out_lo = max(math.floor(osl * (1 - range_ratio)), 1)
    out_hi = max(math.ceil(osl * (1 + range_ratio)), 1)
    return (in_lo, in_hi), (out_lo, out_hi)


def _sum_ceil_div(x: int, b: int) -> int:
    """sum_{s=1..x} ceil(s / b), closed form."""
    if x <= 0:
        return 0
    q, r = divmod(x, b)
    return b * q * (q + 1) // 2 + r * (q + 1)


def expected_resident_attention_blocks(input_range: tuple[int, int],
                                       output_range: tuple[int, int], block_size: int) -> float:
    """Mean attention blocks (per attention group) held by a request resident on a decode.

    Every decode step weighs the same: a request with prompt i and output o stays o steps and
    holds i + t tokens at step t = 1..o (i, o uniform over their ranges). Long outputs stay
    longer, so the mean resident length is E[i] + E[o^2] / (2 E[o]), not E[i] + E[o] / 2; and
    rounding up to whole blocks adds about half a block. This is what a saturated decode's
    pool holds on average per request."""
    (i_lo, i_hi), (o_lo, o_hi) = input_range, output_range
    n_in = i_hi - i_lo + 1
    total = 0
    for t in range(1, o_hi + 1):
        weight = o_hi - max(t, o_lo) + 1  # outputs o in range with o >= t
        total += weight * (_sum_ceil_div(i_hi + t, block_size)
                           - _sum_ceil_div(i_lo - 1 + t, block_size))
    steps = n_in * sum(range(o_lo, o_hi + 1))
    return total / steps


# ----- the plan --------------------------------------------------------------------------------
class Workload(BaseModel):
    """A ``vllm bench serve --dataset-name random`` workload."""

    model_config = ConfigDict(frozen=True)

    isl: int = Field(gt=0)
    osl: int = Field(gt=0)
    range_ratio: float = Field(default=0.0, ge=0.0, lt=1.0)
    num_special_tokens: int = Field(default=0, ge=0)


# NVIDIA's GB200 NVL72 spec: "up to 13.4 TB HBM3e" for 72 GPUs, i.e. 186 GB per GPU
# (marketing GB, 10^9 B; what the driver reports as total may differ by a few GB).
GB200_HBM_BYTES = 186 * 10**9


class CapacityPlan(BaseModel):
    """What one role (prefill or decode endpoint) can hold. Per-rank figures are per GPU worker
    (the TP workers of one DP rank share block ids and each hold their shard)."""

    model_config = ConfigDict(frozen=True)

    model: str
    tp: int
    dp: int
    ep: bool
    max_model_len: int
    kv_cache_dtype: str
    conv_dtype: str
    ssm_dtype: str
    mamba_cache_mode: str
    kv_bytes_per_token: int  # all attention layers, one rank, unpadded
    gdn_conv_bytes_per_layer: int
    gdn_ssm_bytes_per_layer: int
    gdn_state_bytes_per_request: int  # all GDN layers, one rank, unpadded
    block_size: int  # attention block (after hybrid alignment)
    attention_page_bytes: int  # one attention layer, one block
    mamba_page_bytes: int  # one GDN layer, one request, before padding
    mamba_padding_pct: float
    groups: tuple[CacheGroup, ...]
    page_bytes: int  # one block id over the largest group (vLLM's bytes per block)
    weight_bytes_per_gpu: int
    cache_bytes: int
    num_blocks: int
    mamba_blocks_per_request: int
    blocks_per_request: int  # at max_model_len
    max_concurrency: float  # vLLM's "Maximum concurrency for N tokens per request"
    cache_tokens: int  # vLLM's "KV cache size: N tokens"
    # Workload figures (None without a workload).
    input_range: tuple[int, int] | None = None
    output_range: tuple[int, int] | None = None
    blocks_per_request_mean_length: int | None = None
    blocks_per_request_worst_case: int | None = None
    expected_resident_blocks: float | None = None
    saturation_concurrency_per_rank: int | None = None
    saturation_concurrency: int | None = None  # x DP: the whole endpoint
    worst_case_concurrency: int | None = None  # every request at its longest, x DP

    def decode_gpus_for(self, target_concurrency: int) -> int:
        """GPUs a decode endpoint of this layout needs to keep ``target_concurrency`` requests
        resident: whole DP ranks of ``tp`` GPUs each."""
        if not self.saturation_concurrency_per_rank:
            raise ValueError("plan has no workload (or holds no request): cannot size for a target")
        return math.ceil(target_concurrency / self.saturation_concurrency_per_rank) * self.tp


def plan_role(spec: ModelSpec, *, max_model_len: int, tp: int = 1, dp: int = 1, ep: bool = False,
              gpu_memory_bytes: int | None = None, gpu_memory_utilization: float = 0.92,
              cache_bytes_override: int | None = None, kv_cache_dtype: str = "auto",
              mamba_cache_dtype: str = "auto", mamba_ssm_cache_dtype: str = "auto",
              model_dtype: str | None = None, platform: str = "cuda",
              block_size: int | None = None, kernel_block_size: int | None = None,
              enable_prefix_caching: bool = False, quantization: str = "bf16",
              workload: Workload | None = None, overheads: Overheads | None = None,
              num_speculative_tokens: int = 0, max_num_seqs: int | None = None) -> CapacityPlan:
    """Plan one endpoint's cache the way vLLM 0.32 sizes it at start-up.

    ``cache_bytes_override`` replaces the GPU memory arithmetic (the CPU backend:
    ``VLLM_CPU_KVCACHE_SPACE`` GiB). ``gpu_memory_utilization`` defaults to vLLM's 0.92 (0.9
    before 0.20). ``enable_prefix_caching`` puts hybrid models in mamba ``align`` mode (2 state
    blocks per GDN group per request); a P/D decode runs it off. ``num_speculative_tokens`` adds
    the MTP layers' attention caches and speculative GDN state slots.
    """
    model_dtype = model_dtype or spec.dtype
    default_block, default_kernel = PLATFORM_BLOCK_DEFAULTS[platform]
    block_size = block_size or default_block
    kernel_block_size = kernel_block_size or default_kernel
    overheads = overheads or Overheads()
    kv_dtype = resolve_cache_dtype(kv_cache_dtype, model_dtype)
    conv_dtype = resolve_cache_dtype(mamba_cache_dtype, model_dtype)
    ssm_dtype = resolve_ssm_dtype(spec, mamba_ssm_cache_dtype, conv_dtype)
    num_spec = num_speculative_tokens
    n_attn = spec.num_full_attention_layers + (spec.mtp_num_hidden_layers if num_spec else 0)
    n_gdn = spec.num_linear_attention_layers

    pages = state_pages(spec, tp=tp, kv_dtype=kv_dtype, conv_dtype=conv_dtype, ssm_dtype=ssm_dtype,
                        block_size=block_size, kernel_block_size=kernel_block_size, num_spec=num_spec)
    attn_1tok, conv_b, ssm_b = pages.attention_bytes_per_token, pages.conv_bytes, pages.ssm_bytes
    block_size, page = pages.block_size, pages.attention_page_bytes
    mamba_page = conv_b + ssm_b
    groups = kv_cache_groups(n_attn, n_gdn)
    per_block = bytes_per_block(groups, page)

    weights = weight_bytes_per_gpu(spec, quantization, tp, dp, ep, include_mtp=num_spec > 0)
    if cache_bytes_override is not None:
        cache = cache_bytes_override
    elif gpu_memory_bytes is not None:
        cache = cache_bytes_per_gpu(gpu_memory_bytes, gpu_memory_utilization, weights, overheads)
    else:
        raise ValueError("give gpu_memory_bytes or cache_bytes_override")
    num_blocks = max(0, cache) // per_block
    mamba_blocks = mamba_blocks_per_request(enable_prefix_caching, num_spec)
    per_request = blocks_per_request(groups, max_model_len, block_size, mamba_blocks)
    concurrency = max_concurrency(num_blocks, groups, max_model_len, block_size, mamba_blocks)

    fields: dict = {}
    if workload is not None:
        fields = _workload_fields(workload, groups, block_size, mamba_blocks, num_blocks, dp,
                                  max_num_seqs)
    return CapacityPlan(
        model=spec.name, tp=tp, dp=dp, ep=ep, max_model_len=max_model_len,
        kv_cache_dtype=kv_dtype, conv_dtype=conv_dtype, ssm_dtype=ssm_dtype,
        mamba_cache_mode="align" if enable_prefix_caching and n_gdn else "none",
        kv_bytes_per_token=n_attn * attn_1tok,
        gdn_conv_bytes_per_layer=conv_b, gdn_ssm_bytes_per_layer=ssm_b,
        gdn_state_bytes_per_request=n_gdn * mamba_page,
        block_size=block_size, attention_page_bytes=page, mamba_page_bytes=mamba_page,
        mamba_padding_pct=100 * (page - mamba_page) / mamba_page if mamba_page else 0.0,
        groups=tuple(groups), page_bytes=per_block, weight_bytes_per_gpu=weights,
        cache_bytes=cache, num_blocks=num_blocks, mamba_blocks_per_request=mamba_blocks,
        blocks_per_request=per_request, max_concurrency=concurrency,
        cache_tokens=cache_tokens(concurrency, max_model_len), **fields)


def _workload_fields(workload: Workload, groups: Sequence[CacheGroup], block_size: int,
                     mamba_blocks: int, num_blocks: int, dp: int,
                     max_num_seqs: int | None) -> dict:
    """Saturation figures: how many workload requests a rank's pool keeps resident. One block
    is vLLM's null block and holds nothing."""
    in_r, out_r = random_dataset_ranges(workload.isl, workload.osl, workload.range_ratio,
                                        workload.num_special_tokens)
    n_attn_groups = sum(g.kind == "attention" for g in groups)
    n_mamba_groups = len(groups) - n_attn_groups
    resident = (n_attn_groups * expected_resident_attention_blocks(in_r, out_r, block_size)
                + n_mamba_groups * mamba_blocks)
    mean_len = (in_r[0] + in_r[1]) // 2 + (out_r[0] + out_r[1]) // 2
    worst = blocks_per_request(groups, in_r[1] + out_r[1], block_size, mamba_blocks)
    usable = max(0, num_blocks - 1)
    per_rank = int(usable // resident)
    worst_rank = usable // worst
    if max_num_seqs is not None:
        per_rank, worst_rank = min(per_rank, max_num_seqs), min(worst_rank, max_num_seqs)
    return dict(
        input_range=in_r, output_range=out_r,
        blocks_per_request_mean_length=blocks_per_request(groups, mean_len, block_size,
                                                          mamba_blocks),
        blocks_per_request_worst_case=worst, expected_resident_blocks=resident,
        saturation_concurrency_per_rank=per_rank, saturation_concurrency=per_rank * dp,
        worst_case_concurrency=worst_rank * dp)


class SsmDtypeGain(BaseModel):
    """What ``--mamba-ssm-cache-dtype bfloat16`` buys over float32 on one layout."""

    model_config = ConfigDict(frozen=True)

    bf16: CapacityPlan
    fp32: CapacityPlan

    @property
    def state_bytes_ratio(self) -> float:
        """fp32 GDN state per request / bf16 (about 1.97 for Qwen3.5)."""
        return self.fp32.gdn_state_bytes_per_request / self.bf16.gdn_state_bytes_per_request

    @property
    def concurrency_ratio(self) -> float:
        """bf16 saturation (or max) concurrency / fp32's: the capacity gain."""
        a, b = self.bf16.saturation_concurrency, self.fp32.saturation_concurrency
        if a is None or b is None:
            return self.bf16.max_concurrency / self.fp32.max_concurrency
        return a / b


def ssm_dtype_gain(spec: ModelSpec, **plan_kwargs) -> SsmDtypeGain:
    """Plan the same role twice, SSM cache in bfloat16 and in float32."""
    plan_kwargs.pop("mamba_ssm_cache_dtype", None)
    return SsmDtypeGain(bf16=plan_role(spec, mamba_ssm_cache_dtype="bfloat16", **plan_kwargs),
                        fp32=plan_role(spec, mamba_ssm_cache_dtype="float32", **plan_kwargs))
