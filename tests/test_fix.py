"""`recipectl fix`: every rule that declares a fix removes its finding and changes nothing else;
--diff writes nothing; unsafe fixes wait for --unsafe-fixes; recipes that need no fix, and fixed
ones, are left alone; other tools' formats and bad input are refused without a traceback."""

from __future__ import annotations

import difflib
import json
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from recipectl.fix.fixer import fix_text
from recipectl.loader import load_text
from recipectl.rules import all_rules, check_recipe
from recipectl.rules.registry import Applicability
from recipectl.rules.selection import Selection

from .recipe_text import edited
from .test_rule_cases import CASES, recipe_text

ROOT = Path(__file__).resolve().parent.parent
CPU_RECIPE = ROOT / "recipes" / "local" / "tiny-hybrid-cpu.yaml"
SHIPPED = sorted((ROOT / "recipes").rglob("*.yaml"))
FIELD = sorted(p for p in (ROOT / "tests" / "field").rglob("*") if p.is_file())
FIXABLE = [r for r in all_rules() if r.fix is not None]


def with_comments(text: str) -> str:
    """A rule case's recipe with a comment above every top-level key and after every scalar line."""
    out = ["# a recipe under test"]
    for i, line in enumerate(text.splitlines()):
        if re.match(r"^[a-z_]+:", line):
            out.append(f"# about {line.split(':')[0]}")
        if re.match(r"^\s*[A-Za-z_0-9]+: [^'\"{\[|>&*!#]\S*$", line):
            line += f"  # note {i}"
        out.append(line)
    return "\n".join(out) + "\n"


def changed_lines(before: str, after: str) -> tuple[list[str], list[str]]:
    """(the lines of `before` that are gone or replaced, the lines `after` has instead)."""
    a, b = before.splitlines(), after.splitlines()
    gone, new = [], []
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes():
        if tag != "equal":
            gone += a[i1:i2]
            new += b[j1:j2]
    return gone, new


def replaced_keys(gone: list[str]) -> list[str]:
    """The gone lines less those nested under another gone line (a block value replaced whole)."""
    out: list[str] = []
    for line in gone:
        indent = len(line) - len(line.lstrip())
        if out and indent > len(out[-1]) - len(out[-1].lstrip()):
            continue
        out.append(line)
    return out


def comments(text: str) -> list[str]:
    return re.findall(r"#.*", text)


def fixed(text: str, *, select: tuple[str, ...] = ("ALL",), unsafe: bool = False):
    return fix_text(text, "case.yaml", selection=Selection(select=select), unsafe=unsafe)


@pytest.mark.parametrize("rule", FIXABLE, ids=[r.code for r in FIXABLE])
def test_each_fix_removes_its_finding_and_nothing_else(rule):
    cases = [c for c in CASES if c["rule"] == rule.code and c["expect"]]
    assert cases, f"{rule.code} declares a fix and has no triggering case in tests/rule_cases"
    unsafe = rule.fixable is Applicability.UNSAFE
    applied = 0
    for case in cases:
        text = with_comments(recipe_text(case))
        result = fixed(text, select=(rule.code,), unsafe=unsafe)
        assert result.not_applied == [], (case["name"], result.not_applied)
        if not result.changed:  # a finding without a mechanical fix (e.g. set in extra_args)
            assert not result.fixed, case["name"]
            continue
        applied += 1
        (loaded,) = load_text(result.new_text, "case.yaml").recipes
        assert check_recipe(loaded, select={rule.code}) == [], (case["name"], result.new_text)
        assert {f.diagnostic.code for f in result.fixed} == {rule.code}
        gone, _ = changed_lines(text, result.new_text)
        edits = sum(len(f.edits) for f in result.fixed)
        # an edit replaces at most the line it changes (and the lines of the block value it replaces)
        assert len(replaced_keys(gone)) <= edits, (case["name"], gone)
        # every comment stays but those of the lines replaced
        lost = Counter(comments(text)) - Counter(comments(result.new_text))
        assert not lost - Counter(comments("\n".join(gone))), (case["name"], lost)
        if not unsafe:
            continue
        # not applied without --unsafe-fixes, and offered instead
        plain = fixed(text, select=(rule.code,))
        assert not plain.changed and plain.fixed == [], case["name"]
        assert {d.code for d in plain.unsafe_available} == {rule.code}
    assert applied, f"{rule.code}: no case was fixed"


def test_fixes_are_declared_in_the_registry_and_documented():
    from recipectl.ruledocs import rules_markdown

    doc = rules_markdown()
    for r in all_rules():
        assert r.fixable in Applicability
        assert f"| {r.fixable.value} | {r.title} |" in doc
    assert {r.code for r in FIXABLE if r.fixable is Applicability.SAFE} >= {"HYB001", "CON003", "CON004"}


@pytest.mark.parametrize("path", SHIPPED + FIELD, ids=lambda p: str(p.relative_to(ROOT)))
@pytest.mark.parametrize("unsafe", [False, True], ids=["safe", "unsafe"])
def test_shipped_and_field_recipes(path, unsafe):
    """Idempotent everywhere; a recipe without findings is untouched; the shipped recipes need no
    safe fix; the field corpus (other tools' formats) is refused and left alone."""
    text = path.read_text()
    first = fix_text(text, str(path), selection=Selection(), unsafe=unsafe, base_dir=path.parent)
    if path in FIELD:
        assert not first.changed and not first.report.valid
        assert [d.code for d in first.report.diagnostics] == ["FIX001"]
        return
    assert first.report.valid and first.not_applied == []
    loaded = load_text(text, str(path), base_dir=path.parent).recipes
    if not any(check_recipe(r) for r in loaded) or not unsafe:
        assert first.new_text == text, "".join(
            difflib.unified_diff(text.splitlines(True), first.new_text.splitlines(True))
        )
    second = fix_text(first.new_text, str(path), selection=Selection(), unsafe=unsafe, base_dir=path.parent)
    assert second.new_text == first.new_text and second.fixed == []


def test_lines_ruamel_would_reformat_are_kept():
    """The CPU recipe's router list spans two lines, which ruamel writes as one: a fix elsewhere
    leaves it, and every other line, as it was."""
    text = edited(
        CPU_RECIPE.read_text(), ("  cpu_cores: ['1']\n  mamba_ssm_cache_dtype: bfloat16\n", "  cpu_cores: ['1']\n")
    )
    result = fixed(text)
    assert [f.diagnostic.code for f in result.fixed] == ["CON004"]
    gone, new = changed_lines(text, result.new_text)
    assert gone == [] and new == ["  mamba_ssm_cache_dtype: bfloat16"]
    assert '               --health-success-threshold, "1"' in result.new_text


DECODE_END = "  enforce_eager: true\n  env:\n    VLLM_SSM_CONV_STATE_LAYOUT: DS\n\nkv_transfer:"  # the CPU recipe's


@pytest.mark.parametrize(
    "between",
    ["\n", "\n# ---- the KV transfer ----\n", "  # decode's last word\n\n# ---- the KV transfer ----\n"],
    ids=["a blank line", "a blank line and a section comment", "a comment, a blank line and a section comment"],
)
def test_an_inserted_block_goes_after_the_roles_last_key_and_before_what_follows_it(between):
    """HYB001's fix adds `env:` and its variable to decode, whose last key is followed by blank
    lines and comments about the next section: they stay below the new block, as they were."""
    text = edited(CPU_RECIPE.read_text(), (DECODE_END, "  enforce_eager: true\n" + between + "kv_transfer:"))
    result = fixed(text, select=("HYB001",))
    assert [f.diagnostic.code for f in result.fixed] == ["HYB001"]
    expected = edited(
        text,
        (
            "  enforce_eager: true\n" + between,
            "  enforce_eager: true\n  env:\n    VLLM_SSM_CONV_STATE_LAYOUT: DS\n" + between,
        ),
    )
    assert result.new_text == expected, "".join(
        difflib.unified_diff(expected.splitlines(True), result.new_text.splitlines(True))
    )


def test_anchors_and_matrix_fields_are_not_edited():
    base = CPU_RECIPE.read_text()
    anchored = edited(
        base,
        ("prefill:\n  port: 8100", "prefill: &role\n  port: 8100"),
        ("    VLLM_SSM_CONV_STATE_LAYOUT: DS # vLLM's", "    VLLM_SSM_CONV_STATE_LAYOUT: SD # vLLM's"),
    )
    result = fixed(anchored)
    assert not result.changed and "anchor" in result.not_applied[0]
    matrix = base + "matrix:\n  decode.kv_role: [kv_both, kv_consumer]\n"
    result = fixed(matrix)
    assert not result.changed and "matrix" in result.not_applied[0]


def _cli(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "recipectl", *args], capture_output=True, text=True, cwd=cwd, timeout=120
    )


@pytest.fixture
def broken(tmp_path) -> Path:
    """The CPU recipe with HYB002 (SD on prefill, a safe fix) and HYB007 (float16 SSM: unsafe)."""
    p = tmp_path / "broken.yaml"
    p.write_text(
        edited(
            CPU_RECIPE.read_text(),
            ("    VLLM_SSM_CONV_STATE_LAYOUT: DS # vLLM's", "    VLLM_SSM_CONV_STATE_LAYOUT: SD # vLLM's"),
            ("  cpu_cores: ['0']", "  cpu_cores: ['0']\n  kv_role: kv_both   # was copied from a doc"),
        )
    )
    return p


def test_cli_diff_changes_nothing(broken):
    before = broken.read_text()
    r = _cli("fix", "--diff", str(broken))
    assert r.returncode == 1 and broken.read_text() == before
    assert f"--- {broken}" in r.stdout
    assert "-    VLLM_SSM_CONV_STATE_LAYOUT: SD # vLLM's" in r.stdout
    assert "+    VLLM_SSM_CONV_STATE_LAYOUT: DS # vLLM's" in r.stdout
    assert "+  kv_role: kv_producer" in r.stdout and "would fix 2 finding(s)" in r.stderr


def test_cli_fix_writes_then_has_nothing_to_do(broken):
    r = _cli("fix", str(broken))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "HYB002 fixed (safe)" in r.stdout and "CON003 fixed (safe)" in r.stdout
    text = broken.read_text()
    assert "VLLM_SSM_CONV_STATE_LAYOUT: DS # vLLM's CPU platform" in text
    assert "kv_role: kv_producer # was copied" in text
    assert _cli("validate", str(broken)).returncode == 0
    again = _cli("fix", str(broken), "--diff")
    assert again.returncode == 0 and again.stdout == "" and broken.read_text() == text


def test_cli_unsafe_fixes_and_json(tmp_path):
    p = tmp_path / "r.yaml"
    p.write_text(edited(CPU_RECIPE.read_text(), ("  port: 8200\n", "  port: 8200\n  api_server_count: 2\n")))
    before = p.read_text()
    r = _cli("fix", "-f", "json", str(p))
    body = json.loads(r.stdout)
    assert r.returncode == 0 and p.read_text() == before  # PRF006 is info: nothing fails
    assert body["summary"]["unsafe_fixes_available"] == 1 and body["files"][0]["fixed"] == []
    assert body["files"][0]["unsafe_fixes_available"][0]["code"] == "PRF006"
    r = _cli("fix", "--unsafe-fixes", "--format", "json", str(p))
    body = json.loads(r.stdout)
    (done,) = body["files"][0]["fixed"]
    assert done["code"] == "PRF006" and done["applicability"] == "unsafe"
    assert done["edits"] == [{"path": "decode.api_server_count", "value": 1}]
    assert "api_server_count: 1" in p.read_text() and body["files"][0]["written"] is True


def test_cli_select_and_ignore(broken):
    before = broken.read_text()
    r = _cli("fix", "--diff", "--select", "CON003", str(broken))
    assert "kv_producer" in r.stdout and "SD" not in r.stdout
    r = _cli("fix", "--ignore", "HYB002,CON003", str(broken))
    assert r.returncode == 0 and broken.read_text() == before


@pytest.mark.parametrize(
    "name", ["srt-slurm/known-bad-decode-without-ds-layout.yaml", "vllm-serve/known-bad-sd-conv-layout.sh"]
)
def test_cli_refuses_other_formats(tmp_path, name):
    src = ROOT / "tests" / "field" / name
    p = tmp_path / src.name
    p.write_text(src.read_text())
    r = _cli("fix", str(p))
    assert r.returncode == 2 and p.read_text() == src.read_text()
    assert f"{p}:1:1 FIX001 error" in r.stdout and "recipectl import" in r.stdout


def test_cli_bad_input_and_usage(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("version: 1\nname: x\nmodel:\n  path: [unclosed\ncluster: {gpu: CPU}\n")
    for args in (["fix", str(bad)], ["fix", "--diff", str(bad)]):
        r = _cli(*args)
        assert r.returncode == 2 and "Traceback" not in r.stdout + r.stderr
        assert re.search(rf"{re.escape(str(bad))}:\d+:\d+ SCH000 error", r.stdout + r.stderr)
    assert bad.read_text().startswith("version: 1\nname: x\n")
    for args in (["fix", "--select", "NOPE1", str(CPU_RECIPE)], ["fix", "-"], ["fix", str(tmp_path / "none.yaml")]):
        r = _cli(*args)
        assert r.returncode == 2 and "Traceback" not in r.stderr, args


def test_fast_path_and_typer_agree(broken):
    """entry.py's parser and the Typer app run `fix` alike (the options are declared once)."""
    args = ["fix", "--diff", "--select", "HYB", "-q", str(broken)]
    fast = _cli(*args)
    full = subprocess.run(
        [sys.executable, "-m", "recipectl.cli", *args], capture_output=True, text=True, cwd=ROOT, timeout=120
    )
    assert (fast.returncode, fast.stdout, fast.stderr) == (full.returncode, full.stdout, full.stderr)
