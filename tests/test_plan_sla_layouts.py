"""plan --sla beyond the recipe's layout: other TPs per role (and how the model is moved to them),
the picture (--plot) and the chosen configuration written as a recipe (--write-recipe)."""

from __future__ import annotations

import importlib.util
import json
import os
import sys

import pytest
import yaml

from recipectl.commands.plan import sla_report
from recipectl.commands.plan_sla import pair_allowed, planned_edits, pyplot, tp_choices
from recipectl.errors import RecipectlError
from recipectl.plan.perf import (
    TP_EFFICIENCY_PER_DOUBLING,
    DecodeCoeffs,
    PerfModel,
    PrefillCoeffs,
    RoleShape,
    TransferCoeffs,
    at_tp,
    tp_speedup,
)
from recipectl.plan.recipe_plan import model_spec
from recipectl.plan.sla import LayoutOption, Sla, rank_layouts
from recipectl.validate import load_variant

from .e2e_support import LOCAL_RECIPE, ROOT, cli

H200 = ROOT / "recipes" / "h200" / "qwen3.5-35b-a3b-pd.yaml"  # prefill 2 x DEP2, decode 1 x DEP4, 8 GPUs
HAS_MATPLOTLIB = importlib.util.find_spec("matplotlib") is not None


def shape(tp: int, kv: int = 1024, cap: int | None = 256) -> RoleShape:
    return RoleShape(
        endpoints=1,
        gpus_per_endpoint=tp,
        tp=tp,
        kv_bytes_per_token=kv,
        gdn_state_bytes_per_request=1 << 20,
        max_concurrency_per_endpoint=cap,
    )


MODEL = PerfModel(
    prefill=PrefillCoeffs(overhead_s=0.02, per_token_s=50e-6),
    decode=DecodeCoeffs(step_s=0.02, per_seq_s=0.5e-3, per_ctx_token_s=1e-8),
    transfer=TransferCoeffs(latency_s=0.005, bytes_per_s=1e9),
    calibrated=True,
)


def test_a_role_at_twice_the_tp_computes_1_8x_faster_and_its_kv_follows_the_bytes_per_rank():
    assert tp_speedup(2, 1) == pytest.approx(2 * TP_EFFICIENCY_PER_DOUBLING)
    assert tp_speedup(4, 1) == pytest.approx(4 * TP_EFFICIENCY_PER_DOUBLING**2)
    assert tp_speedup(1, 2) == pytest.approx(1 / tp_speedup(2, 1))
    ref = (shape(1), shape(1))
    assert at_tp(MODEL, ref, ref) is MODEL  # the recipe's own TPs: the coefficients as measured
    # prefill at TP2, decode at TP4 whose ranks hold a quarter of the KV (heads split)
    moved = at_tp(MODEL, ref, (shape(2), shape(4, kv=256)))
    assert moved.prefill.overhead_s == MODEL.prefill.overhead_s
    assert moved.prefill.per_token_s == pytest.approx(50e-6 / 1.8)
    assert moved.decode.step_s == pytest.approx(0.02 / 3.24)
    assert moved.decode.per_ctx_token_s == pytest.approx(1e-8 * 0.25 / 0.81)
    assert moved.transfer == MODEL.transfer and moved.calibrated
    # past the KV heads a rank's KV stops shrinking: its cost per token only pays the all-reduce
    replicated = at_tp(MODEL, ref, (shape(1), shape(2, kv=1024)))
    assert replicated.decode.per_ctx_token_s == pytest.approx(1e-8 / 0.9)


def test_other_tps_are_ranked_with_the_recipes_and_marked_extrapolated():
    """An ITL only a faster decode meets: the TP2 layout is ranked first and says it is extrapolated;
    the recipe's own TP meets nothing and is not."""
    ref = (shape(1), shape(1))
    moved = (shape(2), shape(2))
    options = [
        LayoutOption(prefill=ref[0], decode=ref[1], model=MODEL, extrapolated=False),
        LayoutOption(prefill=moved[0], decode=moved[1], model=at_tp(MODEL, ref, moved), extrapolated=True),
    ]
    ranked = rank_layouts(options, Sla(itl_s=0.015), isl=1000, osl=100, gpus=4)
    assert (ranked[0].prefill_tp, ranked[0].decode_tp) == (2, 2) and ranked[0].concurrency
    assert ranked[0].extrapolated
    own = [c for c in ranked if c.prefill_tp == 1]
    assert own and all(c.concurrency is None and not c.extrapolated for c in own)


def test_tp_choices_follow_the_node_the_budget_and_the_heads():
    loaded = load_variant(str(H200), None)
    recipe = loaded.recipe
    spec = model_spec(recipe, H200.parent)
    assert spec is not None
    # prefill is DEP2: TP4 would take all 8 devices and leave decode none
    assert tp_choices(recipe, "prefill", spec, 8) == [1, 2]
    assert tp_choices(recipe, "decode", spec, 8) == [1]  # DEP4: TP2 is 8 devices
    assert tp_choices(recipe, "prefill", spec, 32) == [1, 2, 4, 8]  # 16 heads, 2 KV heads, 256 experts
    small = recipe.model_copy(update={"cluster": recipe.cluster.model_copy(update={"gpus_per_node": 4})})
    assert tp_choices(small, "prefill", spec, 32) == [1, 2, 4]  # a TP group stays on one node
    odd = spec.model_copy(update={"num_attention_heads": 12})  # 12 heads do not split 8 ways
    assert 8 not in tp_choices(recipe, "prefill", odd, 64) and 4 in tp_choices(recipe, "prefill", odd, 64)
    # a hybrid model on 0.26 transfers between equal TPs only (CON001); 0.27 handles others
    assert pair_allowed(recipe, spec, 2, 2) and not pair_allowed(recipe, spec, 1, 2)
    later = recipe.model_copy(update={"engine": recipe.engine.model_copy(update={"vllm_version": "0.27.0"})})
    assert pair_allowed(later, spec, 1, 2)


def test_the_capacity_of_a_decode_endpoint_is_planned_at_its_tp_and_keep_layout_keeps_the_recipes():
    loaded = load_variant(str(H200), None)
    wide = sla_report(loaded, str(H200), sla_text="ttft=2s,itl=50ms", calibration=None, gpus=16, isl=None, osl=None)
    assert wide["tp_options"] == [{"prefill": 1, "decode": 1}, {"prefill": 2, "decode": 2}] and not wide["keep_layout"]
    caps = {}
    for c in wide["configurations"]:
        caps.setdefault(c["decode_tp"], c["capacity"] // c["decode_endpoints"])
        assert c["extrapolated"] is (c["decode_tp"] != 1)
        assert c["decode_layout"] == ("DEP4" if c["decode_tp"] == 1 else "TP2 DEP4")
    assert caps[2] > caps[1]  # half the weights per GPU: more cache, more requests resident
    kept = sla_report(
        loaded, str(H200), sla_text="ttft=2s,itl=50ms", calibration=None, gpus=16, isl=None, osl=None, keep_layout=True
    )
    assert kept["tp_options"] == [{"prefill": 1, "decode": 1}]
    table = cli("plan", str(H200), "--sla", "ttft=2s,itl=50ms", "--gpus", "16", timeout=120, env={"COLUMNS": "200"})
    assert "TP2 DEP4 *" in table.stdout and "are extrapolated" in table.stdout, table.stdout
    assert {(c["prefill_tp"], c["decode_tp"]) for c in kept["configurations"]} == {(1, 1)}


# ----- the picture ------------------------------------------------------------------------------
@pytest.mark.skipif(not HAS_MATPLOTLIB, reason="matplotlib is not installed")
def test_plot_draws_the_ranked_configurations_with_the_chosen_point(tmp_path):
    png = tmp_path / "sla.png"
    r = cli("plan", str(H200), "--sla", "ttft=2s,itl=50ms", "--plot", str(png), "--format", "json", timeout=120)
    assert r.returncode == 0, r.stderr
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    body = json.loads(r.stdout)
    assert body["plot"] == str(png)
    chosen = body["configurations"][0]
    line = body["curves"][0]
    assert (line["prefill_endpoints"], line["decode_endpoints"]) == (
        chosen["prefill_endpoints"],
        chosen["decode_endpoints"],
    )
    at = {p["concurrency"]: p for p in line["points"]}
    assert at[chosen["concurrency"]]["meets_sla"] and at[1]["meets_sla"]
    assert at[chosen["concurrency"]]["tps_per_gpu"] == pytest.approx(chosen["prediction"]["tps_per_gpu"])
    assert not all(p["meets_sla"] for p in line["points"])  # the line runs past the SLA


def test_plot_never_replaces_the_recipe_and_force_goes_with_write_recipe(tmp_path):
    copy = tmp_path / "recipe.yaml"
    copy.write_text(H200.read_text())
    r = cli("plan", str(copy), "--sla", "ttft=2s", "--plot", str(copy), timeout=120)
    assert r.returncode == 2 and "the recipe being planned" in r.stderr and copy.read_text() == H200.read_text()
    r = cli("plan", str(copy), "--sla", "ttft=2s", "--force", timeout=120)
    assert r.returncode == 2 and "--force goes with --write-recipe" in r.stderr


def test_plot_without_matplotlib_says_how_to_install_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib raises ImportError
    with pytest.raises(RecipectlError) as e:
        pyplot()
    assert e.value.exit_code == 2 and "pip install matplotlib" in (e.value.fix or "")


# ----- the written recipe -----------------------------------------------------------------------
def test_write_recipe_writes_the_chosen_configuration_keeping_the_comments_and_it_validates(tmp_path):
    two_nodes = tmp_path / "two.yaml"  # 16 GPUs, so that a TP2 layout fits
    two_nodes.write_text(H200.read_text().replace("  nodes: 1\n", "  nodes: 2\n"))
    out = tmp_path / "planned.yaml"
    args = ("plan", str(two_nodes), "--sla", "itl=8ms", "--gpus", "16", "--format", "json")
    r = cli(*args, "--write-recipe", str(out), timeout=120)
    assert r.returncode == 0, r.stderr
    chosen = json.loads(r.stdout)["configurations"][0]
    assert json.loads(r.stdout)["written_recipe"] == str(out)
    assert (chosen["prefill_tp"], chosen["decode_tp"]) == (2, 2)  # ITL 8 ms: TP1's decode step is slower
    text = out.read_text()
    assert text.startswith("# Written by recipectl plan two.yaml --sla itl=8ms (UNCALIBRATED")
    assert "# 256 experts over 2 ranks" in text and "# Hybrid P/D needs the same TP on both roles" in text
    data = yaml.safe_load(text)
    for role in ("prefill", "decode"):
        assert data[role]["endpoints"] == chosen[f"{role}_endpoints"]
    assert data["prefill"]["parallel"] == "DEP2-TP2" and data["decode"]["parallel"] == "DEP4-TP2"
    assert data["workload"]["concurrency"] == [chosen["concurrency"]]
    v = cli("validate", str(out), timeout=120)
    assert v.returncode == 0 and "0 error(s)" in v.stdout, v.stdout + v.stderr


def test_write_recipe_refuses_an_existing_file_a_link_and_the_recipe_itself(tmp_path):
    out = tmp_path / "planned.yaml"
    out.write_text("mine\n")
    args = ("plan", str(H200), "--sla", "ttft=2s,itl=50ms")
    r = cli(*args, "--write-recipe", str(out), timeout=120)
    assert r.returncode == 2 and "already exists" in r.stderr and out.read_text() == "mine\n"
    assert cli(*args, "--write-recipe", str(out), "--force", timeout=120).returncode == 0
    assert "Written by recipectl plan" in out.read_text()
    link = tmp_path / "link.yaml"
    os.symlink(out, link)
    r = cli(*args, "--write-recipe", str(link), "--force", timeout=120)
    assert r.returncode == 2 and "symbolic link" in r.stderr
    copy = tmp_path / "recipe.yaml"
    copy.write_text(H200.read_text())
    r = cli("plan", str(copy), "--sla", "ttft=2s", "--write-recipe", str(copy), "--force", timeout=120)
    assert r.returncode == 2 and "the file being planned" in r.stderr and copy.read_text() == H200.read_text()


def test_write_recipe_writes_nothing_when_no_configuration_meets_the_sla_or_it_would_not_validate(tmp_path):
    out = tmp_path / "planned.yaml"
    r = cli("plan", str(H200), "--sla", "ttft=10ms", "--write-recipe", str(out), timeout=120)
    assert r.returncode == 1 and "no configuration meets the SLA" in r.stderr and not out.exists()
    # 16 devices on a cluster of 8: the chosen split (16 GPUs, what a TTFT of 150 ms takes) would not
    # fit, and validate would say so
    r = cli("plan", str(H200), "--sla", "ttft=150ms,itl=50ms", "--gpus", "16", "--write-recipe", str(out), timeout=120)
    assert r.returncode == 1 and "does not validate" in r.stderr and "--gpus 8" in r.stderr, r.stderr
    assert not out.exists()
    fix = " ".join(r.stderr.partition("fix:")[2].split())
    assert fix.startswith("plan with --gpus 8 or fewer") and "; or edit the recipe by hand" in fix, fix


def test_the_written_recipe_drops_the_per_endpoint_lists_of_a_role_whose_endpoints_change():
    recipe = load_variant(str(LOCAL_RECIPE), None).recipe  # cpu_cores ['0'] and ['1'], one endpoint each
    chosen = {"prefill_endpoints": 3, "decode_endpoints": 1, "prefill_tp": 1, "decode_tp": 1, "concurrency": 12}
    edits, removed = planned_edits(recipe, chosen, isl=64, osl=16)
    assert removed == ["prefill.cpu_cores"]  # decode keeps its one endpoint, and its core
    assert {e.path: e.value for e in edits} == {"prefill.endpoints": 3, "workload.concurrency": [12]}
    _, removed = planned_edits(recipe, {**chosen, "prefill_endpoints": 1}, isl=128, osl=16)
    assert removed == []


def test_write_recipe_says_the_ttft_range_where_several_prefill_endpoints_feed_a_decode_endpoint(tmp_path):
    out = tmp_path / "planned.yaml"
    args = (
        "plan",
        "recipes/local/tiny-hybrid-cpu.yaml",
        "--sla",
        "ttft=2s,itl=50ms",
        "--gpus",
        "3",
        "--format",
        "json",
    )
    r = cli(*args, "--write-recipe", str(out), timeout=120)
    assert r.returncode == 0, r.stderr
    chosen = json.loads(r.stdout)["configurations"][0]
    p = chosen["prediction"]
    assert chosen["prefill_endpoints"] == 2 and p["transfer_sources"] == 2
    line = f"# TTFT between {p['ttft_low_s'] * 1e3:,.0f} and {p['ttft_high_s'] * 1e3:,.0f} ms: 2 prefill endpoints"
    assert line in out.read_text()


def test_write_recipe_of_a_matrix_variant_writes_that_variant_alone(tmp_path):
    """--variant on a matrix recipe: the file written is the variant planned (the matrix's value
    for it as a plain field, the matrix gone, the variant's name), not the whole matrix again with
    the base edited; the comments stay."""
    out = tmp_path / "planned.yaml"
    gb200 = ROOT / "recipes" / "gb200" / "qwen3.5-397b-nvfp4-pd.yaml"
    args = ("plan", str(gb200), "--variant", "prefill-endpoints-6", "--sla", "ttft=2s,itl=50ms", "--keep-layout")
    r = cli(*args, "--format", "json", "--write-recipe", str(out), timeout=120)
    assert r.returncode == 0, r.stderr
    chosen = json.loads(r.stdout)["configurations"][0]
    text = out.read_text()
    assert "\nmatrix:" not in text and "name: qwen3.5-397b-nvfp4-gb200-pd.prefill-endpoints-6" in text
    assert "# 4..8 in the write-up" in text  # a comment of the recipe, kept
    names = cli("expand", str(out), "-f", "names")
    assert names.stdout.split() == ["qwen3.5-397b-nvfp4-gb200-pd.prefill-endpoints-6"], names.stderr
    assert load_variant(str(out), None).recipe.prefill.endpoints == chosen["prefill_endpoints"]


def test_write_recipe_of_a_variant_whose_matrix_key_sits_under_an_empty_section(tmp_path):
    """`launch:` with nothing under it and `matrix: {launch.ready_timeout_s: [...]}`: validate,
    expand and plan take it (an empty section is an absent one), and --write-recipe refused it
    ("launch is not a mapping"); the section is now made a mapping where it stands."""
    gb200 = (ROOT / "recipes" / "gb200" / "qwen3.5-397b-nvfp4-pd.yaml").read_text()
    text = gb200.replace("\nrouter:", "\nlaunch:\n\nrouter:", 1).replace(
        "prefill.endpoints: [4, 5, 6, 7, 8]", "prefill.endpoints: [4]\n  launch.ready_timeout_s: [100, 200]"
    )
    src, out = tmp_path / "m.yaml", tmp_path / "planned.yaml"
    src.write_text(text)
    args = ("plan", str(src), "--variant", "launch-ready-timeout-s-200", "--sla", "ttft=2s,itl=50ms", "--keep-layout")
    r = cli(*args, "--write-recipe", str(out), timeout=120)
    assert r.returncode == 0, r.stderr
    written = out.read_text()
    assert "\nlaunch:\n  ready_timeout_s: 200\n" in written and "\nmatrix:" not in written
    assert load_variant(str(out), None).recipe.launch.ready_timeout_s == 200
