"""The entry point's fast path (recipectl/entry.py) against the full Typer app: the same command
lines give the same stdout, stderr, exit code and files, whichever of the two runs them."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from recipectl.entry import parse_fast

from .recipe_text import write_edited

ROOT = Path(__file__).resolve().parent.parent
GB200 = ROOT / "recipes" / "gb200" / "qwen3.5-397b-nvfp4-pd.yaml"
VARIANT = "prefill-endpoints-4"


def _run(module: str, args: list[str]) -> tuple[int, str, str]:
    r = subprocess.run([sys.executable, "-m", module, *args], capture_output=True, text=True, cwd=ROOT,
                       timeout=120)
    # usage lines name the program, `python -m recipectl` or `python -m recipectl.cli`, and help pads
    # its lines to the terminal width after it
    def same_name(text: str) -> str:
        return "\n".join(ln.replace("recipectl.cli", "recipectl").rstrip() for ln in text.split("\n"))

    return r.returncode, same_name(r.stdout), same_name(r.stderr)


def _both(args: list[str]) -> tuple[int, str, str]:
    """Run through the entry point and through the Typer app alone; they must agree."""
    fast = _run("recipectl", args)
    full = _run("recipectl.cli", args)
    assert fast == full, f"entry point and Typer app differ for {args}"
    return fast


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
    syntax = d / "syntax.yaml"
    syntax.write_text("version: 1\nname: x\nmodel:\n  path: [unclosed\ncluster: {gpu: CPU}\n")
    empty_dir = d / "empty"
    empty_dir.mkdir()
    return {"findings": findings, "typo": typo, "syntax": syntax, "missing": d / "nope.yaml", "empty_dir": empty_dir}


def test_valid_recipe(recipes):
    rc, out, err = _both(["validate", str(GB200)])
    assert rc == 0 and "ok (5 variants)" in out and err == ""
    rc, out, _ = _both(["validate", "--format", "json", str(GB200), "recipes/"])
    assert rc == 0 and '"schema_version": 1' in out


def test_recipe_with_findings_text_and_json(recipes):
    f = str(recipes["findings"])
    rc, out, _ = _both(["validate", f])
    assert rc == 1 and "HYB001 error" in out and "PRF002 warning" in out
    rc, out, _ = _both(["validate", f, "--format", "json"])
    assert rc == 1 and '"code": "HYB001"' in out
    rc, out, _ = _both(["validate", "-q", "--select", "PRF002", "--strict", f])
    assert rc == 1 and "PRF002" in out and "HYB001" not in out
    rc, out, _ = _both(["validate", "--select=HYB001", "-f", "json", f])
    assert rc == 1 and "PRF002" not in out
    rc, out, _ = _both(["validate", f, "--ignore", "HYB001,CON", "--severity=PRF002=error", "--show-ignored"])
    assert rc == 1 and "PRF002 error" in out and "ignored by --ignore" in out
    rc, out, err = _both(["validate", f, "--extend-select", "HYB01"])  # a usage error, with a did-you-mean
    assert rc == 2 and out == "" and "did you mean HYB001?" in err


def test_invalid_files(recipes):
    rc, out, _ = _both(["validate", str(recipes["typo"])])
    assert rc == 2 and "SCH002" in out
    rc, out, _ = _both(["validate", str(recipes["missing"])])
    assert rc == 2 and "no such file" in out
    rc, out, _ = _both(["validate", str(recipes["missing"]), "-f", "json"])
    assert rc == 2 and '"invalid_files": 1' in out
    for fmt in ("text", "json"):
        rc, out, _ = _both(["validate", str(recipes["syntax"]), "--format", fmt])
        assert rc == 2 and "YAML syntax error" in out
    rc, out, err = _both(["validate", str(recipes["empty_dir"])])  # an error, not a report
    assert rc == 2 and out == "" and "no *.yaml recipes" in err


def test_help_and_usage_errors_stay_the_typer_apps():
    for args in (["validate", "--help"], ["render", "--help"], ["--help"]):
        rc, out, _ = _both(args)
        assert rc == 0 and "Usage:" in out, args
    rc, out, err = _both([])  # no command: the help, as a usage error
    assert rc == 2 and "Usage:" in out + err
    for args in (["validate"], ["validate", str(GB200), "--formt", "json"],
                 ["validate", str(GB200), "--format", "JSON"], ["render", str(GB200), "extra"],
                 ["render", str(GB200), "-t"], ["render", str(GB200), "-t", "ssh"]):
        rc, out, err = _both(args)
        assert rc == 2 and "Error" in out + err, args


def test_render_to_stdout_and_to_a_directory(tmp_path):
    rc, out, err = _both(["render", str(GB200), "--variant", VARIANT, "-t", "k8s"])
    assert rc == 0 and "kind: Deployment" in out and err == ""
    rc, out, err = _both(["render", str(GB200), "--variant", VARIANT])  # bash: one script per host
    assert rc == 0 and out.count("# ---- ") == 4
    outputs = []
    for module, out_dir in (("recipectl", tmp_path / "fast"), ("recipectl.cli", tmp_path / "full")):
        r = _run(module, ["render", str(GB200), f"--variant={VARIANT}", "--target", "slurm", "-o", str(out_dir)])
        assert r[0] == 0
        outputs.append((r[1], r[2].replace(str(out_dir), "DIR"),
                        {p.name: (p.read_text(), p.stat().st_mode) for p in out_dir.iterdir()}))
    assert outputs[0] == outputs[1]
    rc, _, err = _both(["render", str(GB200), "--variant", "no-such-variant"])
    assert rc == 2 and "no variant 'no-such-variant'" in err
    rc, _, err = _both(["render", str(GB200)])  # a matrix without --variant
    assert rc == 2 and "expands into 5 recipes" in err


@pytest.mark.parametrize("argv", [
    ["validate", "a.yaml"], ["validate", "a.yaml", "b.yaml", "-q", "--strict"], ["validate", "-", "--format=json"],
    ["validate", "a.yaml", "--select", "HYB001", "--select=PRF002", "-f", "text", "-f", "json"],
    ["render", "a.yaml", "-t", "k8s", "-o", "out", "--variant", "v"], ["render", "a.yaml", "--target=slurm"],
    ["render", "a.yaml", "-o", "out", "--force"],
    ["validate", "a.yaml", "--ignore", "X", "--extend-select=Y", "--severity", "A=warning", "--show-ignored",
     "--config", "c.toml"],
])
def test_fast_path_takes_plain_command_lines(argv):
    assert parse_fast(argv) is not None


@pytest.mark.parametrize("argv", [
    [], ["--help"], ["rules"], ["show", "a.yaml"], ["validate"], ["validate", "--help"],
    ["validate", "a.yaml", "--help"],
    ["validate", "a.yaml", "-h"], ["validate", "a.yaml", "--formt", "json"], ["validate", "a.yaml", "--format", "JSON"],
    ["validate", "a.yaml", "--format"], ["validate", "a.yaml", "--select", "-q"], ["validate", "a.yaml", "-qf", "json"],
    ["validate", "a.yaml", "--strict=true"], ["validate", "--", "a.yaml"], ["validate", "a.yaml", "-fjson"],
    ["render"], ["render", "a.yaml", "b.yaml"], ["render", "a.yaml", "-t", "ssh"], ["render", "a.yaml", "--out"],
    ["render", "a.yaml", "--format", "json"], ["render", "a.yaml", "-q"], ["validate", "a.yaml", "--show-ignored=1"],
    ["validate", "a.yaml", "-f", "SARIF"],
])
def test_fast_path_leaves_everything_else_to_typer(argv):
    assert parse_fast(argv) is None


def test_fast_path_values():
    assert parse_fast(["validate", "a.yaml", "--select", "X", "b.yaml", "--select=Y", "-q", "--format", "json"]) == (
        "validate", {"recipes": ["a.yaml", "b.yaml"], "select": ["X", "Y"], "quiet": True, "format": "json"})
    assert parse_fast(["render", "a.yaml", "-t", "bash", "--target", "k8s", "-o", "d"]) == (
        "render", {"recipe": "a.yaml", "target": "k8s", "out": "d"})


def test_fast_path_calls_the_declared_function_with_every_value(monkeypatch):
    """entry.py fills in each option's declared default and calls the function the spec names,
    as the Typer command does."""
    import recipectl.commands.render as render_module
    from recipectl import entry

    seen = {}
    monkeypatch.setattr(entry, "_import_without_gc", lambda command: None)
    monkeypatch.setattr(render_module, "render", lambda recipe, **kw: seen.update(recipe=recipe, **kw) or 0)
    assert entry._run_fast(*parse_fast(["render", "a.yaml", "--force"])) == 0
    assert seen == {"recipe": "a.yaml", "target": "bash", "out": None, "variant": None, "force": True}


def test_shell_completion_requests_go_to_typer(monkeypatch):
    monkeypatch.setenv("_RECIPECTL_COMPLETE", "complete_bash")
    assert parse_fast(["validate", "a.yaml"]) is None


def _every_option_argv(spec) -> tuple[list[str], dict]:
    """A command line that sets each of the spec's options to a value other than its default (by
    each of its spellings, in turn), and the values the command's function must then get."""
    argv = [spec.name, "a.yaml", *(["b.yaml"] if spec.many else [])]
    expected: dict = {spec.argument: ["a.yaml", "b.yaml"] if spec.many else "a.yaml"}
    for i, o in enumerate(spec.options):
        name = o.names[i % len(o.names)]
        if o.flag:
            assert o.default is False, o.dest
            argv.append(name)
            expected[o.dest] = True
        elif o.choices:
            value = next(c for c in o.choices if c != o.default)
            argv += [name, value]
            expected[o.dest] = value
        elif o.repeatable:
            argv += [o.names[0], "X1", o.names[-1], "X2"]
            expected[o.dest] = ["X1", "X2"]
        else:
            argv += [name, "v"]
            expected[o.dest] = "v"
    return argv, expected


def _called_with(monkeypatch, spec, invoke) -> dict:
    """The keyword arguments the spec's function is called with when ``invoke()`` runs."""
    import importlib

    seen: dict = {}
    module, _, function = spec.run.partition(":")
    monkeypatch.setattr(importlib.import_module(module), function, lambda **kw: seen.update(kw) or 0)
    invoke()
    return seen


@pytest.mark.parametrize("name", ["validate", "render"])
def test_typer_and_the_fast_path_call_the_command_with_the_same_values(monkeypatch, name):
    """cli.py builds validate and render from commands/options.py, which the fast path reads: the
    same command line reaches the same function with the same values either way, for every
    option (each spelling), and the declared defaults when none is given. Behaviour through
    Typer's public test runner, not its parameter objects."""
    from typer.testing import CliRunner

    from recipectl import entry
    from recipectl.cli import app
    from recipectl.commands.options import COMMANDS

    spec = COMMANDS[name]
    monkeypatch.setattr(entry, "_import_without_gc", lambda command: None)
    bare = [spec.name, "a.yaml"]
    for argv, expected in ((bare, {spec.argument: ["a.yaml"] if spec.many else "a.yaml"}),
                           _every_option_argv(spec)):
        def via_typer(argv=argv):
            result = CliRunner().invoke(app, argv)
            assert result.exit_code == 0, result.output

        typer_values = _called_with(monkeypatch, spec, via_typer)
        assert typer_values == {**spec.defaults(), **expected}, argv
        fast = parse_fast(argv)
        assert fast is not None, argv
        assert _called_with(monkeypatch, spec, lambda fast=fast: entry._run_fast(*fast)) == typer_values, argv
        help_text = " ".join(CliRunner().invoke(app, [spec.name, "--help"], terminal_width=200).output.split())
        assert all(n in help_text for o in spec.options for n in o.names), help_text
        assert spec.help.split("\n")[0] in help_text


def test_declared_options_are_unambiguous():
    from recipectl.commands.options import COMMANDS

    for spec in COMMANDS.values():
        names = [n for o in spec.options for n in o.names]
        assert len(names) == len(set(names)) and "--help" not in names and "-h" not in names, spec.name
        assert all(n.startswith("--") or (len(n) == 2 and n[0] == "-") for n in names), spec.name
        assert all(not (o.flag and (o.choices or o.repeatable)) for o in spec.options), spec.name


def test_interrupts_and_closed_pipes_end_as_under_typer(capsys):
    """Typer's main: Ctrl-C in a command is a quiet exit 130; end of input an Abort, which the
    entry point reports as an interruption (130)."""
    from recipectl.guard import as_typer_would as _as_typer_would
    from recipectl.guard import run_guarded

    def raises(exc):
        def fn():
            raise exc
        return fn

    assert _as_typer_would(raises(KeyboardInterrupt())) == 130
    with pytest.raises(SystemExit) as e:
        run_guarded(lambda: _as_typer_would(raises(EOFError())))
    assert e.value.code == 130 and capsys.readouterr().err == "\nrecipectl: interrupted\n"
    with pytest.raises(OSError):
        _as_typer_would(raises(OSError(5, "I/O error")))
