"""Facts every rule needs, derived once per recipe (platform, version, placement)."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING

from ..effective import BatchLimits, EffectiveRole, Setting, batch_limits, resolve
from ..engine_facts import Version
from ..engine_versions import has_fix, holds
from ..fieldtypes import MAX_TOKENS
from ..plan.recipe_plan import model_spec as recipe_model_spec
from ..plan.recipe_plan import planned_max_model_len
from ..schema import Recipe, RoleSection
from ..topology import Placement, place

if TYPE_CHECKING:
    from ..models.spec import ModelSpec


@dataclass
class RuleContext:
    """What a rule sees: the typed recipe and facts derived from it."""

    recipe: Recipe
    base_dir: Path | None = None  # the recipe file's directory (a relative model path starts there)

    @cached_property
    def effective(self) -> dict[str, EffectiveRole]:
        """Each role's engine configuration as it will run, on any host (recipectl.effective)."""
        return resolve(self.recipe)

    def setting(self, role: str, field: str) -> Setting:
        return self.effective[role][field]

    @cached_property
    def model_spec(self) -> ModelSpec | None:
        """The model's dimensions (a built-in spec or a local config.json); None when unknown."""
        try:
            return recipe_model_spec(self.recipe, self.base_dir)
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def max_model_len(self, role: str) -> int | None:
        """The role's max_model_len as vLLM takes it: the recipe's, else the model's context; None
        where neither is known (the capacity planner's stand-in from the workload is not what vLLM
        runs with)."""
        planned, source = planned_max_model_len(self.effective[role], self.model_spec, self.recipe)
        return int(planned) if planned and source != "workload" else None

    def batch_limits(self, role: str, at: Version | None = None) -> BatchLimits | None:
        """The role's batch limits as vLLM fills them (effective.batch_limits) at release ``at``
        (default: the recipe's), with max_model_len as vLLM takes it. Where that is unknown the
        longest context stands in: it only caps a defaulted budget at max_num_seqs x max_model_len,
        which never takes it below max_num_seqs. None where the budget is defaulted with chunked
        prefill off: vLLM makes it max_model_len itself."""
        eff = self.effective[role]
        max_model_len = self.max_model_len(role)
        if max_model_len is None:
            if eff.value("max_num_batched_tokens") is None and eff.value("enable_chunked_prefill") is False:
                return None
            max_model_len = MAX_TOKENS
        return batch_limits(self.recipe, eff, max_model_len, at=at)

    @cached_property
    def gdn_head_k_dim(self) -> int | None:
        """The model's GDN key head dimension (linear_key_head_dim): from its spec, else straight from a
        local config.json that is not a whole spec (as the loader read it); None when unknown."""
        spec = self.model_spec
        if spec is not None and spec.linear_key_head_dim:
            return spec.linear_key_head_dim
        cfg = self.recipe.model_facts.config or {}
        inner = cfg.get("text_config")
        text = inner if isinstance(inner, dict) else cfg
        value = text.get("linear_key_head_dim")
        return value if isinstance(value, int) and not isinstance(value, bool) else None

    @property
    def is_cpu(self) -> bool:
        return self.recipe.cluster.is_cpu

    @property
    def gpu_family(self) -> str:
        return self.recipe.cluster.gpu.family

    @property
    def hybrid(self) -> bool:
        return self.recipe.is_hybrid

    @property
    def uses_nixl(self) -> bool:
        return self.recipe.kv_transfer.connector.startswith("Nixl")

    @property
    def version(self) -> tuple[int, int, int] | None:
        return self.recipe.engine.version

    def has_fix(self, *fact_ids: str) -> bool | None:
        """True: the version or declared patches carry every one of the facts
        (recipectl/data/engine-facts.yaml); False: they do not; None: unknown."""
        return has_fix(self.version, frozenset(self.recipe.engine.patches), *fact_ids)

    def holds(self, fact_id: str) -> bool | None:
        """Whether an engine fact holds at the declared release; None when the version is unknown."""
        return holds(fact_id, self.version)

    def version_at_least(self, v: tuple[int, int, int]) -> bool | None:
        return None if self.version is None else self.version >= v

    @cached_property
    def placement(self) -> Placement:
        return place(self.recipe)

    def roles(self) -> list[tuple[str, RoleSection]]:
        return list(self.recipe.roles.items())

    def env(self, role: str) -> dict[str, str]:
        return self.recipe.role_env(role)

    def env_path(self, role: str, var: str) -> str:
        """The field path where `var` is (or should be) set for `role`."""
        if var in self.recipe.roles[role].env or var not in self.recipe.engine.env:
            return f"{role}.env.{var}"
        return f"engine.env.{var}"

    @property
    def max_concurrency(self) -> int | None:
        """The workload's highest concurrency; None without a workload (an accuracy-only recipe)."""
        w = self.recipe.workload
        return max(w.concurrency) if w else None
