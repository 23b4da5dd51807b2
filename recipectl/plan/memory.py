"""What a GPU holds before its KV cache: weights by quantization layout, and the overheads vLLM
subtracts (activation peak, CUDA graphs, non-torch memory)."""

from __future__ import annotations

import math

from pydantic import BaseModel, ConfigDict, Field

from recipectl.models.spec import ModelSpec

GiB = 1 << 30
MiB = 1 << 20

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
