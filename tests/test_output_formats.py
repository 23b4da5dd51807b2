"""`validate --format sarif` (checked against the SARIF 2.1.0 JSON schema, tests/sarif/) and
`--format github` (workflow-command annotations); JSON keeps its schema_version."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest
import yaml

from recipectl.commands.validate import validate
from recipectl.diagnostics import Diagnostic, FileReport, Severity, format_reports_github
from recipectl.rules import all_rules

ROOT = Path(__file__).resolve().parent.parent
GB200 = ROOT / "recipes" / "gb200" / "qwen3.5-397b-nvfp4-pd.yaml"
SCHEMA = json.loads((Path(__file__).parent / "sarif" / "sarif-schema-2.1.0.json").read_text())


@pytest.fixture
def files(tmp_path) -> dict[str, Path]:
    data = yaml.safe_load(GB200.read_text())
    data["decode"]["env"].pop("VLLM_SSM_CONV_STATE_LAYOUT")  # HYB001
    findings = tmp_path / "findings.yaml"
    findings.write_text(yaml.safe_dump(data, sort_keys=False))
    syntax = tmp_path / "syntax.yaml"
    syntax.write_text("version: 1\nname: x\nmodel:\n  path: [unclosed\n")
    return {"findings": findings, "syntax": syntax}


def _sarif(capsys, paths: list[Path], **kw) -> tuple[int, dict]:
    rc = validate([str(p) for p in paths], format="sarif", **kw)
    log = json.loads(capsys.readouterr().out)
    jsonschema.Draft4Validator(SCHEMA, format_checker=jsonschema.FormatChecker()).validate(log)
    return rc, log


def test_the_vendored_schema_is_the_oasis_one():
    assert SCHEMA["id"].startswith("https://docs.oasis-open.org/sarif/sarif/v2.1.0/")
    jsonschema.Draft4Validator.check_schema(SCHEMA)
    with pytest.raises(jsonschema.ValidationError):  # the check is real: a log without runs fails
        jsonschema.Draft4Validator(SCHEMA).validate({"version": "2.1.0"})


def test_sarif_of_findings_ignored_findings_and_an_invalid_file(capsys, files):
    rc, log = _sarif(capsys, [files["findings"], files["syntax"], ROOT / "recipes"], show_ignored=True)
    assert rc == 2  # the same exit code as text: one file is invalid
    (run,) = log["runs"]
    rules = run["tool"]["driver"]["rules"]
    assert {r["id"] for r in rules} >= {r.code for r in all_rules()} | {"SCH000", "SCH001", "SCH002"}
    for res in run["results"]:
        assert rules[res["ruleIndex"]]["id"] == res["ruleId"]
    hyb = next(r for r in run["results"] if r["ruleId"] == "HYB001")
    assert hyb["level"] == "error" and "VLLM_SSM_CONV_STATE_LAYOUT: DS" in hyb["properties"]["fix"]
    loc = hyb["locations"][0]
    assert loc["physicalLocation"]["artifactLocation"]["uri"] == files["findings"].as_uri()
    assert loc["physicalLocation"]["region"]["startLine"] > 1
    assert loc["logicalLocations"][0]["fullyQualifiedName"] == "decode.env.VLLM_SSM_CONV_STATE_LAYOUT"
    syntax = next(r for r in run["results"] if r["ruleId"] == "SCH000")
    assert syntax["level"] == "error" and "YAML syntax error" in syntax["message"]["text"]
    suppressed = [r for r in run["results"] if "suppressions" in r]
    assert {r["ruleId"] for r in suppressed} == {"CAP001", "OPS003"}
    assert {s["kind"] for r in suppressed for s in r["suppressions"]} == {"inSource"}


def test_sarif_suppressions_from_the_command_line_are_external(capsys, files):
    rc, log = _sarif(capsys, [files["findings"]], ignore=["HYB001"], severity=["OPS003=info"], show_ignored=True)
    assert rc == 0
    results = log["runs"][0]["results"]
    hyb = next(r for r in results if r["ruleId"] == "HYB001")
    assert hyb["suppressions"] == [{"kind": "external", "justification": "--ignore"}]
    assert {r["level"] for r in results if r["ruleId"] == "OPS003"} == {"note"}


def test_sarif_of_a_clean_run_relative_paths(capsys, monkeypatch):
    monkeypatch.chdir(ROOT)
    rc, log = _sarif(capsys, [Path("recipes/local/tiny-hybrid-cpu.yaml")])
    assert rc == 0 and log["runs"][0]["results"] == []  # ignored rules are not run without --show-ignored
    assert log["runs"][0]["artifacts"] == [{"location": {"uri": "recipes/local/tiny-hybrid-cpu.yaml"}}]


def test_github_annotations(capsys, files):
    rc = validate([str(files["findings"]), str(files["syntax"])], format="github")
    out = capsys.readouterr().out
    assert rc == 2
    lines = out.splitlines()
    assert all(ln.startswith(("::error ", "::warning ", "::notice ")) for ln in lines)
    hyb = next(ln for ln in lines if "title=HYB001" in ln)
    line = next(i for i, t in enumerate(files["findings"].read_text().splitlines(), 1) if "decode:" in t)
    assert hyb.startswith(f"::error file={files['findings']},line=")
    assert int(hyb.split("line=")[1].split(",")[0]) > line
    assert "::VLLM_SSM_CONV_STATE_LAYOUT is unset on decode" in hyb and "%0Afix: decode:%0A" in hyb
    assert any(ln.startswith(f"::error file={files['syntax']},line=") and "title=SCH000" in ln for ln in lines)
    assert "CAP001" not in out  # ignored by the recipe: no annotation


def test_github_escaping_and_levels():
    d = Diagnostic(
        code="PRF001", severity=Severity.INFO, message="50% done,\nnext: x", file="a:b,c.yaml", line=3, col=7
    )
    out = format_reports_github([FileReport(file="a:b,c.yaml", diagnostics=[d])])
    assert out == "::notice file=a%3Ab%2Cc.yaml,line=3,col=7,title=PRF001::50%25 done,%0Anext: x\n"
    assert format_reports_github([FileReport(file="x.yaml")]) == ""


def test_json_keeps_its_schema_version(capsys, files):
    validate([str(files["findings"])], format="json")
    body = json.loads(capsys.readouterr().out)
    assert body["schema_version"] == 1 and body["summary"]["ignored_rules"] == 2


# ---------------------------------------------------------------------------------------------------
# show and plan under --format json: a failure is one JSON document on stdout too

LOCAL = ROOT / "recipes" / "local" / "tiny-hybrid-cpu.yaml"
FAILURES = {
    # (the command line after the recipe, how the recipe is broken): the exit code, the finding's code
    "invalid recipe": (lambda text: text.replace("  port: 30000\n", "  port: 30000\n  colour: blue\n"), 2, "SCH002"),
    "missing recipe": (None, 2, "SCH000"),
    "no such variant": (lambda text: text, 2, None),
}
COMMANDS = {
    "show": ["show"],
    "show --resolved": ["show", "--resolved"],
    "plan": ["plan"],
    "plan --sla": ["plan", "--sla", "ttft=2s,itl=50ms"],
    "plan --ledger": ["plan", "--ledger"],
}


@pytest.mark.parametrize("command", list(COMMANDS))
@pytest.mark.parametrize("failure", list(FAILURES))
def test_a_failure_under_format_json_is_a_json_document(recipectl_in_process, tmp_path, command, failure):
    edit, exit_code, code = FAILURES[failure]
    recipe = tmp_path / "recipe.yaml"
    if edit is not None:
        recipe.write_text(edit(LOCAL.read_text()))
    argv = [COMMANDS[command][0], str(recipe), *COMMANDS[command][1:], "--format", "json"]
    if failure == "no such variant":
        argv += ["--variant", "no-such-variant"]
    rc, stdout, stderr = recipectl_in_process(*argv)
    assert rc == exit_code, stderr
    doc = json.loads(stdout)  # one document, nothing else
    assert doc["schema_version"] == 1 and doc["error"]["exit_code"] == rc
    assert doc["error"]["message"] and doc["error"]["message"].splitlines()[0] in stderr  # what stderr says
    if code is None:
        assert doc["files"] == [] and doc["summary"]["files"] == 0
        return
    (report,) = doc["files"]  # validate's report of the recipe, in validate's shape
    assert report["file"] == str(recipe) and report["valid"] is False
    assert [f["code"] for f in report["findings"]] == [code]
    assert doc["summary"]["invalid_files"] == 1 and doc["summary"]["errors"] == 1


def test_a_text_failure_prints_nothing_on_stdout(recipectl_in_process, tmp_path):
    rc, stdout, stderr = recipectl_in_process("show", str(tmp_path / "missing.yaml"))
    assert rc == 2 and stdout == "" and "no such file" in stderr


def test_a_plan_that_printed_its_report_and_then_failed_is_still_one_json_document(recipectl_in_process, tmp_path):
    """`plan --sla ... --write-recipe OUT --format json` where no configuration meets the SLA: the
    report is on stdout, the recipe is not written (exit 1), and stdout stays one document a
    script can parse (an error document after it had made it two)."""
    out = tmp_path / "planned.yaml"
    code, stdout, stderr = recipectl_in_process(
        "plan", str(LOCAL), "--sla", "ttft=1ms,itl=1ms", "--write-recipe", str(out), "--format", "json"
    )
    assert code == 1 and "no configuration meets the SLA" in stderr, stderr
    report = json.loads(stdout)
    assert report["sla"] and not out.exists()
