"""Sizing: the context window covers what the workload can draw; a step holds the batch."""

from __future__ import annotations

from typing import Iterator

from ..diagnostics import Category, Severity
from ..effective import Setting, Source
from ..engine_facts import Version, releases
from ..engine_versions import fmt_version
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
    applies="any role whose max_num_seqs is given; an unknown vLLM version: a warning where only some releases refuse",
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
    max_num_seqs is cut to the budget and never trips it. Where the version is unknown and the
    default differs between releases (16,384 on a GB200 from 0.28, 8,192 before), a warning
    names the releases that refuse.

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
    versions = [ctx.version] if ctx.version else list(releases())
    for role, _ in ctx.roles():
        eff = ctx.effective[role]
        seqs = eff.value("max_num_seqs")
        if seqs is None:  # defaulted: cut to the budget
            continue
        unknown = eff.deploy_time | {p.field for p in eff.problems}  # set at deploy time, or unreadable
        budget_given = eff.value("max_num_batched_tokens") is not None
        if unknown & ({"max_num_seqs", "max_num_batched_tokens"} | (set() if budget_given else _MOVE_DEFAULT)):
            continue
        at = {v: ctx.batch_limits(role, at=v) for v in versions}
        refused = [(v, limits) for v, limits in at.items() if limits and limits.max_num_batched_tokens < seqs]
        if not refused:
            continue
        _, limits = refused[0]
        budget = f"{limits.max_num_batched_tokens:,}" + (f" ({limits.tokens_default})" if limits.tokens_default else "")
        if ctx.version:
            who, severity = f"vLLM {fmt_version(ctx.version)}", None
        elif len(refused) == len(versions):
            who, severity = "vLLM (every release)", None
        else:
            who = f"vLLM {_releases_text([v for v, _ in refused])} (the version is unknown)"
            severity = Severity.WARNING
        # chunked prefill off: a budget below max_model_len is refused too (SIZ003)
        max_model_len = ctx.max_model_len(role)
        raise_to = max(seqs, max_model_len) if eff.value("enable_chunked_prefill") is False and max_model_len else seqs
        seqs_setting = ctx.setting(role, "max_num_seqs")
        budget_setting = ctx.setting(role, "max_num_batched_tokens")
        setting = budget_setting if budget_given else seqs_setting
        yield Violation(
            setting.path,
            f"{role}'s max_num_batched_tokens {budget} is below its max_num_seqs {seqs:,}: {who} refuses "
            "to start (each scheduled request takes a token of a step)",
            f"{role}:\n  {_set_text(budget_setting, '--max-num-batched-tokens', 'max_num_batched_tokens', raise_to)}"
            f"   # or {_set_text(seqs_setting, '--max-num-seqs', 'max_num_seqs', limits.max_num_batched_tokens)}",
            severity,
        )


@rule(
    code="SIZ003",
    name="sizing.unchunked-budget-below-max-model-len",
    title="Chunked prefill off: max_num_batched_tokens at least max_model_len",
    severity=Severity.ERROR,
    category=Category.REFUSED,
    applies="any role with --no-enable-chunked-prefill and a max_num_batched_tokens given",
    source="vLLM config/scheduler.py SchedulerConfig.verify_max_model_len (engine fact "
    "max-num-batched-tokens-covers-max-model-len-unchunked, every release)",
)
def unchunked_budget_below_max_model_len(ctx: RuleContext) -> Iterator[Violation]:
    """What it checks:
    That a role which turns chunked prefill off gives itself a token budget per step of at least
    its max_model_len.

    Why:
    Without chunked prefill a prompt is prefilled in one step, so vLLM refuses to start when a
    step is shorter than the longest prompt it admits ("max_num_batched_tokens (1000) is smaller
    than max_model_len (4096)"). A defaulted budget is raised to max_model_len then; a given one
    is not.

    Example:
        decode:
          max_num_batched_tokens: 1000
          extra_args: [--no-enable-chunked-prefill]

    Fix:
        decode:
          max_num_batched_tokens: 4096   # max_model_len
    """
    if ctx.holds("max-num-batched-tokens-covers-max-model-len-unchunked") is False:
        return
    for role, _ in ctx.roles():
        eff = ctx.effective[role]
        budget = eff.value("max_num_batched_tokens")
        if eff.value("enable_chunked_prefill") is not False or budget is None:
            continue
        if eff.deploy_time & {"max_num_batched_tokens", "enable_chunked_prefill", "max_model_len"}:
            continue
        max_model_len = ctx.max_model_len(role)
        if max_model_len is None or budget >= max_model_len:
            continue
        setting = ctx.setting(role, "max_num_batched_tokens")
        yield Violation(
            setting.path,
            f"{role} turns chunked prefill off with max_num_batched_tokens {budget:,}, below its max_model_len "
            f"{max_model_len:,}: vLLM refuses to start (a prompt is prefilled in one step)",
            f"{role}:\n  {_set_text(setting, '--max-num-batched-tokens', 'max_num_batched_tokens', max_model_len)}"
            f"   # or chunked prefill on (drop --no-enable-chunked-prefill)",
        )


# flags that move a defaulted budget (effective.batch_limits): one set at deploy time leaves it unknown
_MOVE_DEFAULT = {
    "performance_mode",
    "enable_chunked_prefill",
    "all2all_backend",
    "expert_parallel",
    "dp",
    "tp",
    "pipeline_parallel_size",
}


def _releases_text(versions: list[Version]) -> str:
    """``0.20.0-0.27.0`` for a run of the table's releases, else each."""
    table = list(releases())
    first, last = table.index(versions[0]), table.index(versions[-1])
    if last - first + 1 == len(versions) and len(versions) > 1:
        return f"{fmt_version(versions[0])}-{fmt_version(versions[-1])}"
    return ", ".join(fmt_version(v) for v in versions)


def _set_text(setting: Setting, flag: str, field: str, value: int) -> str:
    """How to set a limit where the recipe sets it: in extra_args (read after the fields, so the
    field would not win) or as the field."""
    if setting.source is Source.EXTRA_ARGS:
        return f"{flag} {value} in extra_args ({setting.path})"
    return f"{field}: {value}"
