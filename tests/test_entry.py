"""The front door: one Typer app (recipectl/cli.py) whose commands come from one table and are
imported only when used. Help, usage errors, suggestions and exit codes as a user sees them,
through the console entry point."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from recipectl import cli

from .recipe_text import write_edited

ROOT = Path(__file__).resolve().parent.parent
GB200 = ROOT / "recipes" / "gb200" / "qwen3.5-397b-nvfp4-pd.yaml"
VARIANT = "prefill-endpoints-4"


def _run(*args: str) -> tuple[int, str, str]:
    r = subprocess.run(
        [sys.executable, "-m", "recipectl", *args], capture_output=True, text=True, cwd=ROOT, timeout=120
    )
    return r.returncode, r.stdout, r.stderr


@pytest.fixture(scope="module")
def recipes(tmp_path_factory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("entry")
    data = yaml.safe_load(GB200.read_text())
    data["decode"]["env"].pop("VLLM_SSM_CONV_STATE_LAYOUT")  # HYB001, an error
    data["decode"].pop("mamba_ssm_cache_dtype")  # PRF002, a warning
    findings = d / "findings.yaml"
    findings.write_text(yaml.safe_dump(data, sort_keys=False))
    typo = d / "typo.yaml"
    write_edited(GB200, typo, ("  max_num_batched_tokens: 16384", "  max_num_batched_token: 16384"))
    return {"findings": findings, "typo": typo}


def test_exit_codes_are_the_commands_own(recipes):
    rc, out, err = _run("validate", str(GB200))
    assert rc == 0 and "ok (5 variants)" in out and err == ""
    rc, out, _ = _run("validate", str(recipes["findings"]), "--format", "json")
    assert rc == 1 and '"code": "HYB001"' in out
    rc, out, _ = _run("validate", "-q", "--select", "PRF002", "--strict", str(recipes["findings"]))
    assert rc == 1 and "PRF002" in out and "HYB001" not in out
    rc, out, _ = _run("validate", str(recipes["typo"]))
    assert rc == 2 and "SCH002" in out
    rc, out, err = _run("validate", str(recipes["findings"]), "--extend-select", "HYB01")  # a RecipectlError
    assert rc == 2 and out == "" and "did you mean HYB001?" in err


def test_usage_errors_exit_2_and_a_misspelt_command_gets_a_suggestion():
    rc, out, err = _run()  # no command: the help, as a usage error
    assert rc == 2 and "Usage:" in out + err
    for args in (
        ["validate"],
        ["validate", str(GB200), "--formt", "json"],
        ["validate", str(GB200), "-f", "JSON"],
        ["render", str(GB200), "extra"],
        ["render", str(GB200), "-t"],
        ["render", str(GB200), "-t", "ssh"],
        ["plan", str(GB200), "--format", "yaml"],
    ):
        rc, out, err = _run(*args)
        assert rc == 2 and out == "" and "Error" in err and "Traceback" not in err, args
    rc, _, err = _run("valdate", str(GB200))
    # click lists every close name, best first ("Did you mean 'validate', 'calibrate'?")
    assert rc == 2 and "No such command 'valdate'" in err and "Did you mean 'validate'" in err


def test_the_help_lists_every_command_of_the_table_with_its_help():
    rc, out, _ = _run("--help")
    text = " ".join(out.replace("│", " ").split())
    assert rc == 0
    for entry in cli.COMMANDS:
        assert f"{entry.name} {' '.join(entry.help.split())[:30]}" in text, entry.name


@pytest.mark.parametrize("entry", cli.COMMANDS, ids=lambda e: e.name)
def test_every_table_entry_is_a_command_whose_help_is_the_tables(entry):
    command = cli.load_command(entry)
    assert command.name == entry.name
    r = CliRunner().invoke(cli.app, [entry.name, "--help"], terminal_width=200)
    assert r.exit_code == 0, r.output
    assert " ".join(entry.help.split("\n")[0].split())[:40] in " ".join(r.output.replace("│", " ").split())


def test_a_command_is_imported_only_when_it_is_run():
    code = (
        "import sys, runpy; sys.argv = ['recipectl', 'validate', %r]\n"
        "try:\n    runpy.run_module('recipectl', run_name='__main__')\n"
        "except SystemExit:\n    pass\n"
        "print(sorted(m for m in sys.modules if m.startswith('recipectl.commands.')))"
    ) % str(GB200)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    loaded = ast.literal_eval(r.stdout.strip().splitlines()[-1])
    assert "recipectl.commands.validate" in loaded
    assert not {
        "recipectl.commands.deployments",
        "recipectl.commands.recipes",
        "recipectl.commands.doctor",
        "recipectl.commands.fix",
    } & set(loaded), loaded


def test_a_command_function_gets_every_value_typer_parsed(monkeypatch, recipectl_in_process):
    """The table names a function; Typer calls it with the parsed values (each option's default
    where none is given) and its return value is the exit code."""
    import recipectl.commands.recipes as recipes_module

    seen: dict = {}
    monkeypatch.setattr(recipes_module, "render_files", lambda recipe, **kw: seen.update(recipe=recipe, **kw) or 7)
    rc, _, err = recipectl_in_process("render", "a.yaml", "-t", "k8s", "--out=d", "--force")
    assert rc == 7, err
    assert seen == {"recipe": "a.yaml", "target": "k8s", "out": "d", "variant": None, "force": True}
    rc, _, err = recipectl_in_process("render", "b.yaml")
    assert rc == 7, err
    assert seen == {"recipe": "b.yaml", "target": "bash", "out": None, "variant": None, "force": False}


def test_a_bug_in_a_command_is_an_internal_error_with_a_log(monkeypatch, recipectl_in_process, tmp_path):
    import recipectl.commands.recipes as recipes_module

    def broken():
        raise KeyError("HF_TOKEN")

    monkeypatch.setattr(recipes_module, "all_rules", broken)
    rc, out, err = recipectl_in_process("rules")
    assert rc == 3 and "internal error: KeyError" in err and "HF_TOKEN" not in err
    assert list(tmp_path.glob("recipectl-crash-*.log"))


def test_render_to_stdout_and_to_a_directory(tmp_path):
    rc, out, err = _run("render", str(GB200), "--variant", VARIANT, "-t", "k8s")
    assert rc == 0 and "kind: Deployment" in out and err == ""
    rc, out, err = _run("render", str(GB200), f"--variant={VARIANT}", "--target", "slurm", "-o", str(tmp_path))
    assert rc == 0 and f"wrote {tmp_path}" in err and any(tmp_path.iterdir())
    rc, _, err = _run("render", str(GB200))  # a matrix without --variant
    assert rc == 2 and "expands into 5 recipes" in err


def test_table_names_are_unique():
    names = [e.name for e in cli.COMMANDS]
    assert len(names) == len(set(names))
