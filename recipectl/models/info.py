"""Fill in what a recipe leaves out about its model (family, expert count) from a local
config.json or from the published models recipectl knows. Reads JSON only: no engine import."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..fileio import JsonRefused, UnreadableFile, read_json_bounded
from .builtin import find_builtin

if TYPE_CHECKING:
    from ..schema import ModelSection


def _known_info(spec: Any) -> dict[str, Any]:
    """What a recipe can take from a built-in spec: family, routed experts, spec name, and whether
    the checkpoint carries a vision tower (Qwen3.5's *ForConditionalGeneration do)."""
    family = "hybrid" if spec.is_hybrid else spec.family.value
    return {
        "family": family,
        "num_experts": spec.num_experts or None,
        "spec": spec.name,
        "multimodal": spec.architecture.endswith("ForConditionalGeneration"),
    }


# Architectures whose layers keep a recurrent state beside attention (GDN or Mamba): P/D moves that
# state over NIXL too, with the conv-state layout the hybrid rules check (vLLM's hybrid P/D CI runs
# GDN, Mamba2 and Mamba1 hybrids: tests/v1/kv_connector/nixl_integration/config_sweep_accuracy_test.sh)
HYBRID_ARCHITECTURES = (
    "Qwen3NextForCausalLM",
    "Qwen3_5ForCausalLM",
    "Qwen3_5MoeForCausalLM",
    "Qwen3_5ForConditionalGeneration",
    "Qwen3_5MoeForConditionalGeneration",
    "GraniteMoeHybridForCausalLM",
    "JambaForCausalLM",
    "NemotronHForCausalLM",
    "BambaForCausalLM",
    "FalconH1ForCausalLM",
    "Zamba2ForCausalLM",
    "Plamo2ForCausalLM",
)
# layer_types entries of a recurrent layer (Qwen3.5's linear_attention, Granite 4.0-H's mamba)
_RECURRENT_LAYERS = ("linear_attention", "mamba")
# Published hybrid checkpoints and their config.json `architectures`, for hub ids with no local
# config and no built-in spec (the ones vLLM's hybrid P/D CI serves)
PUBLISHED_ARCHITECTURES = {
    "ibm-granite/granite-4.0-h-tiny": "GraniteMoeHybridForCausalLM",
    "ibm-granite/granite-4.0-h-small": "GraniteMoeHybridForCausalLM",
    "ibm-granite/granite-4.0-h-micro": "GraniteMoeHybridForCausalLM",
    "ai21labs/ai21-jamba2-3b": "JambaForCausalLM",
}


def architecture_family(path: str, base_dir: Path | None = None) -> tuple[str | None, str]:
    """Whether a model is hybrid from its architecture — a local config.json, a built-in spec, a
    published checkpoint's known architecture — and how that is known; (None, "") when none says."""
    cfg = local_config(path, base_dir)
    if cfg is not None:
        family, _ = family_from_config(cfg)
        return family, "its config.json's architectures and layer types"
    known = known_model(path)
    if known:
        return known["family"], f"the built-in spec {known['spec']}"
    arch = PUBLISHED_ARCHITECTURES.get(path.strip("/").lower())
    if arch:
        return ("hybrid" if arch in HYBRID_ARCHITECTURES else None), f"its published architecture {arch}"
    return None, ""


def known_model(path: str) -> dict[str, Any] | None:
    """The published model a hub id or path names (see builtin_models.find_builtin), or None."""
    found = find_builtin(path)
    return _known_info(found[0]) if found else None


MAX_CONFIG_BYTES = 16 << 20  # a config.json is a few KB; this is past any real one


class ModelConfigError(ValueError):
    """A model's config.json that exists but cannot be read as one: said with its path, never raised
    as a traceback. `field` is the recipe field the problem is reported at."""

    field = "model.path"

    def __init__(self, message: str, fix: str | None = None):
        super().__init__(message)
        self.fix = fix or "point model.path at a directory whose config.json is the model's own"


def config_path(path: str, base_dir: Path | None) -> Path:
    p = Path(os.path.expanduser(path))
    if not p.is_absolute() and base_dir is not None:
        p = base_dir / p
    return p / "config.json"


def local_config(path: str, base_dir: Path | None, *, strict: bool = False) -> dict[str, Any] | None:
    """The model directory's config.json as a mapping; None when there is none. A file that is
    there but is no JSON object is None too, or with `strict` a ModelConfigError."""
    cfg = config_path(path, base_dir)
    try:
        data = read_json_bounded(cfg, MAX_CONFIG_BYTES)  # regular files only: never blocks on a FIFO
    except UnreadableFile as e:
        if e.missing or not _exists(cfg):
            return None
        problem = f"cannot be read ({e.reason})"
    except JsonRefused as e:  # not JSON, nested too deeply, too large
        problem = f"is {e}"
    else:
        if isinstance(data, dict):
            return data
        problem = "is not a JSON object"
    if strict:
        raise ModelConfigError(f"the model's {cfg} {problem}")
    return None


def _exists(path: Path) -> bool:
    try:
        return path.exists()
    except OSError:  # a name too long, a loop of links: nothing recipectl can read
        return False


def _count(value: Any) -> int | None:
    """A positive whole number from a config field; None for anything else (a string, a float, 10**400)."""
    return value if isinstance(value, int) and not isinstance(value, bool) and 0 < value <= 2**20 else None


def family_from_config(cfg: Mapping[str, Any]) -> tuple[str | None, int | None]:
    text_config = cfg.get("text_config")
    text: Mapping[str, Any] = text_config if isinstance(text_config, dict) else cfg
    archs = cfg.get("architectures")
    archs = archs if isinstance(archs, list) else []
    layer_types = text.get("layer_types")
    layer_types = layer_types if isinstance(layer_types, list) else []
    experts = (
        _count(text.get("num_experts")) or _count(text.get("n_routed_experts")) or _count(text.get("num_local_experts"))
    )
    if any(a in HYBRID_ARCHITECTURES for a in archs if isinstance(a, str)) or any(
        t in _RECURRENT_LAYERS for t in layer_types
    ):
        return "hybrid", experts
    if experts:
        return "moe", experts
    return "dense", None


@dataclass(frozen=True)
class ModelFacts:
    """What is known of a recipe's model beyond the recipe: its config.json (None when the model
    has none on this host) and that file's path. The loader reads them once (read_model_facts)
    and the recipe carries them (Recipe.model_facts): the planner and the rules read them there,
    never the file again."""

    config: Mapping[str, Any] | None = None
    config_file: Path | None = None


def read_model_facts(path: str, base_dir: Path | None) -> ModelFacts:
    """The facts of the model at `path` (relative to `base_dir`). A config.json that is there but
    is no JSON object raises ModelConfigError."""
    cfg = local_config(path, base_dir, strict=True)
    return ModelFacts(cfg, config_path(path, base_dir)) if cfg is not None else ModelFacts()


def infer_model_section(model: "ModelSection", facts: ModelFacts) -> "ModelSection":
    """A copy of `model` with family/num_experts/spec/multimodal filled in where the recipe left
    them out: from the model's config.json, a published architecture, or a built-in spec."""
    update: dict[str, Any] = {}
    cfg = facts.config
    if cfg is not None:
        family, experts = family_from_config(cfg)
        if model.family is None and family:
            update["family"] = family
        if model.num_experts is None and experts:
            update["num_experts"] = experts
        if model.multimodal is None:
            update["multimodal"] = "vision_config" in cfg or "audio_config" in cfg
    arch = PUBLISHED_ARCHITECTURES.get(model.path.strip("/").lower())
    if cfg is None and model.family is None and arch in HYBRID_ARCHITECTURES:
        update["family"] = "hybrid"
    known = known_model(model.path)
    if known:
        if model.family is None and "family" not in update:
            update["family"] = known["family"]
        if model.num_experts is None and "num_experts" not in update:
            update["num_experts"] = known["num_experts"]
        if model.spec is None:
            update["spec"] = known["spec"]
        if model.multimodal is None and "multimodal" not in update:
            update["multimodal"] = known["multimodal"]
    if not update:
        return model
    # validate again so inferred values get their proper types (enums)
    return type(model).model_validate({**model.model_dump(exclude_unset=True), **update})
