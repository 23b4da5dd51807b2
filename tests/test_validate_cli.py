"""`recipectl validate` as a user runs it: exit codes, positions, fixes, JSON, bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from .recipe_text import replace_once

ROOT = Path(__file__).resolve().parent.parent
GB200 = ROOT / "recipes" / "gb200" / "qwen3.5-397b-nvfp4-pd.yaml"


def _gb200_variant(tmp_path: Path, edit) -> Path:
    data = yaml.safe_load(GB200.read_text())
    edit(data)
    out = tmp_path / "recipe.yaml"
    out.write_text(yaml.safe_dump(data, sort_keys=False))
    return out


def test_shipped_recipes_validate_clean(recipectl_cli):
    r = recipectl_cli("validate", "recipes/")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "0 error(s)" in r.stdout


def test_gb200_without_ds_on_decode_fails_with_rule_field_and_fix(recipectl_cli, tmp_path):
    path = _gb200_variant(tmp_path, lambda d: d["decode"]["env"].pop("VLLM_SSM_CONV_STATE_LAYOUT"))
    r = recipectl_cli("validate", str(path))
    assert r.returncode == 1
    assert "HYB001 error" in r.stdout
    assert "[decode.env.VLLM_SSM_CONV_STATE_LAYOUT]" in r.stdout
    assert "VLLM_SSM_CONV_STATE_LAYOUT: DS" in r.stdout  # the fix, as YAML


def test_gb200_on_vllm_025_with_async_fails(recipectl_cli, tmp_path):
    def edit(d):
        d["engine"]["vllm_version"] = "0.25.0"
        d["engine"].pop("image")

    path = _gb200_variant(tmp_path, edit)
    r = recipectl_cli("validate", str(path), "--format", "json")
    assert r.returncode == 1
    body = json.loads(r.stdout)
    found = {(f["code"], f["path"]) for f in body["files"][0]["findings"]}
    assert ("VER001", "decode.async_scheduling") in found
    finding = next(f for f in body["files"][0]["findings"] if f["code"] == "VER001")
    assert finding["fix"] and finding["line"] and finding["severity"] == "error"
    assert body["summary"]["errors"] >= 1


def test_yaml_syntax_error_is_a_position_not_a_traceback(recipectl_cli, tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("version: 1\nname: x\nmodel:\n  path: [unclosed\ncluster: {gpu: CPU}\n")
    r = recipectl_cli("validate", str(bad))
    assert r.returncode == 2
    assert "Traceback" not in r.stdout + r.stderr
    assert f"{bad}:" in r.stdout and "YAML syntax error" in r.stdout


def test_unknown_key_suggests_the_right_one(recipectl_cli, tmp_path):
    text = replace_once(GB200.read_text(), "  max_num_batched_tokens: 16384", "  max_num_batched_token: 16384")
    bad = tmp_path / "typo.yaml"
    bad.write_text(text)
    r = recipectl_cli("validate", str(bad))
    assert r.returncode == 2
    line = next(i + 1 for i, ln in enumerate(text.splitlines()) if "max_num_batched_token:" in ln)
    assert f"typo.yaml:{line}:3 SCH002 error: unknown key 'max_num_batched_token'" in r.stdout
    assert "did you mean 'max_num_batched_tokens'?" in r.stdout


def test_wrong_type_and_duplicate_key(recipectl_cli, tmp_path):
    bad = tmp_path / "types.yaml"
    bad.write_text("version: 1\nname: x\nmodel: {path: m}\ncluster: {gpu: TPU}\nworkload: {isl: many, osl: 1}\n")
    r = recipectl_cli("validate", str(bad))
    assert r.returncode == 2
    assert "cluster.gpu" in r.stdout and "workload.isl" in r.stdout
    dup = tmp_path / "dup.yaml"
    dup.write_text("version: 1\nname: x\nname: y\n")
    r = recipectl_cli("validate", str(dup))
    assert r.returncode == 2 and "duplicate key 'name'" in r.stdout


def test_strict_makes_warnings_fail(recipectl_cli, tmp_path):
    # off on both roles: a capacity warning (PRF002); off on decode only would be CON004's error
    path = _gb200_variant(
        tmp_path, lambda d: (d["decode"].pop("mamba_ssm_cache_dtype"), d["prefill"].pop("mamba_ssm_cache_dtype"))
    )
    assert recipectl_cli("validate", str(path)).returncode == 0
    r = recipectl_cli("validate", str(path), "--strict")
    assert r.returncode == 1 and "PRF002 warning" in r.stdout


def test_missing_file_and_empty_directory(recipectl_cli, tmp_path):
    r = recipectl_cli("validate", str(tmp_path / "nope.yaml"))
    assert r.returncode == 2 and "no such file" in r.stdout
    r = recipectl_cli("validate", str(tmp_path))
    assert r.returncode == 2 and "no *.yaml recipes" in r.stderr


def test_matrix_expands_into_the_seeds_five_configurations(recipectl_cli):
    r = recipectl_cli("expand", str(GB200), "--format", "names")
    assert r.returncode == 0
    names = r.stdout.split()
    assert len(names) == 5 and names[0].endswith("prefill-endpoints-4") and names[-1].endswith("prefill-endpoints-8")


def test_show_resolved_includes_defaults(recipectl_cli):
    r = recipectl_cli("show", str(GB200), "--resolved", "--variant", "prefill-endpoints-8", "--format", "json")
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)
    assert data["prefill"]["endpoints"] == 8
    assert data["kv_transfer"]["load_failure_policy"] == "fail"  # a default, shown
    assert data["model"]["family"] == "hybrid"  # inferred from the known model


def test_explain_and_rules(recipectl_cli):
    r = recipectl_cli("explain", "VER001")
    assert r.returncode == 0 and "Why:" in r.stdout and "45357" in r.stdout
    r = recipectl_cli("rules", "--format", "json")
    assert r.returncode == 0 and len(json.loads(r.stdout)) >= 30


def test_plan_json_for_the_seed_decode(recipectl_cli):
    r = recipectl_cli("plan", str(GB200), "--variant", "prefill-endpoints-4", "--format", "json")
    assert r.returncode == 0, r.stderr
    body = json.loads(r.stdout)
    decode = body["roles"]["decode"]
    assert decode["kv_bytes_per_token"] == 30_720  # 15 attention layers x 2 x 2 KV heads x 256 x 2 B
    assert decode["gdn_state_bytes_per_request"] == 97_689_600  # 93.2 MiB with a bf16 SSM cache
    assert 1000 < decode["saturation_concurrency_all_endpoints"] < 5120  # the seed's sweep ran past it
    assert decode["ssm_bf16_vs_fp32"]["concurrency_ratio"] > 1.2


def test_capacity_warning_is_opted_out_with_a_reason_in_the_seed_recipe(recipectl_cli, tmp_path):
    path = _gb200_variant(tmp_path, lambda d: d.pop("ignore"))
    r = recipectl_cli("validate", str(path))
    assert r.returncode == 0 and "CAP001 warning" in r.stdout and "decode GPUs would hold 5120" in r.stdout


def test_libyaml_and_the_python_parser_give_the_same_data_and_positions():
    """validate composes with libyaml for speed; what it reports must not depend on which parser ran."""
    from recipectl import loader

    files = sorted(ROOT.glob("recipes/**/*.yaml")) + sorted(ROOT.glob("tests/rule_cases/*.yaml"))
    assert loader.FAST_LOADER is not None, "PyYAML without libyaml: validate runs the slow parser"
    for f in files:
        text = f.read_text()
        fast = loader._parse_yaml(text, str(f), loader.FAST_LOADER)
        slow = loader._parse_yaml(text, str(f), yaml.SafeLoader)
        assert fast[0] == slow[0], f
        assert fast[1].positions == slow[1].positions, f
        assert fast[2] == slow[2], f


def test_a_syntax_error_is_reported_in_the_python_parsers_words():
    from recipectl import loader

    text = "version: 1\nname: x\nmodel:\n  path: [unclosed\ncluster: {gpu: CPU}\n"
    _, _, diags = loader.parse_yaml(text, "bad.yaml")
    (d,) = diags
    assert (d.line, d.col) == (5, 8)
    assert d.message == ("YAML syntax error: expected ',' or ']', but got ':' (while parsing a flow sequence)")


def test_text_libyaml_cannot_take_is_a_diagnostic_not_a_traceback():
    from recipectl import loader

    _, _, diags = loader.parse_yaml("version: 1\nname: \ud800\n", "bad.yaml")
    assert [d.code for d in diags] == ["SCH000"] and "unacceptable character" in diags[0].message


def test_a_key_left_without_a_value_says_so(recipectl_cli, tmp_path):
    """Deleting the only entry under `env:` leaves YAML's null there, not an empty mapping."""
    text = GB200.read_text()
    lines = text.splitlines()
    ds = [i for i, ln in enumerate(lines) if "VLLM_SSM_CONV_STATE_LAYOUT: DS" in ln][-1]  # decode's
    bad = tmp_path / "no-ds.yaml"
    bad.write_text("\n".join(lines[:ds] + lines[ds + 1 :]) + "\n")
    r = recipectl_cli("validate", str(bad))
    assert r.returncode == 2 and "Traceback" not in r.stdout + r.stderr
    assert f"no-ds.yaml:{ds}:3 SCH001 error: 'env' has no value" in r.stdout
    assert "[decode.env]" in r.stdout
    assert "fix: remove the key to use its default, or write env: {}" in r.stdout
    # and with `env: {}` the rule about the missing variable speaks instead
    bad.write_text("\n".join(lines[: ds - 1] + ["  env: {}"] + lines[ds + 1 :]) + "\n")
    r = recipectl_cli("validate", str(bad))
    assert r.returncode == 1 and "HYB001 error" in r.stdout


def test_an_absurd_size_is_a_schema_error_not_an_allocation(recipectl_cli, tmp_path):
    """Found by tests/test_fuzz.py: 2,527,801,280,929 GPUs per node once reached the placement,
    which tried to list them all (MemoryError)."""
    path = _gb200_variant(tmp_path, lambda d: d["cluster"].update(gpus_per_node=2527801280929))
    r = recipectl_cli("validate", str(path))
    assert r.returncode == 2 and "Traceback" not in r.stdout + r.stderr
    assert "less than or equal to 128" in r.stdout and "[cluster.gpus_per_node]" in r.stdout


@pytest.mark.parametrize("command,choice", [("show", "xml"), ("expand", "toml"), ("show", "names")])
def test_show_and_expand_refuse_a_format_they_do_not_have(recipectl_cli, command, choice):
    r = recipectl_cli(command, str(GB200), "--format", choice)
    assert r.returncode == 2 and "Invalid value" in r.stderr and not r.stdout, (r.stdout, r.stderr)


def test_f_is_format_everywhere_and_logs_follows_with_the_long_option_only(recipectl_cli):
    r = recipectl_cli("logs", "-f")
    assert r.returncode == 2 and "No such option: -f" in r.stderr, r.stderr
    assert "--follow" in recipectl_cli("logs", "--help").stdout
    assert recipectl_cli("expand", str(GB200), "-f", "json").stdout.lstrip().startswith("[")
