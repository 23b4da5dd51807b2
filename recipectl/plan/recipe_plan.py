"""The planner applied to a recipe: which model spec, how much cache per GPU, which workload."""

from __future__ import annotations

from dataclasses import dataclass

from ..schema import GpuType, Recipe

# Memory per GPU as the driver reports it (bytes); GB200 from NVIDIA's NVL72 figure (13.4 TB / 72).
GPU_MEMORY_BYTES = {
    GpuType.GB200: 186 * 10**9,
    GpuType.B200: 183_359 * 2**20,
    GpuType.H200: 143_771 * 2**20,
    GpuType.H100: 81_559 * 2**20,
}
GiB = 2**30


@dataclass(frozen=True)
class RolePlan:
    role: str
    endpoints: int
    plan: object  # CapacityPlan
    gain: object | None  # SsmDtypeGain (hybrid models only)

    @property
    def saturation(self) -> int | None:
        s = self.plan.saturation_concurrency
        return None if s is None else s * self.endpoints


def model_spec(recipe: Recipe, base_dir=None):
    """The recipe's model as a ModelSpec: a built-in spec, or a local config.json; None if unknown.
    A config.json that cannot describe a model raises ModelConfigError (a ValueError)."""
    from ..model_info import ModelConfigError, config_path, local_config
    from . import builtin_model
    from .model_spec import ModelSpec

    if recipe.model.spec:
        try:
            return builtin_model(recipe.model.spec)
        except (KeyError, ValueError):
            pass
    cfg = local_config(recipe.model.path, base_dir, strict=True)
    if cfg is None:
        return None
    path = config_path(recipe.model.path, base_dir)
    _check_config_sizes(cfg, path)
    try:
        return ModelSpec.from_config_dict(cfg, name=recipe.model.name)
    except (KeyError, TypeError, ValueError, OverflowError, AttributeError, IndexError) as e:
        what = f"lacks {e.args[0]!r}" if isinstance(e, KeyError) else "does not describe a model recipectl can plan"
        raise ModelConfigError(f"the model's {path} {what}",
                               fix="a Hugging Face config.json with num_hidden_layers, hidden_size, "
                                   "num_attention_heads, vocab_size (and layer_types for a hybrid model)") from None


# Sizes the planner loops over or multiplies: a config.json past these is not a real model.
_CONFIG_LIMITS = {"num_hidden_layers": 10_000, "full_attention_interval": 10_000, "decoder_sparse_step": 10_000,
                  "mtp_num_hidden_layers": 10_000, "num_nextn_predict_layers": 10_000}


def _check_config_sizes(cfg: dict, path) -> None:
    from ..model_info import ModelConfigError

    text = cfg.get("text_config")
    merged = {**cfg, **text} if isinstance(text, dict) else cfg
    for key, value in merged.items():
        bad = (isinstance(value, (int, float)) and not isinstance(value, bool)
               and not (-2**53 <= value <= 2**53)) or (key in _CONFIG_LIMITS and isinstance(value, int)
                                                       and not 0 <= value <= _CONFIG_LIMITS[key])
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


def plan_kwargs(recipe: Recipe, role: str) -> dict:
    from .capacity import Workload

    spec = recipe.roles[role]
    w = recipe.workload
    version = recipe.engine.version
    default_util = 0.92 if version is None or version >= (0, 20, 0) else 0.9
    kw = dict(
        max_model_len=recipe.max_model_len(role) or (w.max_isl + w.max_osl),
        tp=spec.parallel.tp, dp=spec.parallel.dp, ep=spec.parallel.expert_parallel,
        kv_cache_dtype=spec.kv_cache_dtype or "auto",
        mamba_cache_dtype=spec.mamba_cache_dtype or "auto",
        mamba_ssm_cache_dtype=spec.mamba_ssm_cache_dtype or "auto",
        model_dtype=None if recipe.model.dtype in (None, "auto") else recipe.model.dtype,
        block_size=spec.block_size,
        # vLLM turns prefix caching on by default (0.32); the recipe's explicit choice wins
        enable_prefix_caching=True if spec.enable_prefix_caching is None else spec.enable_prefix_caching,
        quantization=(recipe.model.quantization.value if recipe.model.quantization else "bf16"),
        workload=Workload(isl=w.isl, osl=w.osl, range_ratio=w.random_range_ratio),
        max_num_seqs=spec.max_num_seqs,
    )
    if recipe.cluster.is_cpu:
        env = recipe.role_env(role)
        kw["platform"] = "cpu"
        gib = cpu_kvcache_gib(env)
        if gib is None:
            from ..model_info import ModelConfigError

            err = ModelConfigError(f"VLLM_CPU_KVCACHE_SPACE {env['VLLM_CPU_KVCACHE_SPACE'][:20]!r} is not a whole "
                                   "number of GiB (vLLM's CPU platform reads it with int())",
                                   fix="write it like VLLM_CPU_KVCACHE_SPACE: \"4\"")
            err.field = (f"{role}.env.VLLM_CPU_KVCACHE_SPACE" if "VLLM_CPU_KVCACHE_SPACE" in spec.env
                         else "engine.env.VLLM_CPU_KVCACHE_SPACE")
            raise err
        kw["cache_bytes_override"] = gib * GiB
    else:
        kw["gpu_memory_bytes"] = GPU_MEMORY_BYTES[recipe.cluster.gpu]
        kw["gpu_memory_utilization"] = spec.gpu_memory_utilization or default_util
    return kw


def plan_recipe(recipe: Recipe, base_dir=None) -> dict[str, RolePlan] | None:
    from .capacity import plan_role, ssm_dtype_gain

    spec = model_spec(recipe, base_dir)
    if spec is None:
        return None
    out = {}
    for role in ("prefill", "decode"):
        kw = plan_kwargs(recipe, role)
        plan = plan_role(spec, **kw)
        gain = ssm_dtype_gain(spec, **kw) if spec.num_linear_attention_layers else None
        out[role] = RolePlan(role, recipe.roles[role].endpoints, plan, gain)
    return out
