"""A recipe without a workload (accuracy only: no isl/osl) validates, plans and renders; bench says
what to add. And `recipectl plan` on a model it has no description of exits 2 with the built-in
names, never a traceback."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from recipectl.rules.catalog import all_rules
from recipectl.validate import load_one, validate_file

ROOT = Path(__file__).resolve().parent.parent
H200 = ROOT / "recipes" / "h200" / "qwen3.5-35b-a3b-pd.yaml"
GB200 = ROOT / "recipes" / "gb200" / "qwen3.5-397b-nvfp4-pd.yaml"


def _variant(tmp_path: Path, source: Path, edit) -> Path:
    data = yaml.safe_load(source.read_text())
    edit(data)
    out = tmp_path / "recipe.yaml"
    out.write_text(yaml.safe_dump(data, sort_keys=False))
    return out


def _no_workload(tmp_path: Path, source: Path = H200) -> Path:
    return _variant(tmp_path, source, lambda d: d.pop("workload"))


def test_a_recipe_without_workload_loads(tmp_path):
    recipe = load_one(str(_no_workload(tmp_path))).recipe
    assert recipe.workload is None


def test_a_recipe_without_workload_validates_clean(recipectl_cli, tmp_path):
    for source in (H200, GB200):
        r = recipectl_cli("validate", "--format", "json", str(_no_workload(tmp_path, source)))
        assert r.returncode == 0, r.stdout + r.stderr
        findings = json.loads(r.stdout)
        assert "Traceback" not in r.stderr
        assert not any("workload" in json.dumps(f) for f in findings), findings


def test_every_rule_runs_without_a_workload(tmp_path):
    """Rules that need a workload stay silent instead of failing on None."""
    from recipectl.rules.context import RuleContext

    report, recipes = validate_file(_no_workload(tmp_path, GB200))
    assert report.valid and recipes
    for loaded in recipes:
        ctx = RuleContext(loaded.recipe)
        for r in all_rules():
            list(r.check(ctx))  # must not raise


def test_plan_without_workload_shows_capacity_at_max_model_len(recipectl_cli, tmp_path):
    path = _no_workload(tmp_path)
    r = recipectl_cli("plan", "--format", "json", str(path))
    assert r.returncode == 0, r.stdout + r.stderr
    report = json.loads(r.stdout)
    assert report["target_concurrency"] is None and report["decode_gpus_for_target"] is None
    for role in ("prefill", "decode"):
        entry = report["roles"][role]
        assert entry["max_model_len"] == 16640
        assert entry["max_concurrency"] > 0 and entry["num_blocks"] > 0
        assert entry["saturation_concurrency"] is None
        assert entry["saturation_concurrency_all_endpoints"] is None
    text = recipectl_cli("plan", str(path))
    assert text.returncode == 0, text.stdout + text.stderr
    assert "no workload" in text.stdout and "saturation (all endpoints)" not in text.stdout


def test_plan_without_max_model_len_plans_the_models_context(recipectl_cli, tmp_path):
    """A server without --max-model-len takes the model's context (262,144 for Qwen3.5): the plan says
    so and plans that, with or without a workload."""

    def edit(d):
        d.pop("workload")
        d["model"].pop("max_model_len")

    path = _variant(tmp_path, H200, edit)
    r = recipectl_cli("plan", "--format", "json", str(path))
    assert r.returncode == 0, r.stdout + r.stderr
    for entry in json.loads(r.stdout)["roles"].values():
        assert entry["max_model_len"] == 262_144 and entry["max_model_len_from"] == "model"
    text = " ".join(recipectl_cli("plan", str(path)).stdout.split())  # rich wraps at 80 columns
    assert "no max_model_len, so the server takes the model's context" in text
    with_len = json.loads(recipectl_cli("plan", "--format", "json", str(H200)).stdout)["roles"]["decode"]
    assert with_len["max_model_len"] == 16640 and with_len["max_model_len_from"] == "recipe"


def _local_model_without_context(tmp_path: Path) -> Path:
    from tests.test_plan_model_spec import QWEN35_MOE_CONFIG

    cfg = {
        **QWEN35_MOE_CONFIG,
        "text_config": {k: v for k, v in QWEN35_MOE_CONFIG["text_config"].items() if k != "max_position_embeddings"},
    }
    model_dir = tmp_path / "no-context-model"
    model_dir.mkdir()
    (model_dir / "config.json").write_text(json.dumps(cfg))
    return model_dir


def test_plan_without_max_model_len_or_a_known_context_uses_the_workload(recipectl_cli, tmp_path):
    model_dir = _local_model_without_context(tmp_path)

    def edit(d):
        d["model"].pop("max_model_len")
        d["model"]["path"] = str(model_dir)
        d["model"].pop("spec", None)

    path = _variant(tmp_path, H200, edit)
    r = recipectl_cli("plan", "--format", "json", str(path))
    assert r.returncode == 0, r.stdout + r.stderr
    entry = json.loads(r.stdout)["roles"]["decode"]
    assert entry["max_model_len_from"] == "workload" and entry["max_model_len"] == int(8192 * 1.8) + int(1024 * 1.8)
    text = " ".join(recipectl_cli("plan", str(path)).stdout.split())  # rich wraps at 80 columns
    assert "the model's context is not known: planned at isl + osl" in text


def test_plan_without_workload_max_model_len_or_context_says_what_to_add(recipectl_cli, tmp_path):
    model_dir = _local_model_without_context(tmp_path)

    def edit(d):
        d.pop("workload")
        d["model"].pop("max_model_len")
        d["model"]["path"] = str(model_dir)
        d["model"].pop("spec", None)

    r = recipectl_cli("plan", str(_variant(tmp_path, H200, edit)))
    assert r.returncode == 2, r.stdout + r.stderr
    assert "max_model_len" in r.stderr and "Traceback" not in r.stderr


def test_render_without_workload(recipectl_cli, tmp_path):
    path = _no_workload(tmp_path)
    r = recipectl_cli("render", str(path), "-t", "bash", "-o", str(tmp_path / "out"))
    assert r.returncode == 0, r.stdout + r.stderr
    assert any((tmp_path / "out").iterdir())


def test_bench_without_workload_says_what_is_missing(recipectl_cli, tmp_path):
    r = recipectl_cli("bench", str(_no_workload(tmp_path)), "--router", "http://127.0.0.1:9")
    assert r.returncode == 2, r.stdout + r.stderr
    assert "no workload" in r.stderr and "isl" in r.stderr and "concurrency" in r.stderr
    assert "Traceback" not in r.stderr


def test_bench_of_a_run_without_a_router_yet_says_so(recipectl_cli, tmp_path):
    """A Slurm job still starting has a state file but no router URL: nothing to send prompts to."""
    from recipectl.runs.state import RunState

    run = tmp_path / "runs" / "r1"
    run.mkdir(parents=True)
    RunState(
        run_id="r1", recipe_name="x", recipe_path="x.yaml", recipe_hash="0", run_dir=str(run), target="slurm"
    ).save()
    r = recipectl_cli("bench", str(H200), "--run", str(run), "-o", str(tmp_path / "out"))
    assert r.returncode == 2, r.stdout + r.stderr
    assert "no router yet" in r.stderr and "--router" in r.stderr and "Traceback" not in r.stderr
    assert not (tmp_path / "out").exists()


def test_plan_of_an_unknown_hub_model_exits_2_with_the_builtin_names(recipectl_cli, tmp_path):
    def edit(d):
        d["model"]["path"] = "Qwen/Qwen3.5-122B-A12B"
        d["model"].pop("spec", None)

    r = recipectl_cli("plan", str(_variant(tmp_path, H200, edit)))
    assert r.returncode == 2, r.stdout + r.stderr
    assert "Traceback" not in r.stderr
    assert "did you mean Qwen3.5-122B-A10B" in r.stderr
    assert "Qwen3-Next-80B-A3B" in r.stderr  # the built-in list
    assert "config.json" in r.stderr  # how to point at one


def test_plan_of_a_published_variant_uses_its_quantization(recipectl_cli, tmp_path):
    def edit(d):
        d["model"]["path"] = "Qwen/Qwen3.5-35B-A3B-FP8"
        d["model"].pop("quantization", None)

    r = recipectl_cli("plan", "--format", "json", str(_variant(tmp_path, H200, edit)))
    assert r.returncode == 0, r.stdout + r.stderr
    fp8 = json.loads(r.stdout)["roles"]["decode"]["weight_bytes_per_gpu"]
    bf16 = json.loads(recipectl_cli("plan", "--format", "json", str(H200)).stdout)["roles"]["decode"]
    assert fp8 < bf16["weight_bytes_per_gpu"]


def test_plan_of_a_local_config_json_still_works(recipectl_cli, tmp_path):
    from tests.test_plan_model_spec import QWEN35_MOE_CONFIG

    model_dir = tmp_path / "my-model"
    model_dir.mkdir()
    (model_dir / "config.json").write_text(json.dumps(QWEN35_MOE_CONFIG))

    def edit(d):
        d["model"]["path"] = str(model_dir)
        d["model"].pop("spec", None)

    r = recipectl_cli("plan", "--format", "json", str(_variant(tmp_path, H200, edit)))
    assert r.returncode == 0, r.stdout + r.stderr
    decode = json.loads(r.stdout)["roles"]["decode"]
    # the config's dims: 10 full-attention layers x 2 (K, V) x 2 kv heads x 256 x 2 bytes (TP 1)
    assert decode["kv_bytes_per_token"] == 10 * 2 * 2 * 256 * 2
