"""A recipe's model facts (its config.json) are read once, by the loader, and carried on the
recipe: the schema reads no file, and the planner uses what was loaded, not the file again."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from recipectl.loader import load_file
from recipectl.plan.recipe_plan import model_spec
from recipectl.schema import Recipe

from .test_plan_model_spec import QWEN35_MOE_CONFIG

ROOT = Path(__file__).resolve().parent.parent
H200 = ROOT / "recipes" / "h200" / "qwen3.5-35b-a3b-pd.yaml"


def _recipe_with_local_model(tmp_path: Path, config: str, model_path: str = "./my-model") -> tuple[Path, dict]:
    """A recipe beside a model directory whose config.json is `config`; `model_path` names the
    directory (relative paths start at the recipe's directory)."""
    model_dir = tmp_path / "my-model"
    model_dir.mkdir()
    (model_dir / "config.json").write_text(config)
    data = yaml.safe_load(H200.read_text())
    data["model"] = {k: v for k, v in data["model"].items() if k not in ("spec", "family", "num_experts")}
    data["model"]["path"] = model_path
    path = tmp_path / "recipe.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path, data


def test_the_schema_reads_no_config_json(tmp_path):
    path, data = _recipe_with_local_model(tmp_path, "{not json", str(tmp_path / "my-model"))
    recipe = Recipe.model_validate(data)  # validation alone: the broken file is not opened
    assert recipe.model.family is None and recipe.model_facts.config is None
    result = load_file(path)  # the loader reads it, and says where it is wrong
    assert not result.recipes
    [d] = result.diagnostics
    assert d.code == "SCH001" and d.path == "model.path" and "config.json" in d.message and d.line


def test_the_loader_fills_in_the_model_and_the_planner_reads_what_it_carried(tmp_path):
    path, _ = _recipe_with_local_model(tmp_path, json.dumps(QWEN35_MOE_CONFIG))
    [loaded] = load_file(path).recipes
    assert loaded.recipe.model.family.value == "hybrid"
    assert loaded.recipe.model_facts.config_file == tmp_path / "my-model" / "config.json"
    (tmp_path / "my-model" / "config.json").unlink()  # from here on, only the carried facts
    spec = model_spec(loaded.recipe)
    assert spec is not None and spec.num_hidden_layers == QWEN35_MOE_CONFIG["text_config"]["num_hidden_layers"]
