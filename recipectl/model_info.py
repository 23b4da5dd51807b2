"""Fill in what a recipe leaves out about its model (family, expert count) from a local
config.json or from the published models recipectl knows. Reads JSON only: no engine import."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .schema import ModelSection


def _known_info(spec: Any) -> dict[str, Any]:
    """What a recipe can take from a built-in spec: family, routed experts, spec name, and whether
    the checkpoint carries a vision tower (Qwen3.5's *ForConditionalGeneration do)."""
    family = "hybrid" if spec.is_hybrid else spec.family.value
    return {"family": family, "num_experts": spec.num_experts or None, "spec": spec.name,
            "multimodal": spec.architecture.endswith("ForConditionalGeneration")}


def __getattr__(name: str) -> Any:
    # KNOWN_MODELS is derived from the planner's built-in specs (recipectl.plan.builtin_models),
    # the one list of published models; computed on first use.
    if name == "KNOWN_MODELS":
        from .plan.builtin_models import BUILTIN_MODELS

        return {spec_name.lower(): _known_info(spec) for spec_name, spec in BUILTIN_MODELS.items()}
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


HYBRID_ARCHITECTURES = ("Qwen3NextForCausalLM", "Qwen3_5ForCausalLM", "Qwen3_5MoeForCausalLM",
                        "Qwen3_5ForConditionalGeneration", "Qwen3_5MoeForConditionalGeneration")


def known_model(path: str) -> dict[str, Any] | None:
    """The published model a hub id or path names (see builtin_models.find_builtin), or None."""
    from .plan.builtin_models import find_builtin

    found = find_builtin(path)
    return _known_info(found[0]) if found else None


def local_config(path: str, base_dir: Path | None) -> dict[str, Any] | None:
    p = Path(os.path.expanduser(path))
    if not p.is_absolute() and base_dir is not None:
        p = base_dir / p
    cfg = p / "config.json"
    try:
        text = cfg.read_text()
    except (OSError, ValueError):
        return None
    import json  # here: only a recipe whose model is a local directory needs it

    try:
        data = json.loads(text)
    except ValueError:
        return None
    return data if isinstance(data, dict) else None


def family_from_config(cfg: dict[str, Any]) -> tuple[str | None, int | None]:
    text = cfg.get("text_config") if isinstance(cfg.get("text_config"), dict) else cfg
    archs = cfg.get("architectures") or []
    layer_types = text.get("layer_types") or []
    experts = text.get("num_experts") or text.get("n_routed_experts") or text.get("num_local_experts")
    if any(a in HYBRID_ARCHITECTURES for a in archs) or "linear_attention" in layer_types:
        return "hybrid", experts
    if experts:
        return "moe", experts
    return "dense", None


def infer_model_section(model: "ModelSection", base_dir: Path | None) -> "ModelSection":
    """A copy of `model` with family/num_experts/spec filled in where the recipe left them out."""
    update: dict[str, Any] = {}
    cfg = local_config(model.path, base_dir)
    if cfg is not None:
        family, experts = family_from_config(cfg)
        if model.family is None and family:
            update["family"] = family
        if model.num_experts is None and experts:
            update["num_experts"] = experts
        if model.multimodal is None:
            update["multimodal"] = "vision_config" in cfg or "audio_config" in cfg
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
