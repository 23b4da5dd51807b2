"""Version gates: fixes and flags that exist only from a given vLLM release (or patch)."""

from __future__ import annotations

from typing import Iterator

from ..diagnostics import Category, Severity
from ..effective import Source
from ..engine_facts import fact
from ..engine_versions import ASYNC_RACE_FIXES, first_release, fmt_version, gdn_backends_for
from .context import RuleContext
from .registry import Violation, rule


def _needs(*fact_ids: str) -> str:
    min_version = first_release(*fact_ids)
    prs = [pr for f in fact_ids for pr in fact(f).prs]
    prs_text = f"\n# or declare the fix in a patched build:\n#   patches: [{', '.join(map(str, prs))}]" if prs else ""
    return f"engine:\n  vllm_version: {fmt_version(min_version)}{prs_text}"


@rule(
    code="VER001",
    name="versions.async-scheduling-race",
    title="Async scheduling on hybrid P/D before the race fixes",
    severity=Severity.ERROR,
    category=Category.SILENT_CORRUPTION,
    applies="hybrid model, P/D decode (the KV consumer) with async scheduling on (explicitly or by default), "
    "vLLM < 0.26; unknown version: warning",
    source="seed (accuracy dropped to zero); vLLM issues #37285, #42182 (consumer-side block zeroing races "
    "the NIXL write); PRs #45357 and #48481",
)
def async_race(ctx: RuleContext) -> Iterator[Violation]:
    """What it checks:
    That async scheduling on a hybrid P/D deployment runs on a vLLM that carries both race
    fixes: 0.26.0 or later, or a build that declares `patches: [45357, 48481]`.

    Why:
    Two races on the decode (consumer) side — block zeroing racing the NIXL write — corrupt
    transferred state silently under async scheduling: GSM8K accuracy dropped to zero while every
    health check passed (a Dynamo recipe measured GPQA-Diamond 83.84 -> 19.19). Async scheduling
    is on by default where supported, so a recipe that does not mention it is exposed too.
    Prefill (the producer) is not affected and keeps async scheduling. With the version unknown
    (an image tag that is not `vllm/vllm-openai:vX.Y.Z`) it is a warning that says what to declare.

    Example:
        engine: {vllm_version: 0.25.0}
        decode: {async_scheduling: true}

    Fix:
        engine:
          vllm_version: 0.26.0
        # or, on an older engine:
        decode:
          async_scheduling: false
    """
    if not ctx.hybrid:
        return
    fixed = ctx.has_fix(*ASYNC_RACE_FIXES)
    if fixed:
        return
    for role in ("decode",):  # the races are the consumer's
        setting = ctx.setting(role, "async_scheduling")
        if setting.value is False:
            continue
        how = "on" if setting.explicit else "on by default"
        why = (
            "the vLLM version is unknown (set engine.vllm_version, or declare patches)"
            if fixed is None
            else f"vLLM {fmt_version(ctx.version)} lacks the P/D async-scheduling race fixes"
        )
        yield Violation(
            setting.path,
            f"async scheduling is {how} on {role} and {why}",
            _needs(*ASYNC_RACE_FIXES) + f"\n# or, on an older engine:\n{role}:\n  async_scheduling: false",
            Severity.WARNING if fixed is None else None,
        )


@rule(
    code="VER002",
    name="versions.gdn-pd",
    title="GDN state transfer needs vLLM 0.22",
    severity=Severity.ERROR,
    category=Category.CRASH,
    applies="hybrid model, NIXL connector; unknown version: warning",
    source="vLLM PR #41869 (GDN layers in the NIXL P/D path)",
)
def gdn_pd(ctx: RuleContext) -> Iterator[Violation]:
    """What it checks:
    That a hybrid Gated DeltaNet model served in P/D over NIXL runs on vLLM 0.22.0 or later,
    or a build that declares `patches: [41869]`.

    Why:
    Before PR #41869 the disaggregated path knew attention KV and Mamba state but not Qwen3.5's
    GDN layers; the transfer cannot be set up.

    Example:
        engine: {vllm_version: 0.20.0}

    Fix:
        engine:
          vllm_version: 0.26.0
    """
    if not (ctx.hybrid and ctx.uses_nixl):
        return
    fixed = ctx.has_fix("gdn-pd-nixl")
    if fixed is False:
        yield Violation(
            "engine.vllm_version",
            f"vLLM {fmt_version(ctx.version)} cannot transfer GDN state over NIXL",
            _needs("gdn-pd-nixl"),
        )
    elif fixed is None:
        yield Violation(
            "engine.vllm_version",
            "the vLLM version is unknown, so GDN P/D support cannot be proven",
            _needs("gdn-pd-nixl"),
            Severity.WARNING,
        )


@rule(
    code="VER003",
    name="versions.ds-env-var",
    title="VLLM_SSM_CONV_STATE_LAYOUT needs vLLM 0.20",
    severity=Severity.ERROR,
    category=Category.CRASH,
    applies="VLLM_SSM_CONV_STATE_LAYOUT set on a role",
    source="vLLM envs.py (VLLM_SSM_CONV_STATE_LAYOUT first appears in 0.20.0: engine fact ssm-conv-state-layout-env)",
)
def ds_env_version(ctx: RuleContext) -> Iterator[Violation]:
    """What it checks:
    That `VLLM_SSM_CONV_STATE_LAYOUT` is only relied on with vLLM 0.20.0 or later.

    Why:
    Older releases ignore the variable: the recipe looks right and the layout stays SD.

    Example:
        engine: {vllm_version: 0.19.0}
        decode: {env: {VLLM_SSM_CONV_STATE_LAYOUT: DS}}

    Fix:
        engine:
          vllm_version: 0.26.0
    """
    if ctx.holds("ssm-conv-state-layout-env") is not False:
        return
    for role, _ in ctx.roles():
        if "VLLM_SSM_CONV_STATE_LAYOUT" in ctx.env(role):
            yield Violation(
                ctx.env_path(role, "VLLM_SSM_CONV_STATE_LAYOUT"),
                f"vLLM {fmt_version(ctx.version)} ignores VLLM_SSM_CONV_STATE_LAYOUT",
                _needs("ssm-conv-state-layout-env"),
            )


@rule(
    code="VER004",
    name="versions.flag-availability",
    title="Flag or choice the vLLM version does not have",
    severity=Severity.ERROR,
    category=Category.CRASH,
    applies="any role with a version-specific flag",
    source="vLLM engine/arg_utils.py per release: the --gdn-prefill-backend choices (engine facts "
    "gdn-prefill-backend-flag, -cutedsl, -aiter-flydsl, -sycl, -no-auto); config/cache.py MambaDType (bfloat16 "
    "from 0.22: engine fact mamba-dtype-bfloat16-choice; vLLM 0.21.0's parser refuses it, "
    "tests/test_engine_matrix_parser.py)",
)
def flag_availability(ctx: RuleContext) -> Iterator[Violation]:
    """What it checks:
    That every version-specific flag and choice the recipe asks for exists in its vLLM release:
    `--gdn-prefill-backend` (absent before 0.18; flashinfer|triton from 0.18; cutedsl from 0.22;
    aiter_flydsl from 0.32; sycl from 0.33). `auto` is no release's choice: the typed field's
    `auto` renders no flag, and `--gdn-prefill-backend auto` written in `extra_args` is refused.
    `bfloat16` for `--mamba-ssm-cache-dtype` / `--mamba-cache-dtype` from 0.22.

    Why:
    vLLM's parser rejects an unknown flag or choice and the process exits at once — on every
    node of the job. recipectl never renders such a flag silently.

    Example:
        engine: {vllm_version: 0.20.0}
        prefill: {gdn_prefill_backend: cutedsl}

    Fix:
        prefill:
          gdn_prefill_backend: flashinfer
    """
    for role, _ in ctx.roles():
        for field, flag in (
            ("mamba_ssm_cache_dtype", "--mamba-ssm-cache-dtype"),
            ("mamba_cache_dtype", "--mamba-cache-dtype"),
        ):
            dtype = ctx.setting(role, field)
            if (
                dtype.value == "bfloat16"
                and dtype.source is not Source.DEFAULT
                and ctx.holds("mamba-dtype-bfloat16-choice") is False
            ):
                yield Violation(
                    dtype.path,
                    f"vLLM {fmt_version(ctx.version)} accepts {flag} auto|float16|float32, not bfloat16: the "
                    "server exits at start",
                    f"{role}:\n  {field}: float32   # or engine.vllm_version 0.22.0 or later",
                )
        setting = ctx.setting(role, "gdn_prefill_backend")
        b = setting.value
        if b == "auto" and setting.source is Source.EXTRA_ARGS:
            # a typed `auto` renders no flag; written out, no release's parser accepts it
            yield Violation(
                setting.path,
                f"--gdn-prefill-backend auto in {role}.extra_args: auto is not one of the flag's "
                "choices in any vLLM release (leaving the flag out is auto); the server exits at start",
                f"{role}:\n  gdn_prefill_backend: auto  # renders no flag; drop it from extra_args",
            )
            continue
        if b is None or b == "auto":
            continue
        accepted = gdn_backends_for(ctx.version)
        if accepted is None:
            yield Violation(
                setting.path,
                f"vLLM {fmt_version(ctx.version)} has no --gdn-prefill-backend",
                f"{role}:\n  gdn_prefill_backend: auto  # renders no flag",
            )
        elif b not in accepted:
            yield Violation(
                setting.path,
                f"vLLM {fmt_version(ctx.version)} accepts --gdn-prefill-backend {'|'.join(sorted(accepted))}, not {b}",
                f"{role}:\n  gdn_prefill_backend: {'flashinfer' if 'flashinfer' in accepted else 'auto'}",
            )
