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
from dataclasses import dataclass, replace
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from recipectl.effective import PLATFORM_BLOCK_DEFAULTS
from recipectl.models.spec import ModelSpec
from recipectl.plan.memory import (  # noqa: F401 - the plan's pieces, importable from here too
    QUANT_SCHEMES,
    Overheads,
    QuantScheme,
    cache_bytes_per_gpu,
    weight_bytes_per_gpu,
)
from recipectl.plan.pages import (  # noqa: F401
    DTYPE_BYTES,
    CacheGroup,
    StatePages,
    align_hybrid_block_size,
    attention_kv_bytes_per_token,
    attention_page_bytes_per_token,
    blocks_per_request,
    bytes_per_block,
    cache_tokens,
    dtype_bytes,
    gdn_state_bytes_per_layer,
    gdn_state_bytes_per_request,
    gdn_state_shapes,
    kv_cache_groups,
    kv_heads_per_rank,
    mamba_blocks_per_request,
    max_concurrency,
    resolve_cache_dtype,
    resolve_ssm_dtype,
    state_pages,
)
from recipectl.plan.workload import (
    expected_resident_attention_blocks,
    random_dataset_ranges,
)

GiB = 1 << 30
MiB = 1 << 20


# ----- the plan --------------------------------------------------------------------------------
class Workload(BaseModel):
    """A ``vllm bench serve --dataset-name random`` workload."""

    # built when first used: `validate` imports this module and, unless it plans, never does
    model_config = ConfigDict(frozen=True, defer_build=True)

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

    # built when first used: `validate` imports this module and, unless it plans, never does
    model_config = ConfigDict(frozen=True, defer_build=True)

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


@dataclass(frozen=True, kw_only=True)
class PlanInput:
    """What :func:`plan_role` sizes one endpoint from: the role's layout and engine settings.
    ``recipe_plan.plan_input`` builds it from a role's effective configuration; a layout planned by
    hand (the tests, the docs) writes it out.

    ``cache_bytes_override`` replaces the GPU memory arithmetic (the CPU backend:
    ``VLLM_CPU_KVCACHE_SPACE`` GiB). ``gpu_memory_utilization`` defaults to vLLM's 0.92 (0.9
    before 0.20). ``enable_prefix_caching`` puts hybrid models in mamba ``align`` mode (2 state
    blocks per GDN group per request); a P/D decode runs it off. ``checkpoint_alignment`` (align
    mode only): the GDN prefill checkpoint grid the hybrid block is a multiple of
    (pages.align_hybrid_block_size). ``num_speculative_tokens`` adds the MTP layers' attention
    caches and speculative GDN state slots. ``model_dtype`` None: the model's own dtype;
    ``block_size``/``kernel_block_size`` None: the platform's defaults."""

    max_model_len: int
    tp: int = 1
    dp: int = 1
    ep: bool = False
    gpu_memory_bytes: int | None = None
    gpu_memory_utilization: float = 0.92
    cache_bytes_override: int | None = None
    kv_cache_dtype: str = "auto"
    mamba_cache_dtype: str = "auto"
    mamba_ssm_cache_dtype: str = "auto"
    model_dtype: str | None = None
    platform: Literal["cuda", "cpu"] = "cuda"
    block_size: int | None = None
    kernel_block_size: int | None = None
    enable_prefix_caching: bool = False
    checkpoint_alignment: int = 1
    quantization: str = "bf16"
    workload: Workload | None = None
    overheads: Overheads | None = None
    num_speculative_tokens: int = 0
    max_num_seqs: int | None = None


def plan_role(spec: ModelSpec, given: PlanInput) -> CapacityPlan:
    """Plan one endpoint's cache the way vLLM 0.32 sizes it at start-up. (One function on purpose,
    past 60 lines: it follows vLLM's sizing step by step and in vLLM's order, so the two can be
    read side by side.)"""
    max_model_len, tp, dp, ep = given.max_model_len, given.tp, given.dp, given.ep
    enable_prefix_caching, workload = given.enable_prefix_caching, given.workload
    model_dtype = given.model_dtype or spec.dtype
    default_block, default_kernel = PLATFORM_BLOCK_DEFAULTS[given.platform]
    block_size = given.block_size or default_block
    kernel_block_size = given.kernel_block_size or default_kernel
    overheads = given.overheads or Overheads()
    kv_dtype = resolve_cache_dtype(given.kv_cache_dtype, model_dtype)
    conv_dtype = resolve_cache_dtype(given.mamba_cache_dtype, model_dtype)
    ssm_dtype = resolve_ssm_dtype(spec, given.mamba_ssm_cache_dtype, conv_dtype)
    num_spec = given.num_speculative_tokens
    n_attn = spec.num_full_attention_layers + (spec.mtp_num_hidden_layers if num_spec else 0)
    n_gdn = spec.num_linear_attention_layers

    pages = state_pages(
        spec,
        tp=tp,
        kv_dtype=kv_dtype,
        conv_dtype=conv_dtype,
        ssm_dtype=ssm_dtype,
        block_size=block_size,
        kernel_block_size=kernel_block_size,
        num_spec=num_spec,
        checkpoint_alignment=given.checkpoint_alignment if enable_prefix_caching else 1,
    )
    attn_1tok, conv_b, ssm_b = pages.attention_bytes_per_token, pages.conv_bytes, pages.ssm_bytes
    block_size, page = pages.block_size, pages.attention_page_bytes
    mamba_page = conv_b + ssm_b
    groups = kv_cache_groups(n_attn, n_gdn)
    per_block = bytes_per_block(groups, page)

    weights = weight_bytes_per_gpu(spec, given.quantization, tp, dp, ep, include_mtp=num_spec > 0)
    if given.cache_bytes_override is not None:
        cache = given.cache_bytes_override
    elif given.gpu_memory_bytes is not None:
        cache = cache_bytes_per_gpu(given.gpu_memory_bytes, given.gpu_memory_utilization, weights, overheads)
    else:
        raise ValueError("give gpu_memory_bytes or cache_bytes_override")
    num_blocks = max(0, cache) // per_block
    mamba_blocks = mamba_blocks_per_request(enable_prefix_caching, num_spec)
    per_request = blocks_per_request(groups, max_model_len, block_size, mamba_blocks)
    concurrency = max_concurrency(num_blocks, groups, max_model_len, block_size, mamba_blocks)

    fields: dict = {}
    if workload is not None:
        fields = _workload_fields(workload, groups, block_size, mamba_blocks, num_blocks, dp, given.max_num_seqs)
    return CapacityPlan(
        model=spec.name,
        tp=tp,
        dp=dp,
        ep=ep,
        max_model_len=max_model_len,
        kv_cache_dtype=kv_dtype,
        conv_dtype=conv_dtype,
        ssm_dtype=ssm_dtype,
        mamba_cache_mode="align" if enable_prefix_caching and n_gdn else "none",
        kv_bytes_per_token=n_attn * attn_1tok,
        gdn_conv_bytes_per_layer=conv_b,
        gdn_ssm_bytes_per_layer=ssm_b,
        gdn_state_bytes_per_request=n_gdn * mamba_page,
        block_size=block_size,
        attention_page_bytes=page,
        mamba_page_bytes=mamba_page,
        mamba_padding_pct=100 * (page - mamba_page) / mamba_page if mamba_page else 0.0,
        groups=tuple(groups),
        page_bytes=per_block,
        weight_bytes_per_gpu=weights,
        cache_bytes=cache,
        num_blocks=num_blocks,
        mamba_blocks_per_request=mamba_blocks,
        blocks_per_request=per_request,
        max_concurrency=concurrency,
        cache_tokens=cache_tokens(concurrency, max_model_len),
        **fields,
    )


def _workload_fields(
    workload: Workload,
    groups: Sequence[CacheGroup],
    block_size: int,
    mamba_blocks: int,
    num_blocks: int,
    dp: int,
    max_num_seqs: int | None,
) -> dict:
    """Saturation figures: how many workload requests a rank's pool keeps resident. One block
    is vLLM's null block and holds nothing."""
    in_r, out_r = random_dataset_ranges(workload.isl, workload.osl, workload.range_ratio, workload.num_special_tokens)
    n_attn_groups = sum(g.kind == "attention" for g in groups)
    n_mamba_groups = len(groups) - n_attn_groups
    resident = (
        n_attn_groups * expected_resident_attention_blocks(in_r, out_r, block_size) + n_mamba_groups * mamba_blocks
    )
    mean_len = (in_r[0] + in_r[1]) // 2 + (out_r[0] + out_r[1]) // 2
    worst = blocks_per_request(groups, in_r[1] + out_r[1], block_size, mamba_blocks)
    usable = max(0, num_blocks - 1)
    per_rank = int(usable // resident)
    worst_rank = usable // worst
    if max_num_seqs is not None:
        per_rank, worst_rank = min(per_rank, max_num_seqs), min(worst_rank, max_num_seqs)
    return dict(
        input_range=in_r,
        output_range=out_r,
        blocks_per_request_mean_length=blocks_per_request(groups, mean_len, block_size, mamba_blocks),
        blocks_per_request_worst_case=worst,
        expected_resident_blocks=resident,
        saturation_concurrency_per_rank=per_rank,
        saturation_concurrency=per_rank * dp,
        worst_case_concurrency=worst_rank * dp,
    )


class SsmDtypeGain(BaseModel):
    """What ``--mamba-ssm-cache-dtype bfloat16`` buys over float32 on one layout."""

    # built when first used: `validate` imports this module and, unless it plans, never does
    model_config = ConfigDict(frozen=True, defer_build=True)

    bf16: CapacityPlan
    fp32: CapacityPlan

    @property
    def state_bytes_ratio(self) -> float:
        """fp32 GDN state per request / bf16 (about 1.97 for Qwen3.5)."""
        return self.fp32.gdn_state_bytes_per_request / self.bf16.gdn_state_bytes_per_request

    @property
    def concurrency_ratio(self) -> float | None:
        """bf16 saturation (or max) concurrency / fp32's: the capacity gain; None where fp32's
        cache holds no request (the weights leave it no memory), so that there is no ratio."""
        sat_a, sat_b = self.bf16.saturation_concurrency, self.fp32.saturation_concurrency
        a, b = (
            (sat_a, sat_b)
            if sat_a is not None and sat_b is not None
            else (self.bf16.max_concurrency, self.fp32.max_concurrency)
        )
        return a / b if b else None


def ssm_dtype_gain(spec: ModelSpec, given: PlanInput) -> SsmDtypeGain:
    """Plan the same role twice, SSM cache in bfloat16 and in float32 (whatever `given` asks for)."""
    return SsmDtypeGain(
        bf16=plan_role(spec, replace(given, mamba_ssm_cache_dtype="bfloat16")),
        fp32=plan_role(spec, replace(given, mamba_ssm_cache_dtype="float32")),
    )
