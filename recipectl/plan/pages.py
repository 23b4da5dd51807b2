"""The page arithmetic of vLLM's KV cache for hybrid (GDN + attention) and plain models: bytes per
token and per GDN state, the hybrid-aligned block size, cache groups, blocks per request and the
concurrency vLLM prints. Pure functions; the sources they mirror are named in plan/capacity.py."""

from __future__ import annotations

import math
from collections.abc import Sequence

from pydantic import BaseModel, ConfigDict

from recipectl.models.spec import ModelSpec

GiB = 1 << 30
MiB = 1 << 20

DTYPE_BYTES: dict[str, int] = {
    "float32": 4,
    "fp32": 4,
    "float": 4,
    "bfloat16": 2,
    "bf16": 2,
    "float16": 2,
    "fp16": 2,
    "half": 2,
    "fp8": 1,
    "fp8_e4m3": 1,
    "fp8_e5m2": 1,
    "fp8_inc": 1,
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
    return 2 * kv_heads_per_rank(spec.num_key_value_heads, tp) * spec.head_dim * dtype_bytes(kv_cache_dtype)


def attention_kv_bytes_per_token(spec: ModelSpec, tp: int, kv_cache_dtype: str, extra_attention_layers: int = 0) -> int:
    """KV bytes one token costs on one rank over all full-attention layers (no block rounding)."""
    layers = spec.num_full_attention_layers + extra_attention_layers
    return layers * attention_page_bytes_per_token(spec, tp, kv_cache_dtype)


# ----- GDN state -------------------------------------------------------------------------------
def _divide(a: int, b: int, what: str) -> int:
    if a % b:
        raise ValueError(f"{what} ({a}) is not divisible by tensor parallel size {b}")
    return a // b


def gdn_state_shapes(spec: ModelSpec, tp: int, num_spec: int = 0) -> tuple[tuple[int, int], tuple[int, int, int]]:
    """(conv, temporal) state shapes of one GDN layer on one rank. Mirrors
    ``MambaStateShapeCalculator.gated_delta_net_state_shape``: conv ``(conv_dim/TP, K-1+num_spec)``
    (the SD/DS layout only transposes it), temporal ``(num_v_heads/TP, v_dim, k_dim)``."""
    conv = (_divide(spec.gdn_conv_dim, tp, "GDN conv_dim"), spec.linear_conv_kernel_dim - 1 + num_spec)
    temporal = (
        _divide(spec.linear_num_value_heads, tp, "linear_num_value_heads"),
        spec.linear_value_head_dim,
        spec.linear_key_head_dim,
    )
    return conv, temporal


def gdn_state_bytes_per_layer(
    spec: ModelSpec, tp: int, conv_dtype: str, ssm_dtype: str, num_spec: int = 0
) -> tuple[int, int]:
    """(conv bytes, temporal/SSM bytes) of one GDN layer for one request on one rank: the
    unpadded ``MambaSpec.page_size_bytes``. The conv state is in the mamba cache dtype (``auto``:
    the model dtype), the temporal state in the SSM cache dtype."""
    conv, temporal = gdn_state_shapes(spec, tp, num_spec)
    return (math.prod(conv) * dtype_bytes(conv_dtype), math.prod(temporal) * dtype_bytes(ssm_dtype))


def gdn_state_bytes_per_request(spec: ModelSpec, tp: int, conv_dtype: str, ssm_dtype: str, num_spec: int = 0) -> int:
    """GDN state of one request on one rank, all GDN layers, before page padding."""
    return spec.num_linear_attention_layers * sum(gdn_state_bytes_per_layer(spec, tp, conv_dtype, ssm_dtype, num_spec))


def resolve_ssm_dtype(spec: ModelSpec, mamba_ssm_cache_dtype: str, conv_dtype: str) -> str:
    """The temporal-state dtype vLLM ends up with. ``auto`` takes the HF config's
    ``mamba_ssm_dtype`` for Qwen3.5 (``Qwen3_5ForConditionalGenerationConfig``), else falls back
    to the conv dtype (``MambaStateDtypeCalculator._mamba_state_dtype``)."""
    if mamba_ssm_cache_dtype != "auto":
        return mamba_ssm_cache_dtype
    return spec.mamba_ssm_dtype or conv_dtype


# ----- block size / page alignment -------------------------------------------------------------
def align_hybrid_block_size(
    attn_page_bytes_per_token: int,
    mamba_page_bytes: int,
    block_size: int,
    kernel_block_size: int,
    checkpoint_alignment: int = 1,
) -> tuple[int, int]:
    """(attention block size in tokens, padded mamba page bytes). Mirrors
    ``Platform._align_hybrid_block_size``: the attention block grows (by multiples of
    ``max(smallest kernel block, block_size)``) until one attention page covers a mamba page,
    never shrinks, and the mamba page is padded to exactly the attention page.

    ``kernel_block_size`` is the backend's smallest supported kernel block: 16 for FlashAttention
    and FlashInfer on CUDA (the SM100 default is FlashInfer), 32 for the CPU backend. The block
    size going in is vLLM's default: 16 on CUDA, 128 on CPU (``CpuPlatform``).

    ``checkpoint_alignment``: from vLLM 0.33, in align mode (prefix caching) the alignment is also
    a multiple of the GDN layers' prefill checkpoint alignment, 64 tokens when their prefill runs
    FlashInfer (engine fact hybrid-block-align-flashinfer-gdn-64): Qwen3.5-397B's block is then
    1,088 tokens instead of 1,072.
    """
    alignment = math.lcm(max(kernel_block_size, block_size), checkpoint_alignment)
    attn_block = alignment * math.ceil(mamba_page_bytes / (alignment * attn_page_bytes_per_token))
    attn_block = kernel_block_size * math.ceil(attn_block / kernel_block_size)
    block_size = max(block_size, attn_block)
    return block_size, block_size * attn_page_bytes_per_token


class StatePages(BaseModel):
    """The page geometry of one role: what a transferred block is made of. Prefill and decode
    must agree on it, or the NIXL handshake fails ("Local block size X is not divisible by remote
    block size Y") or the bytes are read as something else."""

    # built when first used: `validate` imports this module and, unless it plans, never does
    model_config = ConfigDict(frozen=True, defer_build=True)

    block_size: int  # attention block in tokens, after hybrid alignment
    attention_page_bytes: int  # one attention layer, one block
    attention_bytes_per_token: int  # one attention layer, one token
    conv_bytes: int  # one GDN layer's conv state, one request
    ssm_bytes: int  # one GDN layer's temporal (SSM) state, one request


def state_pages(
    spec: ModelSpec,
    *,
    tp: int,
    kv_dtype: str,
    conv_dtype: str,
    ssm_dtype: str,
    block_size: int,
    kernel_block_size: int,
    num_spec: int = 0,
    checkpoint_alignment: int = 1,
) -> StatePages:
    """A role's pages from concrete dtypes (no ``auto``): the attention page per token, the GDN
    state per layer and, for a hybrid model, the attention block grown until one page covers the
    GDN state (``Platform._align_hybrid_block_size``)."""
    attn_1tok = attention_page_bytes_per_token(spec, tp, kv_dtype)
    conv_b, ssm_b = (
        gdn_state_bytes_per_layer(spec, tp, conv_dtype, ssm_dtype, num_spec)
        if spec.num_linear_attention_layers
        else (0, 0)
    )
    page = block_size * attn_1tok
    if spec.num_linear_attention_layers:
        block_size, page = align_hybrid_block_size(
            attn_1tok, conv_b + ssm_b, block_size, kernel_block_size, checkpoint_alignment
        )
    return StatePages(
        block_size=block_size,
        attention_page_bytes=page,
        attention_bytes_per_token=attn_1tok,
        conv_bytes=conv_b,
        ssm_bytes=ssm_b,
    )


class CacheGroup(BaseModel):
    """One KV-cache group: layers sharing a block table (vLLM ``KVCacheGroupSpec``)."""

    # built when first used: `validate` imports this module and, unless it plans, never does
    model_config = ConfigDict(frozen=True, defer_build=True)

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
        groups += [CacheGroup(kind=kind, num_layers=len(range(i, n, num_groups))) for i in range(num_groups)]
    return groups


def bytes_per_block(groups: Sequence[CacheGroup], page_bytes: int) -> int:
    """Bytes one block id costs in the shared pool: the largest group's layers x page.
    Mirrors ``_get_kv_cache_bytes_per_block`` (all pages equal after alignment)."""
    return max(g.num_layers for g in groups) * page_bytes


def blocks_per_request(groups: Sequence[CacheGroup], num_tokens: int, block_size: int, mamba_blocks: int) -> int:
    """Block ids one request of ``num_tokens`` holds: ``ceil(tokens / block)`` per attention
    group plus ``mamba_blocks`` per mamba group (the ``required`` sum of
    ``get_max_concurrency_for_kv_cache_config``)."""
    per_attn = math.ceil(num_tokens / block_size)
    return sum(per_attn if g.kind == "attention" else mamba_blocks for g in groups)


def mamba_blocks_per_request(enable_prefix_caching: bool, num_spec: int = 0) -> int:
    """``MambaSpec.max_memory_usage_bytes / page``: 1 (+speculative) per request, 2 (+spec) in
    ``align`` mode, which prefix caching turns on for hybrid models (``MambaModelConfig``)."""
    return (2 if enable_prefix_caching else 1) + num_spec


def max_concurrency(
    num_blocks: int, groups: Sequence[CacheGroup], max_model_len: int, block_size: int, mamba_blocks: int
) -> float:
    """Mirrors ``get_max_concurrency_for_kv_cache_config``: pool / blocks per request at
    ``max_model_len`` (the null block is not subtracted, as in vLLM's log line)."""
    return num_blocks / blocks_per_request(groups, max_model_len, block_size, mamba_blocks)


def cache_tokens(concurrency: float, max_model_len: int) -> int:
    """``int(concurrency * max_model_len)``: "KV cache size: N tokens" (``get_kv_cache_capacity``).

    For a hybrid model this is not a count of token slots: it is concurrency x length."""
    return int(concurrency * max_model_len)
