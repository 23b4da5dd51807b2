"""Sizing: the context window covers what the workload can draw."""

from __future__ import annotations

from typing import Iterator

from ..diagnostics import Category, Severity
from .context import RuleContext
from .registry import Violation, rule


@rule(
    code="SIZ001",
    name="sizing.max-model-len",
    title="max_model_len covers the longest request",
    severity=Severity.ERROR,
    category=Category.REFUSED,
    applies="every role",
    source="vLLM bench random dataset (lengths drawn up to L x (1 + range_ratio))",
)
def max_model_len(ctx: RuleContext) -> Iterator[Violation]:
    """What it checks:
    That each role's `max_model_len` (role or model level) is at least
    ISL x (1 + ratio) + OSL x (1 + ratio), the longest request the workload can draw.

    Why:
    vLLM rejects a request longer than the context window with HTTP 400; a benchmark at the
    seed's ratio 0.8 then fails a share of its requests, and TPS numbers are computed on the
    ones that happened to be short.

    Example:
        workload: {isl: 8192, osl: 1024, random_range_ratio: 0.8}
        model: {max_model_len: 10240}

    Fix:
        model:
          max_model_len: 16589
    """
    w = ctx.recipe.workload
    if w is None:  # no workload: no request length to cover
        return
    need = w.max_isl + w.max_osl
    flagged: set[str] = set()
    for role, _ in ctx.roles():
        have = ctx.recipe.max_model_len(role)
        if have is None or have >= need:
            continue
        own = ctx.recipe.roles[role].max_model_len is not None
        path = f"{role}.max_model_len" if own else "model.max_model_len"
        if path in flagged:
            continue
        flagged.add(path)
        who = role if own else "every role"
        yield Violation(
            path,
            f"max_model_len {have} ({who}) is below the longest request {need} "
            f"(ISL {w.isl} and OSL {w.osl} with range ratio {w.random_range_ratio})",
            f"{role if own else 'model'}:\n  max_model_len: {need}",
        )
