"""The seed's throughput settings (25k tok/s/GPU on GB200 NVL72)."""

from __future__ import annotations

from typing import Iterator

from ..diagnostics import Category, Severity
from ..effective import Source
from ..effective import api_server_count as effective_api_servers
from ..engine_facts import fact
from ..engine_versions import ASYNC_RACE_FIXES, fmt_version
from ..plan.recipe_plan import state_dtypes
from .context import RuleContext
from .registry import Edit, Violation, rule, set_field, unsafe

HIGH_CONCURRENCY = 256  # from here on, per-token front-end overhead shows in the seed's sweep


@rule(
    code="PRF001",
    name="performance.async-scheduling",
    title="Async scheduling disabled",
    severity=Severity.WARNING,
    category=Category.PERFORMANCE,
    applies="any role, when the vLLM version carries the race fixes",
    source="seed (async scheduling: the key feature for passing 25K tok/s/GPU)",
    fix=unsafe(
        set_field(True), "sets async_scheduling: true on the role (unsafe: it was turned off, perhaps on purpose)"
    ),
)
def async_off(ctx: RuleContext) -> Iterator[Violation]:
    """What it checks:
    That async scheduling is not switched off where the engine has the P/D race fixes.

    Why:
    Async scheduling overlaps scheduling with the forward pass; the seed calls it the key feature
    for 25K tok/s/GPU. It is safe from vLLM 0.26 (or with PRs 45357 and 48481).

    Example:
        engine: {vllm_version: 0.26.0}
        decode: {async_scheduling: false}

    Fix:
        decode:
          async_scheduling: true
    """
    if ctx.hybrid and not ctx.has_fix(*ASYNC_RACE_FIXES):
        # Off is the safe choice there: the races are decode's (VER001), and before the fixes vLLM
        # asked hybrid P/D with TP > 1 to run without it on both roles (PR #36687's notes).
        return
    for role, _ in ctx.roles():
        setting = ctx.setting(role, "async_scheduling")
        if setting.value is False:
            yield Violation(setting.path, f"async scheduling is off on {role}", f"{role}:\n  async_scheduling: true")


def _ssm_bf16_both(ctx: RuleContext, v: Violation) -> tuple[Edit, ...]:
    """bfloat16 on decode and on prefill: the SSM dtype sets the page both roles share (CON004)."""
    settings = [ctx.setting(role, "mamba_ssm_cache_dtype") for role in ("prefill", "decode")]
    if any(s.source is Source.EXTRA_ARGS for s in settings):
        return ()
    return tuple(Edit(s.path, "bfloat16") for s in settings if s.value != "bfloat16" or not s.explicit)


@rule(
    code="PRF002",
    name="performance.decode-ssm-bf16",
    title="bf16 SSM cache on decode",
    severity=Severity.WARNING,
    category=Category.CAPACITY,
    applies="hybrid model, decode",
    source="seed (--mamba-ssm-cache-dtype bfloat16 on decode)",
    fix=unsafe(_ssm_bf16_both, "sets mamba_ssm_cache_dtype: bfloat16 on both roles (unsafe: other numerics)"),
)
def ssm_bf16(ctx: RuleContext) -> Iterator[Violation]:
    """What it checks:
    That the hybrid decode stores its SSM (temporal) state in bfloat16.

    Why:
    Qwen3.5's config asks for a float32 SSM state: 183 MiB per request on the 397B model against
    93 MiB in bf16. Halving it nearly doubles the requests decode can hold, which is what bounds
    the seed's concurrency sweep. Left at `auto`, vLLM takes the config's `mamba_ssm_dtype`, else
    the conv state's dtype (the model's): a model whose config asks for none already keeps its SSM
    state in bf16, and gets no finding.

    Example:
        decode: {}

    Fix:
        decode:
          mamba_ssm_cache_dtype: bfloat16
    """
    setting = ctx.setting("decode", "mamba_ssm_cache_dtype")
    # float16 is HYB007's finding on the same line (the size of bfloat16 already: nothing to gain here)
    if ctx.hybrid and setting.value not in ("bfloat16", "float16"):
        current, severity = setting.describe(), None
        if setting.value == "auto" and not setting.host_dependent:
            spec = ctx.model_spec
            resolved = state_dtypes(ctx.effective["decode"], spec).ssm if spec else None
            if resolved in ("bfloat16", "float16"):  # the config asks for nothing wider: auto is 16-bit already
                return
            if resolved:
                current = f"auto, which is {resolved} (the model's config asks for it)"
            else:  # a model recipectl cannot read: whether there is anything to gain is its config's to say
                current = "auto: the config's mamba_ssm_dtype where it has one (Qwen3.5's: float32), else the model's"
                severity = Severity.INFO
        # the same value on prefill too: the SSM dtype sets the page size both roles must share (CON004)
        yield Violation(
            setting.path,
            f"decode keeps SSM state in {current}",
            "prefill:\n  mamba_ssm_cache_dtype: bfloat16\ndecode:\n  mamba_ssm_cache_dtype: bfloat16",
            severity,
        )


@rule(
    code="PRF003",
    name="performance.language-model-only",
    title="--language-model-only for text workloads",
    severity=Severity.WARNING,
    category=Category.PERFORMANCE,
    applies="multimodal hybrid models (Qwen3.5) with a text-only workload; info from vLLM 0.29",
    source="seed (disables multimodal inputs, unlocks the fused QK-norm + RoPE + gate path); vLLM "
    "models/qwen3_next.py Qwen3NextAttention (from 0.29 the fused path also runs on interleaved "
    "MRoPE: engine fact fused-qknorm-rope-gate-mrope)",
    fix=unsafe(set_field(True), "sets model.language_model_only: true (unsafe: image inputs are refused)"),
)
def language_model_only(ctx: RuleContext) -> Iterator[Violation]:
    """What it checks:
    That a text-only workload on a Qwen3.5-class model sets `model.language_model_only`.

    Why:
    Qwen3.5 checkpoints carry a vision tower. With `--language-model-only` vLLM skips it and
    frees the encoder cache's memory; before vLLM 0.29 it is also what enables the fused QK-norm
    + RoPE + gate kernels. From 0.29 that fused path runs on Qwen3.5's interleaved MRoPE without
    the flag, so only the memory is left to gain: advice (info) there.

    Example:
        model: {path: Qwen/Qwen3.5-397B-A17B}
        workload: {text_only: true}

    Fix:
        model:
          language_model_only: true
    """
    m = ctx.recipe.model
    w = ctx.recipe.workload  # without one, whether the traffic is text only is not known
    if ctx.hybrid and m.multimodal and w is not None and w.text_only and not m.language_model_only:
        if ctx.holds("fused-qknorm-rope-gate-mrope") is not False:
            yield Violation(
                "model.language_model_only",
                "a text-only workload keeps the vision encoder and its "
                "cache in memory (the fused QK-norm + RoPE + gate path "
                "runs without the flag from vLLM 0.29)",
                "model:\n  language_model_only: true",
                Severity.INFO,
            )
        else:
            yield Violation(
                "model.language_model_only",
                "a text-only workload runs with the multimodal path on, "
                f"and vLLM {fmt_version(ctx.version)} enables the fused "
                "QK-norm + RoPE + gate path only with the flag",
                "model:\n  language_model_only: true",
            )


def _prefill_budget(ctx: RuleContext) -> tuple[int, int | None]:
    """(the budget PRF004 asks for, vLLM's default where the recipe leaves it unset): at least
    2 x ISL, never below the default vLLM would use nor below a given max_num_seqs (vLLM refuses a
    budget under it, SIZ002)."""
    assert ctx.recipe.workload is not None
    eff = ctx.effective["prefill"]
    want = 2 * ctx.recipe.workload.isl
    default = None
    limits = ctx.batch_limits("prefill")
    if eff.value("max_num_batched_tokens") is None and limits is not None:
        default = limits.max_num_batched_tokens
        want = max(want, default)
    seqs = eff.value("max_num_seqs")
    return (max(want, seqs) if isinstance(seqs, int) else want), default


def _twice_isl(ctx: RuleContext, v: Violation) -> tuple[Edit, ...]:
    return set_field(_prefill_budget(ctx)[0])(ctx, v) if ctx.recipe.workload is not None else ()


@rule(
    code="PRF004",
    name="performance.prefill-batched-tokens",
    title="Prefill max_num_batched_tokens >= 2 x ISL",
    severity=Severity.WARNING,
    category=Category.PERFORMANCE,
    applies="prefill",
    source="seed (16384 = 2 x ISL: about +8% total TPS/GPU at high concurrency)",
    fix=unsafe(_twice_isl, "sets prefill max_num_batched_tokens to 2 x ISL (unsafe: more activation memory)"),
)
def batched_tokens(ctx: RuleContext) -> Iterator[Violation]:
    """What it checks:
    That prefill's `max_num_batched_tokens` is at least twice the workload's ISL.

    Why:
    With a budget of one prompt per step, prefill becomes the bottleneck at high concurrency;
    the seed measured about +8% total TPS/GPU from 16384 at ISL 8192. Unset, the budget depends
    on GPU memory in vLLM and is not guaranteed.

    Example:
        workload: {isl: 8192, osl: 1024}
        prefill: {max_num_batched_tokens: 8192}

    Fix:
        prefill:
          max_num_batched_tokens: 16384
    """
    if ctx.recipe.workload is None:  # no ISL to size the budget by
        return
    twice = 2 * ctx.recipe.workload.isl
    want, default = _prefill_budget(ctx)
    setting = ctx.setting("prefill", "max_num_batched_tokens")
    have = setting.value
    if have is None:
        yield Violation(
            setting.path,
            "prefill max_num_batched_tokens is unset: vLLM picks it by the GPU and release "
            f"({f'{default:,} here' if default else 'max_model_len here, chunked prefill being off'}), "
            f"where 2 x ISL = {twice:,} is wanted",
            f"prefill:\n  max_num_batched_tokens: {want}",
        )
    elif have < twice:
        yield Violation(
            setting.path,
            f"prefill max_num_batched_tokens is {have}, below 2 x ISL = {twice}",
            f"prefill:\n  max_num_batched_tokens: {want}",
        )


@rule(
    code="PRF005",
    name="performance.stream-interval",
    title="--stream-interval at high concurrency",
    severity=Severity.INFO,
    category=Category.PERFORMANCE,
    applies=f"concurrency sweep reaching {HIGH_CONCURRENCY} or more",
    source="seed (--stream-interval 100: less front-end overhead, costs per-token latency)",
    fix=unsafe(set_field(100), "sets decode stream_interval: 100 (unsafe: clients see tokens in batches)"),
)
def stream_interval(ctx: RuleContext) -> Iterator[Violation]:
    """What it checks:
    That endpoints stream in batches of tokens when the sweep reaches high concurrency.

    Why:
    With thousands of streams, one HTTP chunk per token per request costs the API server more
    than the GPU step; the seed used 100. The price is coarser token timing for clients.
    Measured on 1 x H200 (2026-12-01; Qwen3.5-9B's dimensions, P/D sharing the GPU, ISL/OSL
    2048/256, one run): 100 against 1 gave -0.4%, -2.8% and -4.2% total TPS at 1, 16 and 64
    concurrent streams, below where this rule applies; not yet a confirmed effect
    (docs/gpu-evidence.md).

    Example:
        workload: {concurrency: [64, 5120]}
        decode: {}

    Fix:
        decode:
          stream_interval: 100
    """
    if (ctx.max_concurrency or 0) < HIGH_CONCURRENCY:
        return
    # decode streams the tokens; prefill answers with one token, its interval does not matter
    setting = ctx.setting("decode", "stream_interval")
    if (setting.value or 1) < 10:
        yield Violation(
            setting.path,
            f"decode streams every token at concurrency up to {ctx.max_concurrency}",
            "decode:\n  stream_interval: 100",
        )


@rule(
    code="PRF006",
    name="performance.api-server-count",
    title="--api-server-count 1 for stats",
    severity=Severity.INFO,
    category=Category.OPERABILITY,
    applies="any role running more than one API server, by its setting or by default (one per DP rank)",
    source="seed (--api-server-count 1 keeps default stats logging to find bottlenecks); vLLM "
    "entrypoints/cli/serve.py (api_server_count defaults to the data-parallel size: engine fact "
    "api-server-count-default-dp)",
    fix=unsafe(set_field(1), "sets api_server_count: 1 on the role (unsafe: one API server process)"),
)
def api_server_count(ctx: RuleContext) -> Iterator[Violation]:
    """What it checks:
    That endpoints run one API server process, so vLLM's periodic stats logging stays on.

    Why:
    With several API servers vLLM turns the default stats logging off; the KV-cache use and
    throughput lines the seed used to find bottlenecks disappear (and `recipectl top` has less
    to show). Left unset, `vllm serve` starts one API server per data-parallel rank (internal
    load balancing, as recipectl starts a DP endpoint): a DEP8 decode runs 8 by default.

    Example:
        decode: {parallel: DEP8}

    Fix:
        decode:
          api_server_count: 1
    """
    for role, _ in ctx.roles():
        count, stated = effective_api_servers(ctx.effective[role])
        if count > 1:
            how = "" if stated else f" by default (one per data-parallel rank of DP {count})"
            yield Violation(
                ctx.setting(role, "api_server_count").path,
                f"{role} runs {count} API servers{how}, so vLLM's stats logging is off",
                f"{role}:\n  api_server_count: 1",
            )


def _gdn_backend_fix(ctx: RuleContext, v: Violation) -> tuple[Edit, ...]:
    """flashinfer where it can run; triton (what runs anyway) where the head dim rules it out."""
    reachable = ctx.gdn_head_k_dim in (None, fact("flashinfer-gdn-prefill-blackwell").value["head_k_dim"])
    return set_field("flashinfer" if reachable else "triton")(ctx, v)


@rule(
    code="PRF007",
    name="performance.gdn-prefill-backend",
    title="FlashInfer GDN prefill kernel on Blackwell",
    severity=Severity.WARNING,
    category=Category.PERFORMANCE,
    applies="hybrid model, prefill, Blackwell GPUs, vLLM 0.22 or later (or unknown)",
    source="seed; flashinfer PR #3001 (5.92x kernel, 1.13x end-to-end prefill on 8xB200); vLLM "
    "gdn/qwen_gdn_linear_attn.py _resolve_gdn_prefill_backend (Blackwell: head_k_dim 128 and CUDA "
    "runtime >= 13, else Triton; engine fact flashinfer-gdn-prefill-blackwell)",
    fix=unsafe(
        _gdn_backend_fix,
        "sets prefill gdn_prefill_backend: flashinfer, or triton where the model's "
        "head dim keeps FlashInfer out of reach (unsafe: another kernel)",
    ),
)
def gdn_backend(ctx: RuleContext) -> Iterator[Violation]:
    """What it checks:
    That a hybrid prefill on Blackwell can reach the FlashInfer GDN prefill kernel: `flashinfer`,
    or `auto` (no flag), on a model whose GDN key head dimension is 128.

    Why:
    The Blackwell GDN prefill kernel replaced the FLA/Triton path: up to 5.92x on the kernel,
    1.13x end-to-end prefill throughput and 12% lower mean TTFT on 8xB200. vLLM picks it on
    Blackwell only when `head_k_dim` is 128 and the CUDA runtime is 13 or newer (from 0.22;
    before, FlashInfer's GDN prefill is Hopper-only); otherwise it runs Triton without a word,
    even when `flashinfer` is asked for. recipectl reads the head dimension from the model; the
    CUDA runtime is the image's, which it cannot see: check the engine log's "Using ... GDN
    prefill kernel" line.

    Example:
        cluster: {gpu: GB200}
        prefill: {gdn_prefill_backend: triton}

    Fix:
        prefill:
          gdn_prefill_backend: flashinfer
    """
    if not ctx.hybrid or ctx.gpu_family != "blackwell" or ctx.holds("flashinfer-gdn-prefill-blackwell") is False:
        return
    setting = ctx.setting("prefill", "gdn_prefill_backend")
    b = setting.value
    head_k_dim = ctx.gdn_head_k_dim
    needs = fact("flashinfer-gdn-prefill-blackwell").value
    reachable = head_k_dim is None or head_k_dim == needs["head_k_dim"]
    if b not in (None, "auto", "flashinfer"):
        if reachable:  # with another head dim every choice runs Triton: nothing to gain
            yield Violation(
                setting.path,
                f"prefill uses the {b} GDN prefill kernel on Blackwell",
                "prefill:\n  gdn_prefill_backend: flashinfer",
            )
    elif not reachable:
        yield Violation(
            setting.path,
            f"prefill asks for {b or 'auto'}, but on Blackwell vLLM runs FlashInfer's GDN "
            f"prefill only with head_k_dim {needs['head_k_dim']} (this model: "
            f"{head_k_dim}) and falls back to Triton without a word",
            "prefill:\n  gdn_prefill_backend: triton  # what runs; say it",
        )
