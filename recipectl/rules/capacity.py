"""Capacity: the concurrency sweep against what decode can hold, quoting the planner."""

from __future__ import annotations

from typing import Iterator

from ..diagnostics import Category, Severity
from ..plan.recipe_plan import plan_recipe
from .context import RuleContext
from .registry import Violation, rule


@rule(
    code="CAP001",
    name="capacity.decode-saturation",
    title="Concurrency sweep beyond decode cache capacity",
    severity=Severity.WARNING,
    category=Category.CAPACITY,
    applies="recipes whose model the planner knows (built-in spec or local config.json)",
    source="seed (the sweep stopped at 5,120: decode ran out of KV cache); recipectl plan",
)
def decode_saturation(ctx: RuleContext) -> Iterator[Violation]:
    """What it checks:
    That the workload's highest concurrency fits in the decode endpoints' cache: KV blocks for
    the requests' mean resident length plus GDN state per request, as `recipectl plan` computes
    it from vLLM's own sizing arithmetic.

    Why:
    Past saturation, extra requests queue (or are preempted and recomputed): TPS per GPU stops
    growing and latency explodes — the seed's sweep ended there. Knowing it before the run saves
    the GPU hours spent measuring a plateau, and says how many decode GPUs the target needs.

    Example:
        decode: {endpoints: 1, parallel: DEP8}
        workload: {concurrency: [64, 5120]}

    Fix:
        decode:
          endpoints: 2       # or more decode GPUs, a bf16 SSM cache, fp8 KV
    """
    want = ctx.max_concurrency
    if want is None:  # no workload: no target to check
        return
    try:
        plans = plan_recipe(ctx.recipe)
    except (ValueError, KeyError):
        return
    if not plans:
        return
    decode = plans["decode"]
    sat = decode.saturation
    if sat is None or want <= sat:
        return
    per_endpoint_gpus = ctx.recipe.decode.parallel.gpus
    if not decode.plan.saturation_concurrency_per_rank:
        # the cache holds no request at all (weights and overheads take the memory)
        yield Violation(
            "workload.concurrency",
            f"decode holds no request: {decode.plan.num_blocks} cache blocks per rank, "
            f"{decode.plan.cache_bytes / 1e9:.2f} GB of cache per GPU after the weights",
            "decode:\n  parallel: DEP8   # more GPUs per endpoint, or a quantized checkpoint",
        )
        return
    need_gpus = decode.plan.decode_gpus_for(want)
    endpoints = -(-need_gpus // per_endpoint_gpus)
    yield Violation(
        "workload.concurrency",
        f"concurrency {want} exceeds what decode holds: about {sat} requests "
        f"({decode.plan.saturation_concurrency_per_rank} per DP rank, block {decode.plan.block_size}, "
        f"{decode.plan.num_blocks} blocks per rank); {need_gpus} decode GPUs would hold {want}",
        f"decode:\n  endpoints: {endpoints}   # planner: recipectl plan RECIPE",
    )
