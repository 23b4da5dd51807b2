"""`recipectl fix` on odd files (tests/fix_corpus: comments in every place, tabs in comments, flow
style, anchors), each also with CRLF, mixed line endings, a UTF-8 BOM and no final newline: every
byte outside the edited lines is unchanged, the edited lines take their neighbours' line ending,
and the edit is the one the rule asks for."""

from __future__ import annotations

import difflib
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from recipectl.fix.fixer import fix_text
from recipectl.rules.selection import Selection

ROOT = Path(__file__).resolve().parent.parent
CORPUS = sorted((Path(__file__).parent / "fix_corpus").glob("*.yaml"))
BOM = "\ufeff"


def _crlf(text: str) -> str:
    return text.replace("\n", "\r\n")


def _mixed(text: str) -> str:
    return "".join(line.replace("\n", "\r\n") if i % 2 else line for i, line in enumerate(_lines(text)))


VARIANTS = {
    "lf": lambda t: t,
    "crlf": _crlf,
    "mixed": _mixed,
    "bom": lambda t: BOM + t,
    "bom-crlf": lambda t: BOM + _crlf(t),
    "no-final-newline": lambda t: t.rstrip("\n"),
    "crlf-no-final-newline": lambda t: _crlf(t.rstrip("\n")),
}


def _lines(text: str) -> list[str]:
    """Lines cut after each LF only, each with its own ending (a CRLF line keeps its CR)."""
    return re.findall(r"[^\n]*\n|[^\n]+$", text)


def _plain(line: str) -> str:
    return line.rstrip("\r\n")


def _fix(text: str):
    return fix_text(text, "odd.yaml", selection=Selection(select=("ALL",)))


def _hunks(old: str, new: str):
    a, b = _lines(old), _lines(new)
    return a, b, [op for op in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes() if op[0] != "equal"]


@pytest.mark.parametrize("variant", sorted(VARIANTS))
@pytest.mark.parametrize("path", CORPUS, ids=[p.name for p in CORPUS])
def test_fix_changes_only_the_edited_lines_byte_for_byte(path, variant):
    lf = path.read_text()
    expected = _fix(lf)
    assert expected.changed and [f.diagnostic.code for f in expected.fixed] == ["CON004"]
    _, _, lf_hunks = _hunks(lf, expected.new_text)
    assert len(lf_hunks) == 1  # one place edited

    old = VARIANTS[variant](lf)
    result = _fix(old)
    assert result.changed and not result.not_applied, result.not_applied
    new = result.new_text
    assert new.startswith(BOM) == old.startswith(BOM)
    a, b, hunks = _hunks(old, new)
    # the same lines replaced as in the LF file, every other line (its ending too) as it was
    assert len(hunks) == 1, hunks
    (_, i1, i2, j1, j2), (_, li1, li2, lj1, lj2) = hunks[0], lf_hunks[0]
    lf_a, lf_b = _lines(lf), _lines(expected.new_text)
    assert [_plain(x) for x in a[i1:i2]] == [_plain(x) for x in lf_a[li1:li2]]
    assert [_plain(x) for x in b[j1:j2]] == [_plain(x) for x in lf_b[lj1:lj2]]
    # a written line ends as the line it replaces, or the line it follows
    neighbour = a[i1] if i1 < i2 else a[i1 - 1]
    ending = neighbour[len(_plain(neighbour)) :] or ("\r\n" if "\r\n" in old else "\n")
    assert all(x.endswith(ending) and "\r" not in _plain(x) for x in b[j1:j2]), (b[j1:j2], ending)
    # and the edit is the rule's: decode gets the SSM dtype prefill states, nothing else changes
    before, after = yaml.safe_load(old.removeprefix(BOM)), yaml.safe_load(new.removeprefix(BOM))
    assert after["decode"].pop("mamba_ssm_cache_dtype") == "bfloat16"
    assert after == before


@pytest.mark.parametrize("variant", ["crlf", "mixed", "bom-crlf"])
def test_the_cli_writes_the_fixed_bytes_and_keeps_a_symlink(tmp_path, variant):
    lf = (Path(__file__).parent / "fix_corpus" / "comments-everywhere.yaml").read_text()
    old = VARIANTS[variant](lf)
    target = tmp_path / "real.yaml"
    target.write_bytes(old.encode())
    os.chmod(target, 0o640)
    link = tmp_path / "recipe.yaml"
    link.symlink_to(target.name)
    r = subprocess.run(
        [sys.executable, "-m", "recipectl", "fix", str(link)], capture_output=True, text=True, cwd=ROOT, timeout=120
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert link.is_symlink() and os.readlink(link) == target.name
    assert target.read_bytes() == _fix(old).new_text.encode() != old.encode()
    assert os.stat(target).st_mode & 0o777 == 0o640
    assert sorted(p.name for p in tmp_path.iterdir()) == ["real.yaml", "recipe.yaml"]  # no temporary left
