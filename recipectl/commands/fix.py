"""`recipectl fix`: apply the rules' fixes to recipe files, print what was fixed and what remains."""

from __future__ import annotations

import difflib
import json
import os
import sys
from typing import Annotated, Literal

import typer

from ..diagnostics import JSON_SCHEMA_VERSION, Severity, format_reports_text, sorted_diagnostics
from ..errors import ExitCode, RecipectlError
from ..fileio import write_atomic
from ..fix.fixer import fix_file
from ..lintconfig import check_command_line, forget, selection, settings_for
from ..validate import collect_files, exit_code_for
from . import complete, echo
from .options import Config, ExtendSelect, Select, ignore_option


def fix(
    recipes: Annotated[
        list[str],
        typer.Argument(
            help="recipe files or directories (recipectl's own recipes; other formats are refused)",
            autocompletion=complete.recipe_files,
        ),
    ],
    diff: Annotated[bool, typer.Option("--diff", help="print a unified diff of the fixes and change no file")] = False,
    unsafe_fixes: Annotated[
        bool,
        typer.Option(
            "--unsafe-fixes",
            help="also apply the fixes that change more than the finding (memory, numerics, a "
            "feature turned off); docs/rules.md says which",
        ),
    ] = False,
    format: Annotated[
        Literal["text", "json"], typer.Option("--format", "-f", help="text or json (what was fixed, what remains)")
    ] = "text",
    strict: Annotated[bool, typer.Option("--strict", help="remaining warnings fail too (exit 1)")] = False,
    select: Select = None,
    extend_select: ExtendSelect = None,
    ignore: Annotated[list[str] | None, ignore_option("turn these rules off: neither fixed nor reported")] = None,
    config: Config = None,
    quiet: Annotated[
        bool, typer.Option("--quiet", "-q", help="text: the summary and remaining errors and warnings only")
    ] = False,
) -> int:
    """Exit 0: nothing remains that `validate` fails on (errors; warnings too with `strict`); 1:
    something does, or with `diff` a fix would change a file; 2: a file is invalid or not a
    recipectl recipe, or a selector, setting or config file is wrong (before any file is read)."""
    check_command_line(select, extend_select, ignore, None)
    if "-" in recipes:
        raise RecipectlError(
            "fix edits files; - (standard input) is not one",
            fix="name the recipe file, or see the fixes with recipectl validate -",
        )
    forget()
    results = []
    for f in collect_files(recipes):
        chosen = selection(settings_for(f, config), select=select, extend_select=extend_select, ignore=ignore)
        result = fix_file(f, selection=chosen, unsafe=unsafe_fixes)
        if result.changed and not diff:
            _write(f, result.new_text)
        results.append(result)
    if format == "json":
        echo(_json(results, diff=diff))
    elif diff:
        sys.stdout.write("".join(_diff(r) for r in results))
        invalid = [r.report for r in results if not r.report.valid]
        if invalid:
            sys.stderr.write(format_reports_text(invalid).rstrip() + "\n")
        sys.stderr.write(_summary(results, diff=True) + "\n")
    else:
        _text(results, quiet=quiet)
    code = exit_code_for([r.report for r in results], strict=strict)
    if diff and code is ExitCode.OK and any(r.changed for r in results):
        code = ExitCode.FINDINGS
    return int(code)


def _write(path, text: str) -> None:
    """The fixed text over the recipe in one rename (a kill or a full disk leaves the old file);
    a recipe that is a symlink keeps its link: the file it points to is the one replaced. A file
    the user may not write is left alone: the rename would replace it all the same (it needs only
    the directory), where writing in place was refused."""
    target = os.path.realpath(path)
    if not os.access(target, os.W_OK):
        raise RecipectlError(
            f"{path}: cannot write the fixed recipe: the file is read-only; the file is unchanged",
            fix="make the file writable (chmod u+w), or see the fixes with --diff",
        )
    try:
        write_atomic(target, text)
    except OSError as e:
        raise RecipectlError(
            f"{path}: cannot write the fixed recipe: {(e.strerror or type(e).__name__).lower()}; the file is unchanged",
            fix="make the file and its directory writable",
        ) from None


def _diff(r) -> str:
    return "".join(
        difflib.unified_diff(
            r.text.splitlines(keepends=True), r.new_text.splitlines(keepends=True), fromfile=r.file, tofile=r.file
        )
    )


def _text(results: list, *, quiet: bool) -> None:
    if not quiet:
        for r in results:
            for f in sorted(r.fixed, key=lambda f: (f.diagnostic.line or 0, f.diagnostic.col or 0)):
                d = f.diagnostic
                echo(f"{d.location} {d.code} fixed ({f.applicability.value}): {d.message} [{d.path}]")
            for why in r.not_applied:
                echo(f"{r.file}: a fix was not applied: {why}")
    remaining = [r.report for r in results if r.report.diagnostics or not r.report.valid]
    if remaining:
        echo(format_reports_text(remaining, min_severity=Severity.WARNING if quiet else Severity.INFO).rstrip())
    echo(_summary(results, diff=False))


def _summary(results: list, *, diff: bool) -> str:
    fixed = sum(len(r.fixed) for r in results)
    files = sum(1 for r in results if r.changed)
    hidden = sum(len(r.unsafe_available) for r in results)
    left = sum(len(r.report.diagnostics) for r in results if r.report.valid)
    line = f"{'would fix' if diff else 'fixed'} {fixed} finding(s) in {files} of {len(results)} file(s); {left} remain"
    if hidden:
        line += f"; {hidden} more fixable with --unsafe-fixes"
    return line


def _json(results: list, *, diff: bool) -> str:
    files = [
        {
            "file": r.file,
            "valid": r.report.valid,
            "changed": r.changed,
            "written": r.changed and not diff,
            "fixed": [f.to_json() for f in r.fixed],
            "remaining": [d.to_json() for d in sorted_diagnostics(r.report.diagnostics)],
            "unsafe_fixes_available": [d.to_json() for d in sorted_diagnostics(r.unsafe_available)],
            "not_applied": r.not_applied,
            "diff": _diff(r) if diff else None,
        }
        for r in results
    ]
    summary = {
        "files": len(results),
        "changed_files": sum(1 for r in results if r.changed),
        "invalid_files": sum(1 for r in results if not r.report.valid),
        "fixed": sum(len(r.fixed) for r in results),
        "remaining": sum(len(r.report.diagnostics) for r in results if r.report.valid),
        "unsafe_fixes_available": sum(len(r.unsafe_available) for r in results),
    }
    return json.dumps({"schema_version": JSON_SCHEMA_VERSION, "files": files, "summary": summary}, indent=2)
