"""`recipectl fix` on one file: run the rules, apply their fixes, run them again.

Each pass runs the selected rules on every variant of the recipe, takes the edits of the findings
whose fix may be applied (safe ones; unsafe ones too with `unsafe`), and writes them into the
text (fix/document.py). The file is read again and the rules rerun, until a pass has nothing
more to do. Only recipectl's own recipes are edited: a file in another tool's format is
refused (`recipectl import` writes it as a recipe, which can then be fixed).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..diagnostics import Category, Diagnostic, FileReport, Severity
from ..formats import NATIVE, sniff
from ..loader import LoadResult, load_file, load_text
from ..rules.engine import Finding, findings
from ..rules.registry import Applicability, Edit
from ..rules.selection import Selection
from ..validate import report_for
from ..yamlsource import read_recipe_text
from .document import Document, Unfixable

MAX_PASSES = 4  # a fix may let another apply (rarely more than two passes are needed)


@dataclass(frozen=True)
class Fixed:
    """A finding that the fixes removed, where it stood before, and the edits that removed it."""

    diagnostic: Diagnostic
    applicability: Applicability
    edits: tuple[Edit, ...]

    def to_json(self) -> dict[str, Any]:
        return {
            **self.diagnostic.to_json(),
            "applicability": self.applicability.value,
            "edits": [e.to_json() for e in self.edits],
        }


@dataclass
class FileFix:
    """What fixing one file did: its text before and after, what was fixed, what remains."""

    file: str
    report: FileReport  # the findings that remain (of the fixed text); not valid: nothing was fixed
    text: str = ""
    new_text: str = ""
    fixed: list[Fixed] = field(default_factory=list)
    unsafe_available: list[Diagnostic] = field(default_factory=list)  # with --unsafe-fixes, these too
    not_applied: list[str] = field(default_factory=list)  # fixes that could not be written, and why

    @property
    def changed(self) -> bool:
        return self.new_text != self.text


def fix_file(path: Path, *, selection: Selection, unsafe: bool = False) -> FileFix:
    try:
        text = read_recipe_text(path)
    except (OSError, ValueError):
        result = load_file(path)  # words the problem as validate does
        return FileFix(str(path), report_for(result)[0])
    return fix_text(text, str(path), selection=selection, unsafe=unsafe, base_dir=path.parent)


def fix_text(
    text: str, file: str, *, selection: Selection, unsafe: bool = False, base_dir: Path | None = None
) -> FileFix:
    fmt = sniff(text)
    if fmt != NATIVE:
        refusal = Diagnostic(
            code="FIX001",
            severity=Severity.ERROR,
            category=Category.SCHEMA,
            file=file,
            line=1,
            col=1,
            message=f"a file in the {fmt} format: recipectl fix edits recipectl recipes only",
            fix=f"recipectl import {file} -o RECIPE.yaml, then recipectl fix RECIPE.yaml",
        )
        return FileFix(file, FileReport(file=file, diagnostics=[refusal], valid=False), text, text)
    out = FileFix(file, FileReport(file=file), text, text)
    result = load_text(text, file, base_dir=base_dir)
    for _ in range(MAX_PASSES):
        if not result.ok:
            break
        allowed = (Applicability.SAFE, Applicability.UNSAFE) if unsafe else (Applicability.SAFE,)
        found = [f for f in _findings(result, selection) if f.rule.fixable in allowed and f.edits()]
        if not found:
            break
        try:
            doc = Document(out.new_text)
            chosen = _chosen(found, doc, out=out)
            if not chosen:
                break
            for e in dict.fromkeys(e for _, edits in chosen for e in edits):
                doc.apply(e)
            new_text = doc.text_after()
        except Unfixable as e:
            out.not_applied.append(str(e))
            break
        if new_text == out.new_text:
            break
        after = load_text(new_text, file, base_dir=base_dir)
        if not after.ok:  # a fix must never make a recipe invalid; keep the last good text
            out.not_applied.append("the fixes would make the recipe invalid: " + after.diagnostics[0].message)
            break
        remaining = {_key(f.diagnostic) for f in _findings(after, selection)}
        out.fixed += [
            Fixed(f.diagnostic, f.rule.fixable, edits) for f, edits in chosen if _key(f.diagnostic) not in remaining
        ]
        out.new_text, result = new_text, after
    out.not_applied = list(dict.fromkeys(out.not_applied))
    out.report = report_for(result, selection=selection)[0]
    if result.ok:
        out.unsafe_available = _dedupe(
            [
                f.diagnostic
                for f in _findings(result, selection)
                if f.rule.fixable is Applicability.UNSAFE and not unsafe and f.edits()
            ]
        )
    return out


def _findings(result: LoadResult, selection: Selection) -> list[Finding]:
    """Every variant's findings, each once."""
    seen: set[tuple[str, str]] = set()
    out = []
    for loaded in result.recipes:
        for f in findings(loaded, selection=selection):
            if _key(f.diagnostic) not in seen:
                seen.add(_key(f.diagnostic))
                out.append(f)
    return out


def _key(d: Diagnostic) -> tuple[str, str]:
    return d.code, d.path


def _chosen(found: list[Finding], doc: Document, *, out: FileFix) -> list[tuple[Finding, tuple[Edit, ...]]]:
    """The findings to fix in this pass and their edits: safe fixes first, then unsafe ones; an
    edit that contradicts one chosen before it waits for the next pass, and one that touches a
    field the recipe's matrix sets is not made (each variant sets its own value)."""
    matrix = doc.matrix_keys
    planned: dict[str, object] = {}
    chosen = []
    for f in sorted(found, key=lambda f: (f.rule.fixable is not Applicability.SAFE, f.rule.code)):
        edits = f.edits()
        clash = next((e.path for e in edits if any(_overlaps(e.path, m) for m in matrix)), None)
        if clash is not None:
            out.not_applied.append(f"{f.rule.code} at {clash}: the recipe's matrix sets this field per variant")
            continue
        if any(e.path in planned and planned[e.path] != e.value for e in edits):
            continue
        try:
            for e in edits:
                doc.check(e)
        except Unfixable as e:
            out.not_applied.append(f"{f.rule.code}: {e}")
            continue
        planned.update((e.path, e.value) for e in edits)
        chosen.append((f, edits))
    return chosen


def _overlaps(path: str, other: str) -> bool:
    return path == other or path.startswith(other + ".") or other.startswith(path + ".")


def _dedupe(diags: list[Diagnostic]) -> list[Diagnostic]:
    return list(dict.fromkeys(diags))
