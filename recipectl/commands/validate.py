"""`recipectl validate`: check recipe files, print the findings, return the exit code."""

from __future__ import annotations

import sys

from . import echo


def validate(recipes: list[str], *, format: str = "text", strict: bool = False,
             select: list[str] | None = None, extend_select: list[str] | None = None,
             ignore: list[str] | None = None, severity: list[str] | None = None, show_ignored: bool = False,
             config: str | None = None, quiet: bool = False) -> int:
    """Exit 0: clean; 1: rule errors (or warnings with `strict`); 2: a file is invalid, or a
    selector, setting or config file is wrong (before any file is read)."""
    from ..diagnostics import Severity, format_reports_text, reports_to_json
    from ..lintconfig import check_command_line, forget, selection, settings_for
    from ..validate import collect_files, exit_code_for, validate_file

    check_command_line(select, extend_select, ignore, severity)
    forget()
    files = collect_files(recipes)
    reports = []
    for f in files:
        chosen = selection(settings_for(f, config), select=select, extend_select=extend_select, ignore=ignore,
                           severity=severity)
        reports.append(validate_file(f, selection=chosen)[0])
    if format == "json":
        echo(reports_to_json(reports))
    elif format == "sarif":
        from ..sarif import reports_to_sarif

        echo(reports_to_sarif(reports))
    elif format == "github":
        from ..diagnostics import format_reports_github

        sys.stdout.write(format_reports_github(reports))
    else:
        echo(format_reports_text(reports, min_severity=Severity.WARNING if quiet else Severity.INFO,
                                 show_ignored=show_ignored))
    return int(exit_code_for(reports, strict=strict))
