"""`recipectl validate`: check recipe files, print the findings, return the exit code."""

# No `from __future__ import annotations`: Typer reads the parameters' annotations when the
# command is loaded, and strings it would evaluate one by one, on every run.

import sys
from pathlib import Path
from typing import Annotated

import typer

from ..diagnostics import Severity, format_reports_github, format_reports_text, reports_to_json
from ..errors import RecipectlError
from ..lintconfig import check_command_line, forget, selection, settings_for
from ..loader import load_stream
from ..sarif import reports_to_sarif
from ..validate import collect_files, exit_code_for, report_for, validate_file
from . import complete, echo
from .options import Config, ExtendSelect, ReportFormat, Select, ignore_option


def validate(
    recipes: Annotated[
        list[str],
        typer.Argument(
            help="recipe files or directories; - reads one recipe from standard input",
            autocompletion=complete.recipe_files,
        ),
    ],
    format: Annotated[
        ReportFormat,
        typer.Option("--format", "-f", help="text, json, sarif (SARIF 2.1.0) or github (workflow annotations)"),
    ] = "text",
    strict: Annotated[bool, typer.Option("--strict", help="warnings fail too (exit 1)")] = False,
    select: Select = None,
    extend_select: ExtendSelect = None,
    ignore: Annotated[list[str] | None, ignore_option("turn these rules off (the summary names them)")] = None,
    severity: Annotated[
        list[str] | None,
        typer.Option(
            "--severity",
            metavar="CODE=LEVEL",
            autocompletion=complete.severity_overrides,
            help="report a rule at another severity: CODE=error|warning|info",
        ),
    ] = None,
    show_ignored: Annotated[
        bool,
        typer.Option(
            "--show-ignored", help="run the ignored rules too and list their findings, with the reason each was ignored"
        ),
    ] = False,
    config: Config = None,
    stdin_filename: Annotated[
        str | None,
        typer.Option(
            "--stdin-filename",
            metavar="PATH",
            help="the name of the recipe read from standard input (-), in messages and for finding the configuration",
        ),
    ] = None,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="text: errors and warnings only")] = False,
) -> int:
    """Exit 0: clean; 1: rule errors (or warnings with `strict`); 2: a file is invalid, or a
    selector, setting or config file is wrong (before any file is read). `-` reads one recipe from
    standard input, named `stdin_filename` in the findings (and its settings found from there)."""
    check_command_line(select, extend_select, ignore, severity)
    if recipes.count("-") > 1:
        raise RecipectlError("- (standard input) is named more than once", fix="name it once")
    forget()
    reports = []
    for raw in recipes:
        targets: list[Path | None] = [None] if raw == "-" else list(collect_files([raw]))
        for f in targets:
            named = f if f is not None else (Path(stdin_filename) if stdin_filename else None)
            chosen = selection(
                settings_for(named, config),
                select=select,
                extend_select=extend_select,
                ignore=ignore,
                severity=severity,
            )
            if f is not None:
                reports.append(validate_file(f, selection=chosen, run_ignored=show_ignored)[0])
                continue
            result = load_stream(
                sys.stdin.buffer, stdin_filename or "-", base_dir=named.parent if named is not None else Path.cwd()
            )
            reports.append(report_for(result, selection=chosen, run_ignored=show_ignored)[0])
    if format == "json":
        echo(reports_to_json(reports))
    elif format == "sarif":
        echo(reports_to_sarif(reports))
    elif format == "github":
        sys.stdout.write(format_reports_github(reports))
    else:
        echo(
            format_reports_text(
                reports, min_severity=Severity.WARNING if quiet else Severity.INFO, show_ignored=show_ignored
            )
        )
    return int(exit_code_for(reports, strict=strict))
