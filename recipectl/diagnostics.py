"""What is wrong, and the fix: one problem type, and its kinds.

`Problem` (code, message, fix, source, location) is what every part of recipectl says when
something is wrong: a `Diagnostic` (a finding of the schema or a rule, at a place in a recipe
file, with a severity), a `CheckResult` (one of doctor's checks, with a `Status`), a `Diagnosis`
(why a process died, read from its log) and launch's preflight (a `Problem` itself). Credentials
are redacted from every one of them when it is made.

Findings' text reads like a compiler's: ``recipe.yaml:14:5 HYB001 error: message`` and then the
fix. The JSON shape is documented in docs/json-output.md and kept stable (``schema_version``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from enum import Enum
from typing import Iterable

from .secretscan import redact_text


class Severity(str, Enum):
    ERROR = "error"
    WARNING = "warning"
    INFO = "info"

    @property
    def rank(self) -> int:
        return {"error": 0, "warning": 1, "info": 2}[self.value]


class Category(str, Enum):
    CRASH = "crash"
    SILENT_CORRUPTION = "silent-corruption"
    REFUSED = "refused"  # the engine rejects the command line or the requests
    SECURITY = "security"  # a credential written into rendered files, run state or `ps`
    PERFORMANCE = "performance"
    CAPACITY = "capacity"
    OPERABILITY = "operability"
    SCHEMA = "schema"


class Status(str, Enum):
    """A doctor check's verdict."""

    PASS = "pass"
    WARN = "warn"
    FAIL = "fail"
    SKIP = "skip"


@dataclass(frozen=True, kw_only=True)
class Problem:
    """What is wrong, and the fix: the shape every kind of problem shares."""

    code: str  # stable: a rule's HYB001, a check's endpoints.health, a diagnosis' log.port-in-use
    message: str
    fix: str | None = None
    source: str | None = None  # where the knowledge comes from: a vLLM PR, a file and symbol, a log

    def __post_init__(self) -> None:
        # every presentation (text, JSON, SARIF, annotations, launch's and doctor's reports) prints
        # these: a message that quotes a value never carries a credential out
        for name in ("message", "fix"):
            text = getattr(self, name)
            if text:
                object.__setattr__(self, name, redact_text(text))

    @property
    def location(self) -> str:
        """Where it is: a file and line, a check's group and name ("" where nothing narrower
        than the deployment)."""
        return ""


@dataclass(frozen=True, kw_only=True)
class Diagnostic(Problem):
    """One finding, from the schema or a rule, at a place in a recipe file."""

    severity: Severity
    path: str = ""  # dotted field path in the recipe, e.g. "decode.env.VLLM_SSM_CONV_STATE_LAYOUT"
    file: str = ""
    line: int | None = None
    col: int | None = None
    category: Category | None = None
    ignored: str | None = None  # why this finding was ignored (the recipe's ignore:, --ignore, a config file)

    def __post_init__(self) -> None:
        super().__post_init__()
        # an ignore's reason is printed too, and the path: a recipe's key may be credential-shaped
        for name in ("ignored", "path"):
            text = getattr(self, name)
            if text:
                object.__setattr__(self, name, redact_text(text))

    @property
    def location(self) -> str:
        where = self.file or "<recipe>"
        if self.line is not None:
            where += f":{self.line}:{self.col or 1}"
        return where

    def to_json(self) -> dict:
        out = {
            "code": self.code,
            "severity": self.severity.value,
            "message": self.message,
            "fix": self.fix,
            "path": self.path,
            "file": self.file,
            "line": self.line,
            "col": self.col,
            "category": self.category.value if self.category else None,
            "source": self.source,
        }
        if self.ignored is not None:
            out["ignored"] = self.ignored
        return out


@dataclass(frozen=True, kw_only=True)
class CheckResult(Problem):
    """What one of doctor's checks found: its verdict, what it saw (`message`) and the fix."""

    status: Status
    group: str = ""
    name: str = ""  # the check's name with what it was run on: "health decode http://127.0.0.1:8200"
    seconds: float = 0.0
    data: dict = field(default_factory=dict)

    @property
    def location(self) -> str:
        return f"{self.group}: {self.name}"

    def to_json(self) -> dict:
        """docs/json-output.md: `{group, name, status, detail, fix, seconds, data}`."""
        return {
            "group": self.group,
            "name": self.name,
            "status": self.status.value,
            "detail": self.message,
            "fix": self.fix or "",
            "seconds": self.seconds,
            "data": self.data,
        }


@dataclass(frozen=True, kw_only=True)
class Diagnosis(Problem):
    """Why a process died (or never became ready), recognised in its log, and the fix."""

    final: bool = False  # a retry cannot cure it: launch stops at once

    @property
    def cause(self) -> str:
        return self.message


@dataclass
class FileReport:
    """What validating one file found: its findings, and whether it matched the schema."""

    file: str
    diagnostics: list[Diagnostic] = field(default_factory=list)
    valid: bool = True  # False when the file could not be read or does not match the schema
    recipe_name: str | None = None
    ignored_rules: dict[str, str] = field(default_factory=dict)  # rules turned off for this file -> why
    ignored: list[Diagnostic] = field(default_factory=list)  # their findings, when they were run (ran_ignored)
    ran_ignored: bool = False

    def count(self, severity: Severity) -> int:
        return sum(1 for d in self.diagnostics if d.severity is severity)


JSON_SCHEMA_VERSION = 1


def reports_to_json(reports: Iterable[FileReport]) -> str:
    return json.dumps(_reports_body(list(reports)), indent=2)


def error_to_json(message: str, fix: str | None, exit_code: int, reports: Iterable[FileReport] = ()) -> str:
    """A command's failure under `--format json`: validate's document (the recipe's findings, where
    the failure is those) with `error`, the message and fix printed on stderr and the exit code."""
    error = {"message": redact_text(message), "fix": redact_text(fix) if fix else None, "exit_code": exit_code}
    body = _reports_body(list(reports))
    return json.dumps({"schema_version": body.pop("schema_version"), "error": error, **body}, indent=2)


def _reports_body(reports: list[FileReport]) -> dict:
    body = {
        "schema_version": JSON_SCHEMA_VERSION,
        "files": [
            {
                "file": r.file,
                "recipe": r.recipe_name,
                "valid": r.valid,
                "findings": [d.to_json() for d in sorted_diagnostics(r.diagnostics)],
                "ignored_rules": [
                    {"code": c, "reason": redact_text(why)} for c, why in sorted(r.ignored_rules.items())
                ],
                "ignored": [d.to_json() for d in sorted_diagnostics(r.ignored)] if r.ran_ignored else None,
            }
            for r in reports
        ],
        "summary": {
            "files": len(reports),
            "invalid_files": sum(1 for r in reports if not r.valid),
            "errors": sum(r.count(Severity.ERROR) for r in reports),
            "warnings": sum(r.count(Severity.WARNING) for r in reports),
            "infos": sum(r.count(Severity.INFO) for r in reports),
            "ignored_rules": sum(len(r.ignored_rules) for r in reports),
            "ignored": sum(len(r.ignored) for r in reports) if all(r.ran_ignored for r in reports) else None,
        },
    }
    return body


def sorted_diagnostics(diags: Iterable[Diagnostic]) -> list[Diagnostic]:
    return sorted(diags, key=lambda d: (d.severity.rank, d.line or 0, d.col or 0, d.code))


def format_diagnostic(d: Diagnostic) -> str:
    """One finding, compiler style; the fix indented under it."""
    head = f"{d.location} {d.code} {d.severity.value}: {d.message}"
    if d.path:
        head += f" [{d.path}]"
    lines = [head]
    if d.fix:
        fix_lines = d.fix.strip("\n").splitlines()
        lines.append(f"    fix: {fix_lines[0]}")
        lines.extend(f"         {ln}" for ln in fix_lines[1:])
    if d.source:
        lines.append(f"    see: {d.source}")
    return "\n".join(lines)


def format_reports_text(
    reports: Iterable[FileReport], *, min_severity: Severity = Severity.INFO, show_ignored: bool = False
) -> str:
    """Human format: per file, findings grouped by severity (errors first), then a summary line;
    what was ignored is counted by rule and reason (`show_ignored`: listed under each file)."""
    reports = list(reports)
    out: list[str] = []
    for r in reports:
        shown = [d for d in sorted_diagnostics(r.diagnostics) if d.severity.rank <= min_severity.rank]
        ignored = sorted_diagnostics(r.ignored) if show_ignored else []
        if not shown and not ignored:
            out.append(f"{r.file}: ok" + (f" ({r.recipe_name})" if r.recipe_name else ""))
            continue
        for sev in Severity:
            group = [d for d in shown if d.severity is sev]
            if group:
                out.append(f"{r.file}: {len(group)} {sev.value}{'s' if len(group) != 1 else ''}")
                out.extend(format_diagnostic(d) for d in group)
        if ignored:
            out.append(f"{r.file}: {len(ignored)} ignored")
            out.extend(f"{format_diagnostic(d)}\n    ignored by {d.ignored}" for d in ignored)
        out.append("")
    e = sum(r.count(Severity.ERROR) for r in reports)
    w = sum(r.count(Severity.WARNING) for r in reports)
    i = sum(r.count(Severity.INFO) for r in reports)
    bad = sum(1 for r in reports if not r.valid)
    summary = f"{len(reports)} file(s): {e} error(s), {w} warning(s), {i} info"
    if bad:
        summary += f", {bad} invalid"
    ignored_rules = sum(len(r.ignored_rules) for r in reports)
    if ignored_rules:
        summary += f", {ignored_rules} rule(s) ignored"
        if show_ignored:
            summary += f" ({sum(len(r.ignored) for r in reports)} finding(s))"
    out.append(summary)
    if ignored_rules:
        out.append(_ignored_summary(reports, listed=show_ignored))
    return "\n".join(out).rstrip() + "\n"


def _ignored_summary(reports: list[FileReport], *, listed: bool) -> str:
    """`ignored: CAP001 (the recipe's ignore: ...); PRF002 in 2 files (--ignore)`: by rule and
    reason; with `listed`, how many findings each had."""
    files: dict[tuple[str, str], int] = {}
    found: dict[tuple[str, str], int] = {}
    for r in reports:
        for code, why in r.ignored_rules.items():
            why = redact_text(why)  # as each ignored finding's reason is
            files[(code, why)] = files.get((code, why), 0) + 1
        for d in r.ignored:
            found[(d.code, d.ignored or "")] = found.get((d.code, d.ignored or ""), 0) + 1
    parts = []
    for (code, why), n in sorted(files.items()):
        count = f"{found.get((code, why), 0)} x " if listed else ""
        parts.append(f"{count}{code}{f' in {n} files' if n > 1 else ''} ({why})")
    return "ignored: " + "; ".join(parts) + ("" if listed else " — --show-ignored runs them and lists their findings")


_GITHUB_LEVELS = {"error": "error", "warning": "warning", "info": "notice"}


def _github_escape(text: str, *, prop: bool = False) -> str:
    """GitHub's workflow-command escaping: % CR LF in the message; also : and , in a property."""
    text = text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")
    return text.replace(":", "%3A").replace(",", "%2C") if prop else text


def format_reports_github(reports: Iterable[FileReport]) -> str:
    """GitHub Actions workflow commands, one annotation per finding (ignored ones left out):
    ``::error file=recipe.yaml,line=14,col=5,title=HYB001::message`` with the fix beneath."""
    out = []
    for r in reports:
        for d in sorted_diagnostics(r.diagnostics):
            props = [f"file={_github_escape(d.file or r.file, prop=True)}"]
            if d.line is not None:
                props += [f"line={d.line}", f"col={d.col or 1}"]
            props.append(f"title={_github_escape(d.code, prop=True)}")
            message = d.message + (f" [{d.path}]" if d.path else "") + (f"\nfix: {d.fix.strip()}" if d.fix else "")
            out.append(f"::{_GITHUB_LEVELS[d.severity.value]} {','.join(props)}::{_github_escape(message)}")
    return "\n".join(out) + "\n" if out else ""
