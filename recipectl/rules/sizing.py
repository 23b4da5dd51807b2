"""Sizing: the context window covers what the workload can draw; a step holds the batch."""

from __future__ import annotations

from typing import Iterator

from ..diagnostics import Category, Severity
from ..effective import batch_limits
from ..fieldtypes import MAX_TOKENS
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


@rule(
    code="SIZ002",
    name="sizing.budget-below-max-num-seqs",
    title="max_num_batched_tokens at least max_num_seqs",
    severity=Severity.ERROR,
    category=Category.REFUSED,
    applies="any role whose max_num_seqs is given",
    source="vLLM config/scheduler.py SchedulerConfig.verify_max_model_len (engine fact "
    "max-num-batched-tokens-at-least-max-num-seqs, every release); engine/arg_utils.py "
    "_set_default_max_num_seqs_and_batched_tokens_args (the defaulted budget)",
)
def budget_below_max_num_seqs(ctx: RuleContext) -> Iterator[Violation]:
    """What it checks:
    That each role's token budget per step (max_num_batched_tokens, given or the default vLLM
    fills in) is at least its max_num_seqs.

    Why:
    vLLM refuses to start otherwise ("max_num_batched_tokens (2048) must be greater than or
    equal to max_num_seqs (4096)"): every scheduled request takes at least one token of a step.
    A max_num_seqs raised for a large decode batch meets a defaulted budget that is smaller than
    it looks: 2,048 on the CPU, and 256 from vLLM 0.20 where MoE all-to-all is batched over DP
    ranks (--all2all-backend deepep_low_latency or nixl_ep with expert parallelism); a defaulted
    max_num_seqs is cut to the budget and never trips it.

    Example:
        decode:
          parallel: DEP8
          all2all_backend: deepep_low_latency
          max_num_seqs: 512

    Fix:
        decode:
          max_num_batched_tokens: 512   # at least max_num_seqs
    """
    if ctx.holds("max-num-batched-tokens-at-least-max-num-seqs") is False:
        return
    for role, _ in ctx.roles():
        eff = ctx.effective[role]
        if eff.value("max_num_seqs") is None:  # defaulted: cut to the budget
            continue
        if eff.deploy_time & {"max_num_seqs", "max_num_batched_tokens", "performance_mode"}:  # not known here
            continue
        # the cap of a defaulted budget at max_num_seqs x max_model_len never takes it below
        # max_num_seqs, so the longest context stands in for max_model_len
        limits = batch_limits(ctx.recipe, eff, MAX_TOKENS)
        if limits.max_num_batched_tokens >= limits.max_num_seqs:
            continue
        given = not limits.tokens_default
        setting = ctx.setting(role, "max_num_batched_tokens" if given else "max_num_seqs")
        budget = f"{limits.max_num_batched_tokens:,}" + ("" if given else f" ({limits.tokens_default})")
        yield Violation(
            setting.path,
            f"{role}'s max_num_batched_tokens {budget} is below its max_num_seqs {limits.max_num_seqs:,}: "
            "vLLM refuses to start (each scheduled request takes a token of a step)",
            f"{role}:\n  max_num_batched_tokens: {limits.max_num_seqs}"
            f"   # or max_num_seqs: {limits.max_num_batched_tokens}",
        )
