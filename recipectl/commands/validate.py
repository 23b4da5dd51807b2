"""`recipectl validate`: check recipe files, print the findings, return the exit code."""

from __future__ import annotations

from . import echo


def validate(recipes: list[str], *, format: str = "text", strict: bool = False,
             select: list[str] | None = None, quiet: bool = False) -> int:
    """Exit 0: clean; 1: rule errors (or warnings with `strict`); 2: a file is invalid."""
    from ..diagnostics import Severity, format_reports_text, reports_to_json
    from ..validate import collect_files, exit_code_for, validate_file

    files = collect_files(recipes)
    reports = [validate_file(f, select=set(select) if select else None)[0] for f in files]
    if format == "json":
        echo(reports_to_json(reports))
    else:
        echo(format_reports_text(reports, min_severity=Severity.WARNING if quiet else Severity.INFO))
    return int(exit_code_for(reports, strict=strict))
