"""The KV transfer itself: what hides a failed transfer, and what does not tune it."""

from __future__ import annotations

from typing import Iterator

from ..diagnostics import Category, Severity
from .context import RuleContext
from .registry import Violation, rule, set_field, unsafe


@rule(
    code="XFR001",
    name="transfer.recompute-hides-failures",
    title="kv_load_failure_policy: recompute",
    severity=Severity.WARNING,
    category=Category.OPERABILITY,
    applies="NIXL connector",
    source="vLLM config/kv_transfer.py KVTransferConfig.kv_load_failure_policy ('recompute': reschedule the "
    "request to recompute failed blocks; 'fail', the default: engine fact "
    "kv-load-failure-policy-default-fail); v1/core/sched/scheduler.py (recompute_kv_load_failures)",
    fix=unsafe(
        set_field("fail"), "sets kv_transfer.load_failure_policy: fail (unsafe: a failed transfer fails the request)"
    ),
)
def recompute_policy(ctx: RuleContext) -> Iterator[Violation]:
    """What it checks:
    That the KV connector's `kv_load_failure_policy` is `fail` (vLLM's default), not `recompute`.

    Why:
    With `recompute`, a transfer that fails makes decode recompute the prompt itself: requests
    still succeed, so a broken P/D path (a restarted prefill, an unreachable side channel) looks
    healthy while decode silently does prefill's work. `fail` makes the failure
    visible; `recipectl doctor`'s P/D proof then names it.

    Example:
        kv_transfer:
          load_failure_policy: recompute

    Fix:
        kv_transfer:
          load_failure_policy: fail
    """
    if ctx.uses_nixl and ctx.recipe.kv_transfer.load_failure_policy == "recompute":
        yield Violation(
            "kv_transfer.load_failure_policy",
            "failed KV transfers are recomputed on decode without a trace",
            "kv_transfer:\n  load_failure_policy: fail",
        )


@rule(
    code="XFR002",
    name="transfer.nccl-tuning",
    title="NCCL_* variables do not tune NIXL",
    severity=Severity.INFO,
    category=Category.PERFORMANCE,
    applies="NIXL connector, NCCL_* set in the environment",
    source='vLLM nixl/base_worker.py (the NIXL agent\'s backends default to ["UCX"], from '
    "kv_connector_extra_config.backends; NCCL carries only the in-endpoint collectives)",
)
def nccl_tuning(ctx: RuleContext) -> Iterator[Violation]:
    """What it checks:
    Whether the recipe sets `NCCL_*` variables as if they tuned the P/D transfer.

    Why:
    NIXL moves KV blocks over UCX; `NCCL_*` variables change collectives inside an endpoint
    (TP/DP/EP), never the prefill-to-decode transfer. Transfer tuning is `UCX_TLS`,
    `UCX_NET_DEVICES` and friends. The setting is harmless; the expectation is wrong.

    Example:
        engine:
          env: {NCCL_IB_HCA: mlx5}

    Fix:
        engine:
          env: {UCX_NET_DEVICES: mlx5_0:1}   # what the transfer uses
    """
    if not ctx.uses_nixl:
        return
    seen: set[str] = set()
    for role, _ in ctx.roles():
        for var in ctx.env(role):
            path = ctx.env_path(role, var)
            if var.startswith("NCCL_") and path not in seen:
                seen.add(path)
                yield Violation(
                    path,
                    f"{var} tunes NCCL collectives inside an endpoint, not the NIXL/UCX transfer",
                    "# transfer tuning is UCX_*: UCX_TLS, UCX_NET_DEVICES",
                )
