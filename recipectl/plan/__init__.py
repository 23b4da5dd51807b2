"""Capacity planning for vLLM endpoints of hybrid (Gated DeltaNet + attention) and plain models.

Pure arithmetic mirroring vLLM 0.32.0's own start-up sizing, so a recipe can be checked
before any GPU is booked: how big a KV-cache block is, how many fit, how many requests of a
workload a decode endpoint keeps resident, and how many decode GPUs a target concurrency needs.

    >>> from recipectl.plan import QWEN3_5_397B_A17B, PlanInput, Workload, plan_role, GB200_HBM_BYTES
    >>> plan = plan_role(QWEN3_5_397B_A17B, PlanInput(
    ...     tp=1, dp=8, ep=True, max_model_len=16_590,
    ...     gpu_memory_bytes=GB200_HBM_BYTES, gpu_memory_utilization=0.9,
    ...     quantization="nvfp4", mamba_ssm_cache_dtype="bfloat16",
    ...     workload=Workload(isl=8192, osl=1024, range_ratio=0.8)))
    >>> plan.block_size
    1072
"""

from recipectl.models.builtin import (
    BUILTIN_MODELS,
    QWEN3_5_0_8B,
    QWEN3_5_4B,
    QWEN3_5_9B,
    QWEN3_5_27B,
    QWEN3_5_35B_A3B,
    QWEN3_5_122B_A10B,
    QWEN3_5_397B_A17B,
    QWEN3_NEXT_80B_A3B,
    builtin_model,
    find_builtin,
    suggest_builtin,
)
from recipectl.models.family import ModelFamily
from recipectl.models.spec import LayerType, ModelSpec, ParamCounts
from recipectl.plan.capacity import (
    GB200_HBM_BYTES,
    CacheGroup,
    CapacityPlan,
    Overheads,
    PlanInput,
    SsmDtypeGain,
    Workload,
    align_hybrid_block_size,
    attention_kv_bytes_per_token,
    attention_page_bytes_per_token,
    gdn_state_bytes_per_layer,
    gdn_state_bytes_per_request,
    kv_cache_groups,
    plan_role,
    random_dataset_ranges,
    ssm_dtype_gain,
    weight_bytes_per_gpu,
)

__all__ = [
    "BUILTIN_MODELS",
    "GB200_HBM_BYTES",
    "QWEN3_5_0_8B",
    "QWEN3_5_122B_A10B",
    "QWEN3_5_27B",
    "QWEN3_5_35B_A3B",
    "QWEN3_5_397B_A17B",
    "QWEN3_5_4B",
    "QWEN3_5_9B",
    "QWEN3_NEXT_80B_A3B",
    "CacheGroup",
    "CapacityPlan",
    "LayerType",
    "ModelFamily",
    "ModelSpec",
    "Overheads",
    "ParamCounts",
    "PlanInput",
    "SsmDtypeGain",
    "Workload",
    "align_hybrid_block_size",
    "attention_kv_bytes_per_token",
    "attention_page_bytes_per_token",
    "builtin_model",
    "find_builtin",
    "gdn_state_bytes_per_layer",
    "gdn_state_bytes_per_request",
    "kv_cache_groups",
    "plan_role",
    "random_dataset_ranges",
    "ssm_dtype_gain",
    "suggest_builtin",
    "weight_bytes_per_gpu",
]
