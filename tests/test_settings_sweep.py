"""The settings sweep's pieces (scripts/gpu-settings-sweep.sh): the two arms of each setting differ
from the recipe in that setting only, load, pass the rules that stop a launch, and reach the
planner; the summary compares the arms level by level and never compares an invalid level."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from recipectl.commands.plan import plan_report
from recipectl.validate import load_one, refuse_rule_errors

from .scripts import load_script

ROOT = Path(__file__).resolve().parent.parent
GPU_RECIPE = ROOT / "recipes" / "h200" / "qwen3.5-35b-a3b-2gpu-pd.yaml"
CPU_RECIPE = ROOT / "recipes" / "local" / "tiny-hybrid-cpu.yaml"
SETTINGS = ("prefill-mnbt", "stream-interval", "async-scheduling", "ssm-dtype")


arms_script = load_script("scripts/settings-arms.py")
summary_script = load_script("scripts/settings-summary.py")


def _changes(base: dict, arm: dict) -> dict:
    """(role, key) -> value of every role key that differs from the base recipe."""
    out = {}
    for role in ("prefill", "decode"):
        b, a = base.get(role, {}), arm.get(role, {})
        for key in set(b) | set(a):
            if b.get(key) != a.get(key):
                out[(role, key)] = a.get(key)
    return out


EXPECTED = {
    # the recipe already has the seed's 2 x ISL and bfloat16: those seed arms change nothing
    "prefill-mnbt": ({}, {("prefill", "max_num_batched_tokens"): None}),
    "stream-interval": ({("decode", "stream_interval"): 100}, {("decode", "stream_interval"): 1}),
    "async-scheduling": (
        {("prefill", "async_scheduling"): True, ("decode", "async_scheduling"): True},
        {("prefill", "async_scheduling"): False, ("decode", "async_scheduling"): False},
    ),
    "ssm-dtype": (
        {},
        {("prefill", "mamba_ssm_cache_dtype"): "float32", ("decode", "mamba_ssm_cache_dtype"): "float32"},
    ),
}


@pytest.mark.parametrize("setting", SETTINGS)
def test_each_arm_changes_that_setting_only_and_passes_the_launch_rules(setting, tmp_path):
    base = yaml.safe_load(GPU_RECIPE.read_text())
    assert arms_script.main([str(GPU_RECIPE), setting, str(tmp_path)]) == 0
    for arm, expected in zip(("seed", "default"), EXPECTED[setting], strict=True):
        path = tmp_path / f"{setting}-{arm}.yaml"
        written = yaml.safe_load(path.read_text())
        assert _changes(base, written) == expected
        assert {k: v for k, v in written.items() if k not in ("prefill", "decode", "name")} == {
            k: v for k, v in base.items() if k not in ("prefill", "decode", "name")
        }
        loaded = load_one(str(path))
        refuse_rule_errors(loaded, str(path))  # raises on a rule error: launch would refuse it


def test_the_ssm_dtype_arm_reaches_the_planner(tmp_path):
    """float32 GDN state doubles the SSM page: the planner's block size follows (544 -> 1056 tokens,
    what the engine printed on an H200, docs/gpu-evidence.md)."""
    arms_script.main([str(GPU_RECIPE), "ssm-dtype", str(tmp_path)])
    blocks = {}
    for arm in ("seed", "default"):
        path = str(tmp_path / f"ssm-dtype-{arm}.yaml")
        blocks[arm] = plan_report(load_one(path).recipe, path)["roles"]["decode"]["block_size"]
    assert blocks == {"seed": 544, "default": 1056}


def test_the_workload_is_scaled_only_when_asked(tmp_path):
    arms_script.main(
        [str(CPU_RECIPE), "stream-interval", str(tmp_path), "--isl", "32", "--osl", "8", "--concurrency", "1,2"]
    )
    w = yaml.safe_load((tmp_path / "stream-interval-seed.yaml").read_text())["workload"]
    assert (w["isl"], w["osl"], w["concurrency"]) == (32, 8, [1, 2])
    arms_script.main([str(CPU_RECIPE), "stream-interval", str(tmp_path)])
    w = yaml.safe_load((tmp_path / "stream-interval-seed.yaml").read_text())["workload"]
    assert w == yaml.safe_load(CPU_RECIPE.read_text())["workload"]


def test_an_unknown_setting_is_refused(tmp_path):
    with pytest.raises(SystemExit, match="unknown setting"):
        arms_script.main([str(CPU_RECIPE), "max-num-seqs", str(tmp_path)])


def _bench(out: Path, name: str, levels: list[tuple[int, float, bool]]) -> None:
    (out / name).mkdir(parents=True)
    (out / name / "summary.json").write_text(
        json.dumps(
            {
                "levels": [
                    {
                        "concurrency": c,
                        "tps_per_gpu": tps,
                        "valid": valid,
                        "ttft_median_ms": 10.0,
                        "tpot_median_ms": 5.0,
                    }
                    for c, tps, valid in levels
                ]
            }
        )
    )


def test_the_summary_compares_valid_levels_and_marks_the_rest(tmp_path):
    (tmp_path / "stream-interval-seed.yaml").write_text("")
    _bench(tmp_path, "stream-interval-default", [(1, 100.0, True), (8, 400.0, True)])
    _bench(tmp_path, "stream-interval-seed", [(1, 110.0, True), (8, 0.0, False)])
    text = "\n".join(summary_script.section(tmp_path, "stream-interval"))
    assert "| 1 | 100.0 | 110.0 | +10.0% |" in text
    assert "| 8 | invalid or missing in one arm |" in text
    assert "not measured" in "\n".join(summary_script.section(tmp_path, "ssm-dtype"))


def test_a_second_run_confirms_a_sign_or_calls_the_effect_noise(tmp_path):
    first, second = tmp_path / "one", tmp_path / "two"
    _bench(first, "ssm-dtype-default", [(1, 100.0, True), (8, 400.0, True), (16, 500.0, True)])
    _bench(first, "ssm-dtype-seed", [(1, 110.0, True), (8, 380.0, True), (16, 550.0, True)])
    _bench(second, "ssm-dtype-default", [(1, 100.0, True), (8, 400.0, True)])
    _bench(second, "ssm-dtype-seed", [(1, 105.0, True), (8, 420.0, True)])
    rows = {
        ln.split("|")[1].strip(): ln
        for ln in summary_script.section(first, "ssm-dtype", second)
        if ln.startswith("| ") and ln.split("|")[1].strip().isdigit()
    }
    assert rows["1"].endswith("| +5.0% | same sign |")
    assert rows["8"].endswith("| +5.0% | noise: the sign flips |")  # -5.0% first, +5.0% again
    assert rows["16"].endswith("| – | not repeated |")
