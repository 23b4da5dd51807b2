"""Rule selection as ruff does it: --select / --extend-select / --ignore with codes, prefixes and
names, the more specific selector winning; severity overrides; project settings found as ruff
finds its configuration; the recipe's own `ignore:` checked the same way; ignored findings counted
and, with --show-ignored, listed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from recipectl.commands.validate import validate
from recipectl.errors import RecipectlError
from recipectl.rules import get_rule
from recipectl.rules.selection import Selection, UnknownSelector, matching, split

ROOT = Path(__file__).resolve().parent.parent
GB200 = ROOT / "recipes" / "gb200" / "qwen3.5-397b-nvfp4-pd.yaml"


@pytest.fixture
def project(tmp_path) -> Path:
    """A project: recipes/r.yaml is the GB200 recipe with HYB001, CON004 (errors) and PRF002 (a
    warning); its own ignore: keeps CAP001 and OPS003 off."""
    data = yaml.safe_load(GB200.read_text())
    data["decode"]["env"].pop("VLLM_SSM_CONV_STATE_LAYOUT")  # HYB001
    data["decode"].pop("mamba_ssm_cache_dtype")  # PRF002, CON004
    (tmp_path / "recipes").mkdir()
    (tmp_path / "recipes" / "r.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
    return tmp_path


def _run(capsys, recipe: Path, **kw) -> tuple[int, str]:
    rc = validate([str(recipe)], **kw)
    return rc, capsys.readouterr().out


def _codes(out: str) -> set[str]:
    body = json.loads(out)
    return {f["code"] for f in body["files"][0]["findings"]}


def test_selectors_codes_prefixes_names_and_families():
    r = get_rule("HYB001")
    assert {x.code for x in matching("HYB")} >= {"HYB001", "HYB007"}
    assert {x.code for x in matching("VER0")} == {"VER001", "VER002", "VER003", "VER004"}
    assert [x.code for x in matching("hybrid.ds-layout-missing")] == ["HYB001"]
    assert {x.code for x in matching("hybrid")} == {x.code for x in matching("HYB")}
    assert [x.code for x in matching("hyb001")] == ["HYB001"]
    assert Selection().runs(r) and not Selection(select=("PRF",)).runs(r)
    assert Selection(select=("PRF",), extend_select=("HYB001",)).runs(r)
    assert split(["HYB,VER0", " PRF002 "]) == ["HYB", "VER0", "PRF002"]


def test_the_more_specific_selector_wins():
    hyb1, hyb3 = get_rule("HYB001"), get_rule("HYB003")
    s = Selection(select=("HYB",), ignore=(("HYB003", "--ignore"),))
    assert s.ignored_by(hyb1) is None and s.ignored_by(hyb3) == "--ignore"
    s = Selection(select=("HYB001",), ignore=(("HYB", "--ignore"),))
    assert s.ignored_by(hyb1) is None and s.ignored_by(hyb3) == "--ignore"
    assert Selection(ignore=(("ALL", "x"),)).ignored_by(hyb1) == "x"  # a tie is ignored


@pytest.mark.parametrize(
    "selector, suggestion",
    [
        ("HYX", "HYB"),
        ("HYB01", "HYB001"),
        ("VER9", "VER"),
        ("QQQ", None),
        ("hybrid.ds-layout", "hybrid.ds-layout-missing"),
        ("SCH002", None),
    ],
)
def test_unknown_selectors_suggest_the_nearest(selector, suggestion):
    with pytest.raises(UnknownSelector) as e:
        matching(selector)
    assert e.value.suggestion == suggestion
    if suggestion:
        assert f"did you mean {suggestion}?" in e.value.describe()


def test_select_extend_select_ignore_on_the_command_line(project, capsys):
    r = project / "recipes" / "r.yaml"
    rc, out = _run(capsys, r, format="json")
    assert rc == 1 and _codes(out) == {"CON004", "HYB001", "PRF002"}
    rc, out = _run(capsys, r, format="json", select=["PRF"])
    assert rc == 0 and _codes(out) == {"PRF002"}
    rc, out = _run(capsys, r, format="json", select=["PRF"], extend_select=["hybrid"])
    assert rc == 1 and _codes(out) == {"HYB001", "PRF002"}
    rc, out = _run(capsys, r, format="json", ignore=["HYB001,PRF", "consistency"])
    body = json.loads(out)
    assert rc == 0 and _codes(out) == set() and body["summary"]["ignored"] is None  # not run
    rules = {x["code"]: x["reason"] for x in body["files"][0]["ignored_rules"]}
    assert rules["HYB001"] == rules["PRF001"] == rules["CON004"] == "--ignore"
    assert rules["CAP001"].startswith("the recipe's ignore: ")
    rc, out = _run(capsys, r, format="json", ignore=["HYB001,PRF", "consistency"], show_ignored=True)
    body = json.loads(out)
    assert rc == 0 and _codes(out) == set() and body["summary"]["ignored"] == 6
    assert {(f["code"], f["ignored"]) for f in body["files"][0]["ignored"]} >= {
        ("HYB001", "--ignore"),
        ("PRF002", "--ignore"),
        ("CON004", "--ignore"),
    }


def test_unknown_selectors_on_the_command_line_are_usage_errors(project, capsys):
    r = str(project / "recipes" / "r.yaml")
    for kw, text in (
        (dict(select=["HYX"]), "--select: unknown rule selector 'HYX'"),
        (dict(extend_select=["HYB01"]), "did you mean HYB001?"),
        (dict(ignore=["SCH002"]), "schema findings (SCH...) always apply"),
        (dict(severity=["PRF002"]), "expected CODE=error"),
        (dict(severity=["PRF02=error"]), "did you mean PRF002?"),
    ):
        with pytest.raises(RecipectlError) as e:
            validate([r], **kw)
        assert e.value.exit_code == 2 and text in e.value.message, kw


def test_the_command_line_exits_2_with_a_did_you_mean(project, recipectl_cli):
    p = recipectl_cli("validate", str(project / "recipes" / "r.yaml"), "--select", "HYB01")
    assert p.returncode == 2 and p.stdout == ""
    assert "unknown rule selector 'HYB01'" in p.stderr and "did you mean HYB001?" in p.stderr


def test_severity_overrides(project, capsys):
    r = project / "recipes" / "r.yaml"
    rc, out = _run(capsys, r, format="json", select=["HYB001"], severity=["HYB001=warning"])
    assert rc == 0 and {f["severity"] for f in json.loads(out)["files"][0]["findings"]} == {"warning"}
    rc, out = _run(capsys, r, format="json", select=["HYB001,PRF"], severity=["PRF=error", "HYB001=info"])
    sev = {f["code"]: f["severity"] for f in json.loads(out)["files"][0]["findings"]}
    assert rc == 1 and sev == {"HYB001": "info", "PRF002": "error"}


def test_pyproject_settings_are_found_above_the_recipe(project, capsys):
    r = project / "recipes" / "r.yaml"
    (project / "pyproject.toml").write_text(
        '[project]\nname = "x"\n\n[tool.recipectl]\nignore = ["HYB001", "CON"]\nseverity = { PRF002 = "error" }\n'
    )
    rc, out = _run(capsys, r, format="json", show_ignored=True)
    body = json.loads(out)
    assert rc == 1 and _codes(out) == {"PRF002"} and body["files"][0]["findings"][0]["severity"] == "error"
    assert {f["ignored"] for f in body["files"][0]["ignored"] if f["code"] == "HYB001"} == {
        f"ignore in {project / 'pyproject.toml'} [tool.recipectl]"
    }
    # --select replaces the file's select; --ignore adds to its ignore; --severity overrides it
    rc, out = _run(capsys, r, format="json", select=["HYB"], severity=["PRF002=warning"])
    assert rc == 0 and _codes(out) == set()
    rc, out = _run(capsys, r, format="json", severity=["PRF002=warning"])
    assert rc == 0 and _codes(out) == {"PRF002"}
    rc, out = _run(capsys, r, format="json", ignore=["PRF002"], show_ignored=True)
    assert rc == 0 and len(json.loads(out)["files"][0]["ignored"]) == 3 + 3


def test_recipectl_toml_is_nearer_and_comes_first(project, capsys):
    r = project / "recipes" / "r.yaml"
    (project / "pyproject.toml").write_text('[tool.recipectl]\nselect = ["PRF"]\n')
    (project / "recipes" / "pyproject.toml").write_text('[project]\nname = "no table: passed over"\n')
    rc, out = _run(capsys, r, format="json")
    assert _codes(out) == {"PRF002"}
    (project / "recipes" / "recipectl.toml").write_text('select = ["HYB"]\n')
    (project / "recipes" / "pyproject.toml").write_text('[tool.recipectl]\nselect = ["VER"]\n')
    rc, out = _run(capsys, r, format="json")
    assert _codes(out) == {"HYB001"}
    other = project / "elsewhere.toml"
    other.write_text('select = ["ALL"]\n')
    rc, out = _run(capsys, r, format="json", config=str(other))
    assert _codes(out) == {"CON004", "HYB001", "PRF002"}


@pytest.mark.parametrize(
    "text, message",
    [
        ('selct = ["HYB"]\n', "unknown key 'selct'"),
        ('select = ["HYX"]\n', "select: unknown rule selector 'HYX': no rule matches it; did you mean HYB?"),
        ('select = "HYB"\n', "select must be a list"),
        ('severity = { PRF002 = "loud" }\n', "expected CODE=error"),
        ("select = [\n", "not valid TOML"),
    ],
)
def test_a_wrong_config_file_is_a_usage_error(project, text, message):
    (project / "recipes" / "recipectl.toml").write_text(text)
    with pytest.raises(RecipectlError) as e:
        validate([str(project / "recipes" / "r.yaml")])
    assert e.value.exit_code == 2 and message in e.value.message and "recipectl.toml" in e.value.message


def test_recipe_ignore_entries_are_checked_and_counted(project, capsys):
    r = project / "recipes" / "r.yaml"
    text = r.read_text().replace(
        "ignore:\n", "ignore:\n  HYB01: conv state layout is handled by the image\n  PRF: tuned elsewhere\n", 1
    )
    r.write_text(text)
    rc, out = _run(capsys, r, format="json", show_ignored=True)
    body = json.loads(out)
    ops = [f for f in body["files"][0]["findings"] if f["code"] == "OPS006"]
    assert rc == 1 and _codes(out) == {"CON004", "HYB001", "OPS006"}  # the misspelt entry ignores nothing
    assert "did you mean HYB001?" in ops[0]["message"] and ops[0]["path"] == "ignore.HYB01"
    assert ops[0]["line"] == text.splitlines().index("  HYB01: conv state layout is handled by the image") + 1
    assert "HYB001: conv state layout is handled by the image" in ops[0]["fix"]
    reasons = {f["code"]: f["ignored"] for f in body["files"][0]["ignored"]}
    assert reasons["PRF002"] == "the recipe's ignore: tuned elsewhere"
    assert body["summary"]["ignored"] == len(body["files"][0]["ignored"]) == 4  # CAP001, OPS003 x2, PRF002
    assert body["summary"]["ignored_rules"] == 9  # CAP001, OPS003 and the seven PRF rules


def test_text_summary_counts_ignored_and_show_ignored_lists_them(project, capsys):
    r = project / "recipes" / "r.yaml"
    rc, out = _run(capsys, r, ignore=["PRF002"])
    assert rc == 1 and "PRF002 warning" not in out
    assert "2 error(s), 0 warning(s), 0 info, 3 rule(s) ignored\n" in out
    assert "; PRF002 (--ignore)" in out and "ignored: CAP001 (the recipe's ignore: the seed's sweep" in out
    assert "--show-ignored runs them and lists their findings" in out
    rc, out = _run(capsys, r, ignore=["PRF002"], show_ignored=True)
    assert "2 error(s), 0 warning(s), 0 info, 3 rule(s) ignored (4 finding(s))" in out
    assert "1 x PRF002 (--ignore)" in out and "2 x OPS003 (the recipe's ignore:" in out
    assert f"{r}: 4 ignored" in out and "PRF002 warning" in out and "    ignored by --ignore" in out
