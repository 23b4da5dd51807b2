"""Hybrid (Gated DeltaNet + attention) state transfer: what breaks P/D of Qwen3.5-class models."""

from __future__ import annotations

from typing import Iterator

from ..diagnostics import Category, Severity
from .context import RuleContext
from .registry import Violation, rule, safe, set_field, unsafe

DS_VAR = "VLLM_SSM_CONV_STATE_LAYOUT"


@rule(code="HYB001", name="hybrid.ds-layout-missing", title="DS conv-state layout not set on a role",
      severity=Severity.ERROR, category=Category.CRASH,
      applies="hybrid model, NIXL connector, each role",
      source="seed (VLLM_SSM_CONV_STATE_LAYOUT=DS is mandatory); vllm nixl base_worker.py assertion",
      fix=safe(set_field("DS"), "sets it to DS in the role's env"))
def ds_layout_missing(ctx: RuleContext) -> Iterator[Violation]:
    """What it checks:
    That `VLLM_SSM_CONV_STATE_LAYOUT` is set for both the prefill and the decode processes of a
    hybrid model that moves state over NIXL.

    Why:
    The GDN conv state is transferred with a 3-read pattern that only works in the DS layout.
    On CUDA nothing sets it: unset means SD, and the engine dies at connector setup with
    "3-read Mamba conv transfer requires DS conv state layout". The layout must match on both
    roles. On the CPU platform vLLM sets DS itself when NIXL is configured (reported as info).

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
        if ctx.is_cpu:
            yield Violation(f"{role}.env.{DS_VAR}",
                            f"{DS_VAR} is unset on {role}; the CPU platform picks DS itself with NIXL, "
                            "but state it so the recipe also works on GPUs", fix, Severity.INFO)
        else:
            yield Violation(f"{role}.env.{DS_VAR}",
                            f"{DS_VAR} is unset on {role}: on CUDA that means SD and the engine dies at "
                            "NIXL connector setup", fix)


@rule(code="HYB002", name="hybrid.sd-layout-with-nixl", title="Conv-state layout other than DS with NIXL",
      severity=Severity.ERROR, category=Category.CRASH,
      applies="hybrid model, NIXL connector",
      source="seed; vllm-facts (explicit SD kills the engine ~3 min into start-up, CPU and CUDA)",
      fix=safe(set_field("DS"), "replaces the value with DS where it is set"))
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
            yield Violation(ctx.env_path(role, DS_VAR),
                            f"{DS_VAR}={value} on {role}: NIXL transfer of GDN conv state needs DS",
                            f"{role}:\n  env:\n    {DS_VAR}: DS")


@rule(code="HYB003", name="hybrid.decode-prefix-caching", title="Prefix caching on a hybrid P/D pair",
      severity=Severity.ERROR, category=Category.CRASH,
      applies="hybrid model, NIXL, either role, vLLM < 0.32 without PR 42554",
      source="vLLM PR #42554 ([PD][Nixl] Mamba prefix caching mode support); ai-dynamo/dynamo#12197 (decode "
             "'SSM can only have one local block'); vLLM #53514 (prefill-side assertion after a cache hit, 0.27.0)",
      fix=unsafe(set_field(False), "sets enable_prefix_caching: false on the role (unsafe: prefill recomputes "
                 "shared prefixes; a newer vLLM or declared patch is the other way)"))
def decode_prefix_caching(ctx: RuleContext) -> Iterator[Violation]:
    """What it checks:
    That neither role of a hybrid P/D pair runs with prefix caching (on by default in recent
    vLLM) on a release that predates Mamba prefix-caching support in the NIXL path.

    Why:
    Before vLLM PR #42554, Mamba prefix caching inserts placeholder blocks that the NIXL worker
    rejects on decode ("SSM can only have one local block", ai-dynamo/dynamo#12197) on the first
    transferred request — not at start-up, so the deployment looks healthy until traffic
    arrives. On prefill, a cache hit combined with NIXL's N-1 truncation asserted on 0.27.0
    (vLLM #53514). recipectl verified prefix caching on both roles on vLLM 0.32 (the local
    recipe's parity check). An error on the decode of a release known to lack the fix; a warning on
    prefill (the H200 evidence recipe ran on 0.26 with it on: the failure needs a cache hit) and
    where the version is unknown.

    Example:
        engine: {vllm_version: 0.26.0}
        decode: {}

    Fix:
        decode:
          enable_prefix_caching: false
    """
    if not (ctx.hybrid and ctx.uses_nixl):
        return
    if 42554 in ctx.recipe.engine.patches or ctx.version_at_least((0, 32, 0)):
        return
    for role in ("prefill", "decode"):
        setting = ctx.setting(role, "enable_prefix_caching")
        if setting.value is False:
            continue
        state = "enabled" if setting.explicit else "on by default"
        # decode asserts on its first transfer; prefill only after a prefix-cache hit (#53514), and
        # recipes/h200/tiny-qwen35-pd.yaml ran on 0.26 with it on: a warning there
        certain = role == "decode" and ctx.version is not None
        yield Violation(setting.path,
                        f"prefix caching is {state} on the hybrid {role} and vLLM "
                        f"{'version is unknown' if ctx.version is None else 'is older than 0.32'}",
                        f"{role}:\n  enable_prefix_caching: false\n"
                        "# or declare the fix: engine: {patches: [42554]}",
                        None if certain else Severity.WARNING)


@rule(code="HYB004", name="hybrid.speculative-decoding", title="Speculative decoding / MTP with hybrid P/D",
      severity=Severity.ERROR, category=Category.CRASH,
      applies="hybrid model, P/D, any role with speculative_config",
      source="vLLM #38897, #38898 (mamba_cache_mode=align not implemented for the DS layout P/D needs; "
             "fix PR #50363 closed unmerged); #43559, #53912 (MTP + prefix caching corrupts output)",
      fix=unsafe(set_field(None, remove=True), "removes the role's speculative_config (unsafe: turns "
                 "speculative decoding off)"))
def speculative(ctx: RuleContext) -> Iterator[Violation]:
    """What it checks:
    That no role of a hybrid P/D deployment sets a speculative config (MTP, EAGLE, n-gram).

    Why:
    Speculative decoding keeps extra recurrent-state slots per request; transferred GDN state
    does not carry them and decode crashes on the first transferred request.

    Example:
        decode:
          speculative_config: {method: mtp, num_speculative_tokens: 1}

    Fix:
        decode:
          speculative_config: null
    """
    if not ctx.hybrid:
        return
    for role, _ in ctx.roles():
        setting = ctx.setting(role, "speculative_config")
        if setting.value:
            yield Violation(setting.path,
                            f"speculative decoding on {role} of a hybrid P/D deployment crashes on "
                            "transferred requests", f"{role}:\n  speculative_config: null")


@rule(code="HYB005", name="hybrid.hma-disabled", title="Hybrid KV-cache manager disabled with NIXL",
      severity=Severity.ERROR, category=Category.CRASH,
      applies="hybrid model, NIXL connector",
      source="vLLM PRs #35758 and #36687 (HMA + NixlConnector)",
      fix=safe(set_field(False), "sets disable_hybrid_kv_cache_manager: false where the field sets it"))
def hma_disabled(ctx: RuleContext) -> Iterator[Violation]:
    """What it checks:
    That `disable_hybrid_kv_cache_manager` is not true on a hybrid model served over NIXL.

    Why:
    NIXL moves hybrid state through the hybrid memory allocator's block mapping; with the
    hybrid KV-cache manager disabled the connector fails at initialisation.

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
            yield Violation(setting.path,
                            f"the hybrid KV-cache manager is disabled on {role}; NIXL needs it for hybrid state",
                            f"{role}:\n  disable_hybrid_kv_cache_manager: false")


@rule(code="HYB006", name="hybrid.fp8-kv-nvfp4", title="FP8 KV cache on a Qwen3.5 NVFP4 P/D deployment",
      severity=Severity.ERROR, category=Category.SILENT_CORRUPTION,
      applies="hybrid model quantized to NVFP4, P/D, kv_cache_dtype fp8* on either role; an error on the "
              "397B the evidence is about, a warning on other NVFP4 hybrids",
      source="vLLM issue #42179 (FP8 KV cache corrupted Qwen3.5-397B-A17B-NVFP4 P/D output); ai-dynamo/dynamo "
             "recipes/qwen3.5-122b/nvfp4/vllm/disagg-b200-agentic (122B NVFP4 + FP8 KV, 1P2D, ~1,112 tok/s/GPU)",
      fix=unsafe(set_field("auto"), "sets kv_cache_dtype: auto on the role (unsafe: the KV cache takes twice "
                 "the memory)"))
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
            yield Violation(setting.path, f"{role} keeps an NVFP4 hybrid model's KV cache in {setting.value}, which "
                                          + ("corrupted P/D output (vLLM #42179)" if reported else
                                             "corrupted the 397B's P/D output (vLLM #42179); unproven on this "
                                             "model (Dynamo runs the 122B so)"),
                            f"{role}:\n  kv_cache_dtype: auto", None if reported else Severity.WARNING)


@rule(code="HYB007", name="hybrid.ssm-float16", title="float16 SSM cache: no memory saved over bfloat16",
      severity=Severity.WARNING, category=Category.SILENT_CORRUPTION,
      applies="hybrid model, any role with mamba_ssm_cache_dtype float16",
      source="vllm-facts (float16 and bfloat16 SSM cache are the same size); vLLM PR #39032 (NemotronH "
             "default moved to float32 for accuracy)",
      fix=unsafe(set_field("bfloat16"), "sets mamba_ssm_cache_dtype: bfloat16 on the role (unsafe: float32 "
                 "is the other choice, for the reference numerics)"))
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
            yield Violation(setting.path, f"{role} keeps SSM state in float16: the size of bfloat16, with less range",
                            "prefill:\n  mamba_ssm_cache_dtype: bfloat16\ndecode:\n  mamba_ssm_cache_dtype: bfloat16")
