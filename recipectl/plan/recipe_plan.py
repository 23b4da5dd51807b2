"""The planner applied to a recipe: which model spec, how much cache per GPU, which workload."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path

from ..effective import PLATFORM_BLOCK_DEFAULTS, EffectiveRole, HostCpu, batch_limits, resolve_role
from ..engine_facts import fact, holds
from ..errors import RecipectlError
from ..hardware import GPU_FACTS
from ..models.builtin import BUILTIN_MODELS, find_builtin, resolve_name, suggest_builtin
from ..models.info import ModelConfigError
from ..models.spec import ModelSpec
from ..schema import Recipe
from .capacity import (
    CapacityPlan,
    PlanInput,
    SsmDtypeGain,
    StatePages,
    Workload,
    plan_role,
    resolve_ssm_dtype,
    ssm_dtype_gain,
    state_pages,
)
from .memory import engine_overheads
from .perf import PromptSplit

# Memory per GPU as the driver reports it (bytes). The plan sizes from what the engine sees
# (hardware.GPU_FACTS: ``memory_bytes``), which is less where it has been measured.
GPU_MEMORY_BYTES = {gpu: facts.driver_memory_bytes for gpu, facts in GPU_FACTS.items()}
GiB = 2**30


@dataclass(frozen=True)
class RolePlan:
    role: str
    endpoints: int
    plan: CapacityPlan
    gain: SsmDtypeGain | None  # hybrid models only
    # where the planned max_model_len came from: "recipe", "model" (unset: the model's context, as
    # vLLM takes it) or "workload" (unset and the model's context unknown: isl + osl)
    max_model_len_from: str = "recipe"

    @property
    def saturation(self) -> int | None:
        s = self.plan.saturation_concurrency
        return None if s is None else s * self.endpoints


def model_spec(recipe: Recipe, base_dir: Path | None = None) -> ModelSpec | None:
    """The recipe's model as a ModelSpec: a built-in spec (by model.spec, or the model path's
    hub name), or the config.json the loader read (Recipe.model_facts); None if unknown. A
    config.json that cannot describe a model raises ModelConfigError (a ValueError). `base_dir`
    is not read: the facts carry the config's own path."""
    for name in (recipe.model.spec, recipe.model.path):
        found = find_builtin(name) if name else None
        if found:
            return found[0]
    facts = recipe.model_facts
    cfg, path = facts.config, facts.config_file
    if cfg is None:
        return None
    _check_config_sizes(cfg, path)
    try:
        return ModelSpec.from_config_dict(dict(cfg), name=recipe.model.name)
    except (KeyError, TypeError, ValueError, OverflowError, AttributeError, IndexError) as e:
        what = f"lacks {e.args[0]!r}" if isinstance(e, KeyError) else "does not describe a model recipectl can plan"
        raise ModelConfigError(
            f"the model's {path} {what}",
            fix="a Hugging Face config.json with num_hidden_layers, hidden_size, "
            "num_attention_heads, vocab_size (and layer_types for a hybrid model)",
        ) from None


# Sizes the planner loops over or multiplies: a config.json past these is not a real model.
_CONFIG_LIMITS = {
    "num_hidden_layers": 10_000,
    "full_attention_interval": 10_000,
    "decoder_sparse_step": 10_000,
    "mtp_num_hidden_layers": 10_000,
    "num_nextn_predict_layers": 10_000,
}


def _check_config_sizes(cfg: Mapping, path) -> None:
    text = cfg.get("text_config")
    merged = {**cfg, **text} if isinstance(text, dict) else cfg
    for key, value in merged.items():
        bad = (
            isinstance(value, (int, float)) and not isinstance(value, bool) and not (-(2**53) <= value <= 2**53)
        ) or (key in _CONFIG_LIMITS and isinstance(value, int) and not 0 <= value <= _CONFIG_LIMITS[key])
        if bad or isinstance(value, list) and len(value) > 100_000:
            raise ModelConfigError(f"the model's {path}: {key} is out of range")


def cpu_kvcache_gib(env: dict[str, str]) -> int | None:
    """VLLM_CPU_KVCACHE_SPACE as vLLM's CPU platform reads it: a whole number of GiB (int(); "1.5"
    stops the server at start-up). 4 when unset (the engine's default); None when it cannot be read."""
    raw = env.get("VLLM_CPU_KVCACHE_SPACE")
    if raw is None or raw == "":
        return 4
    text = raw.strip()
    if not text.lstrip("+").isdigit() or len(text) > 7:
        return None
    n = int(text)
    return n if n <= 1 << 20 else None


@dataclass(frozen=True)
class StateDtypes:
    """A role's cache dtypes with `auto` resolved (None: cannot be told without the model)."""

    model: str | None
    kv: str | None
    conv: str | None
    ssm: str | None


def state_dtypes(eff: EffectiveRole, spec: ModelSpec | None, host: str | None = None) -> StateDtypes:
    """`auto` as vLLM resolves it: KV and conv state take the model dtype; the SSM state takes the
    model config's mamba_ssm_dtype (Qwen3.5: float32), else the conv dtype."""
    model = eff["dtype"].on(host)
    if model in (None, "auto"):
        model = spec.dtype if spec else None

    def cache(field: str) -> str | None:
        v = eff[field].on(host)
        return model if v in (None, "auto") else v

    kv, conv = cache("kv_cache_dtype"), cache("mamba_cache_dtype")
    ssm = eff["mamba_ssm_cache_dtype"].on(host)
    if ssm in (None, "auto"):
        ssm = (resolve_ssm_dtype(spec, "auto", conv) if conv else None) if spec else None
    return StateDtypes(model, kv, conv, ssm)


def checkpoint_alignment(recipe: Recipe, eff: EffectiveRole, spec: ModelSpec | None) -> int:
    """The token grid vLLM 0.33+ keeps a hybrid block on in align mode (prefix caching on) when the
    GDN prefill runs FlashInfer (engine facts hybrid-block-align-flashinfer-gdn-64 and
    flashinfer-gdn-prefill-blackwell): `auto` or `flashinfer` on Hopper, or on Blackwell with
    head_k_dim 128 (a CUDA runtime of 13 or newer is assumed there: recipectl cannot see the
    image's); 1 otherwise."""
    align = fact("hybrid-block-align-flashinfer-gdn-64")
    if (
        spec is None
        or recipe.cluster.is_cpu
        or not eff.value("enable_prefix_caching")
        or holds(align.id, recipe.engine.version) is False
        or eff.value("gdn_prefill_backend") not in (None, "auto", "flashinfer")
    ):
        return 1
    family = recipe.cluster.gpu.family
    needs = fact("flashinfer-gdn-prefill-blackwell").value
    if family == "hopper" or (family == "blackwell" and spec.linear_key_head_dim == needs["head_k_dim"]):
        return int(align.value)
    return 1


def prompt_split(recipe: Recipe, eff: EffectiveRole, spec: ModelSpec | None, block_size: int) -> PromptSplit | None:
    """Where vLLM ends a prompt's prefill chunk besides the token budget: a hybrid model with
    prefix caching on (engine fact hybrid-prefill-split-at-last-block), each of the split's
    variants as the release has it (hybrid-prefill-split-whole-blocks, hybrid-prefill-cuts-
    aligned-to-prompt-end, and hybrid-prefill-no-split-flashinfer-gdn where the GDN prefill runs
    FlashInfer: the same condition as checkpoint_alignment's). None where nothing splits."""
    if spec is None or not spec.num_linear_attention_layers or not eff.value("enable_prefix_caching"):
        return None
    version = recipe.engine.version
    alignment = checkpoint_alignment(recipe, eff, spec)
    return PromptSplit(
        block=block_size,
        whole_blocks=holds("hybrid-prefill-split-whole-blocks", version) is not False,
        cuts_aligned_to_end=holds("hybrid-prefill-cuts-aligned-to-prompt-end", version) is not False,
        last_chunk_whole=alignment > 1 and holds("hybrid-prefill-no-split-flashinfer-gdn", version) is not False,
        checkpoint_alignment=alignment,
    )


def role_pages(
    recipe: Recipe, eff: EffectiveRole, spec: ModelSpec | None, host: str | None = None
) -> StatePages | None:
    """A role's page geometry (block size after hybrid alignment), or None where a dtype cannot
    be resolved or is not modelled (nvfp4 KV, an unknown model)."""
    d = state_dtypes(eff, spec, host)
    if spec is None or d.kv is None or d.conv is None or d.ssm is None:
        return None
    platform = "cpu" if recipe.cluster.is_cpu else "cuda"
    try:
        return state_pages(
            spec,
            tp=eff.value("tp"),
            kv_dtype=d.kv,
            conv_dtype=d.conv,
            ssm_dtype=d.ssm,
            block_size=eff["block_size"].on(host),
            kernel_block_size=PLATFORM_BLOCK_DEFAULTS[platform][1],
            checkpoint_alignment=checkpoint_alignment(recipe, eff, spec),
        )
    except ValueError:
        return None


def unknown_model_error(recipe: Recipe) -> str:
    """Why the planner has no description of the recipe's model, with the closest built-in names."""
    m = recipe.model
    named = m.spec or m.path
    hint = suggest_builtin(named)
    what = (
        f"model.spec {m.spec!r} is not a built-in model"
        if m.spec
        else (f"no built-in description of {m.path!r} and no config.json in a local directory of that name")
    )
    return what + (f" (did you mean {', '.join(hint)}?)" if hint else "") + f"; built-in: {', '.join(BUILTIN_MODELS)}"


def quantization(recipe: Recipe) -> str:
    """The planner's weight quantization: model.quantization, else what the checkpoint's name says
    (-FP8, -NVFP4), else bf16."""
    if recipe.model.quantization:
        return recipe.model.quantization.value
    return resolve_name(recipe.model.path)[1] or "bf16"


def planned_max_model_len(eff: EffectiveRole, spec: ModelSpec | None, recipe: Recipe) -> tuple[int | None, str]:
    """The max_model_len to plan a role at, and where it comes from: "recipe"; "model" (unset: the
    server takes the model's context, which vLLM derives from its config); "workload" (unset and the
    context unknown: isl + osl). (None, "workload") when there is nothing to size by."""
    if eff.value("max_model_len"):
        return eff.value("max_model_len"), "recipe"
    if spec is not None and spec.max_position_embeddings:
        return spec.max_position_embeddings, "model"
    w = recipe.workload
    return (w.max_isl + w.max_osl if w else None), "workload"


def plan_input(
    recipe: Recipe,
    role: str,
    host: HostCpu | None = None,
    spec: ModelSpec | None = None,
    eff: EffectiveRole | None = None,
) -> PlanInput:
    """What plan_role sizes one role from: its effective configuration on `host`. Without a
    workload the plan is at max_model_len only (no saturation figures). On a GPU, with the
    model's ``spec``, the overheads are the engine's (memory.engine_overheads) from the role's
    batch limits, eager/graph settings and the GPU's facts; without it, the fixed defaults."""
    eff = eff or resolve_role(recipe, role, host)
    w = recipe.workload
    max_model_len, _ = planned_max_model_len(eff, spec, recipe)
    if max_model_len is None:
        raise RecipectlError(
            f"{role}: no max_model_len and no workload to size the plan by",
            fix="model:\n  max_model_len: 32768   # or a workload: {isl: 8192, osl: 1024}",
        )
    given = PlanInput(
        max_model_len=max_model_len,
        tp=eff.value("tp"),
        dp=eff.value("dp"),
        ep=eff.value("expert_parallel"),
        kv_cache_dtype=eff.value("kv_cache_dtype"),
        mamba_cache_dtype=eff.value("mamba_cache_dtype"),
        # with the host unknown, a host-dependent value is planned as the recipe asks for it
        mamba_ssm_cache_dtype=eff["mamba_ssm_cache_dtype"].value,
        model_dtype=None if eff.value("dtype") in (None, "auto") else eff.value("dtype"),
        block_size=eff.value("block_size"),
        enable_prefix_caching=eff.value("enable_prefix_caching"),
        checkpoint_alignment=checkpoint_alignment(recipe, eff, spec),
        quantization=quantization(recipe),
        workload=Workload(isl=w.isl, osl=w.osl, range_ratio=w.random_range_ratio) if w else None,
        max_num_seqs=eff.value("max_num_seqs"),
    )
    if recipe.cluster.is_cpu:
        return replace(given, platform="cpu", cache_bytes_override=_cpu_cache_bytes(recipe, role))
    facts = GPU_FACTS[recipe.cluster.gpu]
    overheads = None
    if spec is not None:
        limits = batch_limits(recipe, eff, max_model_len)
        overheads = engine_overheads(
            spec,
            max_num_batched_tokens=limits.max_num_batched_tokens,
            max_num_seqs=limits.max_num_seqs,
            tp=eff.value("tp"),
            dp=eff.value("dp"),
            sm_count=facts.sm_count,
            enforce_eager=bool(eff.value("enforce_eager")),
            max_capture_size=eff.value("max_cudagraph_capture_size"),
        )
    return replace(
        given,
        gpu_memory_bytes=facts.memory_bytes,
        gpu_memory_utilization=eff.value("gpu_memory_utilization"),
        overheads=overheads,
    )


def _cpu_cache_bytes(recipe: Recipe, role: str) -> int:
    """The CPU backend's cache: VLLM_CPU_KVCACHE_SPACE GiB, or the error that names the setting."""
    env = recipe.role_env(role)
    gib = cpu_kvcache_gib(env)
    if gib is None:
        err = ModelConfigError(
            f"VLLM_CPU_KVCACHE_SPACE {env['VLLM_CPU_KVCACHE_SPACE'][:20]!r} is not a whole "
            "number of GiB (vLLM's CPU platform reads it with int())",
            fix='write it like VLLM_CPU_KVCACHE_SPACE: "4"',
        )
        err.field = (
            f"{role}.env.VLLM_CPU_KVCACHE_SPACE"
            if "VLLM_CPU_KVCACHE_SPACE" in recipe.roles[role].env
            else "engine.env.VLLM_CPU_KVCACHE_SPACE"
        )
        raise err
    return gib * GiB


def plan_recipe(recipe: Recipe, base_dir=None, host: HostCpu | None = None) -> dict[str, RolePlan] | None:
    spec = model_spec(recipe, base_dir)
    if spec is None:
        return None
    out = {}
    for role in ("prefill", "decode"):
        eff = resolve_role(recipe, role, host)
        given = plan_input(recipe, role, host, spec, eff)
        plan = plan_role(spec, given)
        gain = ssm_dtype_gain(spec, given) if spec.num_linear_attention_layers else None
        _, source = planned_max_model_len(eff, spec, recipe)
        out[role] = RolePlan(role, recipe.roles[role].endpoints, plan, gain, source)
    return out
