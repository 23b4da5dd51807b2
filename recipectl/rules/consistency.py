"""Consistency across the two roles: what prefill writes, decode must be able to read."""

from __future__ import annotations

from typing import Iterator

from ..diagnostics import Category, Severity
from .context import RuleContext
from .registry import Violation, rule


@rule(code="CON001", name="consistency.hybrid-tp-match", title="Hybrid P/D needs the same TP on both roles",
      severity=Severity.ERROR, category=Category.CRASH,
      applies="hybrid model, P/D",
      source="vLLM PR #36687 (homogeneous TP only for hybrid SSM-FA); vllm-facts pitfalls")
def hybrid_tp(ctx: RuleContext) -> Iterator[Violation]:
    """What it checks:
    That prefill and decode endpoints of a hybrid model use the same tensor-parallel size.

    Why:
    Hybrid state transfer supports homogeneous TP only: GDN state is sharded by TP and the
    attention block size is aligned per rank, so different TP gives a block-size mismatch at
    the handshake.

    Example:
        prefill: {parallel: TP2}
        decode: {parallel: TP4}

    Fix:
        prefill:
          parallel: TP4
    """
    p, d = ctx.recipe.prefill.parallel.tp, ctx.recipe.decode.parallel.tp
    if ctx.hybrid and p != d:
        yield Violation("prefill.parallel", f"prefill TP {p} differs from decode TP {d} on a hybrid model",
                        f"prefill:\n  parallel: {{tp: {d}, dp: {ctx.recipe.prefill.parallel.dp}, "
                        f"expert_parallel: {str(ctx.recipe.prefill.parallel.expert_parallel).lower()}}}")


@rule(code="CON002", name="consistency.prefill-tp-above-decode", title="Prefill TP above decode TP",
      severity=Severity.ERROR, category=Category.CRASH,
      applies="P/D, any model",
      source="vLLM NIXL connector (heterogeneous TP: prefill TP > decode TP unsupported)")
def prefill_tp_above(ctx: RuleContext) -> Iterator[Violation]:
    """What it checks:
    That prefill TP is not larger than decode TP.

    Why:
    The NIXL connector maps one decode rank onto one or more prefill ranks; the reverse
    (prefill TP > decode TP) is not supported and fails at the handshake.

    Example:
        prefill: {parallel: TP4}
        decode: {parallel: TP2}

    Fix:
        prefill:
          parallel: TP2
    """
    p, d = ctx.recipe.prefill.parallel.tp, ctx.recipe.decode.parallel.tp
    if p > d and not ctx.hybrid:  # hybrids get CON001, which says more
        yield Violation("prefill.parallel", f"prefill TP {p} is above decode TP {d}",
                        f"prefill:\n  parallel: TP{d}")


@rule(code="CON003", name="consistency.kv-role", title="Explicit producer/consumer KV roles",
      severity=Severity.ERROR, category=Category.OPERABILITY,
      applies="NIXL connector",
      source="vLLM: kv_both deprecated for NIXL since 0.23")
def kv_roles(ctx: RuleContext) -> Iterator[Violation]:
    """What it checks:
    That prefill is `kv_producer` and decode `kv_consumer` (the default when `kv_role` is not set).

    Why:
    `kv_both` is deprecated for NIXL since vLLM 0.23; a role set the wrong way round makes
    the router's requests never transfer, and decode silently recomputes the prompt.

    Example:
        decode:
          kv_role: kv_both

    Fix:
        decode:
          kv_role: kv_consumer
    """
    want = {"prefill": "kv_producer", "decode": "kv_consumer"}
    for role, spec in ctx.roles():
        if spec.kv_role is not None and spec.kv_role != want[role]:
            yield Violation(f"{role}.kv_role", f"{role} has kv_role {spec.kv_role}",
                            f"{role}:\n  kv_role: {want[role]}")


def _differs(ctx: RuleContext, field: str) -> tuple[object, object] | None:
    p, d = getattr(ctx.recipe.prefill, field), getattr(ctx.recipe.decode, field)
    return (p, d) if p != d else None


@rule(code="CON004", name="consistency.cache-layout", title="Block size, KV-cache dtype and attention backend match",
      severity=Severity.ERROR, category=Category.SILENT_CORRUPTION,
      applies="P/D, any model",
      source="vllm-facts pitfalls (same attention backend and block size on both roles)")
def cache_layout(ctx: RuleContext) -> Iterator[Violation]:
    """What it checks:
    That `block_size`, `kv_cache_dtype`, `attention_backend` and `mamba_cache_dtype` are the
    same on prefill and decode (set on both, or on neither).

    Why:
    The transferred blocks are raw bytes: a different block size fails the handshake, a
    different dtype or attention-backend layout (NHD vs HND) is read as garbage.

    Example:
        prefill: {kv_cache_dtype: fp8}
        decode: {}

    Fix:
        prefill: {kv_cache_dtype: fp8}
        decode: {kv_cache_dtype: fp8}
    """
    for field in ("block_size", "kv_cache_dtype", "attention_backend", "mamba_cache_dtype"):
        diff = _differs(ctx, field)
        if diff:
            p, d = diff
            yield Violation(f"decode.{field}", f"{field} is {p} on prefill but {d} on decode",
                            f"prefill:\n  {field}: {p if p is not None else d}\n"
                            f"decode:\n  {field}: {p if p is not None else d}")
