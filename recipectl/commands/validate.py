"""`recipectl validate`: check recipe files, print the findings, return the exit code."""

from __future__ import annotations

import sys
from pathlib import Path

from ..errors import RecipectlError
from . import echo


def validate(recipes: list[str], *, format: str = "text", strict: bool = False,
             select: list[str] | None = None, extend_select: list[str] | None = None,
             ignore: list[str] | None = None, severity: list[str] | None = None, show_ignored: bool = False,
             config: str | None = None, stdin_filename: str | None = None, quiet: bool = False) -> int:
    """Exit 0: clean; 1: rule errors (or warnings with `strict`); 2: a file is invalid, or a
    selector, setting or config file is wrong (before any file is read). `-` reads one recipe from
    standard input, named `stdin_filename` in the findings (and its settings found from there)."""
    from ..diagnostics import Severity, format_reports_text, reports_to_json
    from ..lintconfig import check_command_line, forget, selection, settings_for
    from ..validate import collect_files, exit_code_for, report_for, validate_file

    check_command_line(select, extend_select, ignore, severity)
    if recipes.count("-") > 1:
        raise RecipectlError("- (standard input) is named more than once", fix="name it once")
    forget()
    reports = []
    for raw in recipes:
        targets: list[Path | None] = [None] if raw == "-" else list(collect_files([raw]))
        for f in targets:
            named = f if f is not None else (Path(stdin_filename) if stdin_filename else None)
            chosen = selection(settings_for(named, config), select=select, extend_select=extend_select,
                               ignore=ignore, severity=severity)
            if f is not None:
                reports.append(validate_file(f, selection=chosen, run_ignored=show_ignored)[0])
                continue
            from ..loader import load_stream

            result = load_stream(sys.stdin.buffer, stdin_filename or "-",
                                 base_dir=named.parent if named is not None else Path.cwd())
            reports.append(report_for(result, selection=chosen, run_ignored=show_ignored)[0])
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
