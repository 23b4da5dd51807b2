"""Run the selected rules on a loaded recipe and turn Violations into Diagnostics."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Iterator

from ..diagnostics import Diagnostic, Severity
from ..loader import LoadedRecipe
from .catalog import all_rules
from .context import RuleContext
from .registry import Edit, Rule, Violation
from .selection import Selection, names_rule, specificity


def check_recipe(
    loaded: LoadedRecipe, *, select: set[str] | None = None, selection: Selection | None = None
) -> list[Diagnostic]:
    """The findings that are not ignored (`select`: only these codes or names)."""
    return run_rules(loaded, select=select, selection=selection)[0]


def run_rules(
    loaded: LoadedRecipe,
    *,
    select: set[str] | None = None,
    selection: Selection | None = None,
    run_ignored: bool = False,
) -> tuple[list[Diagnostic], list[Diagnostic], dict[str, str]]:
    """(findings, ignored findings, ignored rules): the selected rules run, but for those the
    recipe's `ignore:` or the selection's ignore turns off, which are returned as {code: reason};
    with `run_ignored` they run too, and their findings are returned apart, each with `ignored`
    set to the reason. (Not running them by default keeps `validate` fast: CAP001, which recipes
    ignore on purpose, runs the capacity planner.) An `ignore:` entry that names no rule is
    OPS006's finding, and ignores nothing."""
    out: list[Diagnostic] = []
    ignored: list[Diagnostic] = []
    ignored_rules: dict[str, str] = {}
    for finding in findings(
        loaded, select=select, selection=selection, run_ignored=run_ignored, ignored_rules=ignored_rules
    ):
        if finding.ignored is None:
            out.append(finding.diagnostic)
        else:
            ignored.append(replace(finding.diagnostic, ignored=finding.ignored))
    return out, ignored, ignored_rules


@dataclass(frozen=True)
class Finding:
    """One finding with what made it: the rule, its Violation, and the context (for its fix)."""

    rule: Rule
    violation: Violation
    diagnostic: Diagnostic
    ctx: RuleContext
    ignored: str | None = None

    def edits(self) -> tuple[Edit, ...]:
        """The rule's fix for this finding: its edits (none where the rule has no fix for it)."""
        return self.rule.fix.edits(self.ctx, self.violation) if self.rule.fix else ()


def findings(
    loaded: LoadedRecipe,
    *,
    select: set[str] | None = None,
    selection: Selection | None = None,
    run_ignored: bool = False,
    ignored_rules: dict[str, str] | None = None,
) -> Iterator[Finding]:
    """Each finding of the selected rules (run_rules' findings and, with `run_ignored`, the ignored
    ones), with its rule; the rules turned off are recorded in `ignored_rules` as {code: reason}."""
    if selection is None:
        selection = Selection(select=tuple(sorted(select))) if select else Selection()
    ctx = RuleContext(loaded.recipe, Path(loaded.source.file).parent if loaded.source.file else None)
    in_recipe = []
    for key, reason in loaded.recipe.ignore.items():
        if names_rule(key):  # one that names none is OPS006's finding
            in_recipe.append((key, reason))
    for r in all_rules():
        if not selection.runs(r):
            continue
        why = _recipe_reason(in_recipe, r) or selection.ignored_by(r)
        if why is not None:
            if ignored_rules is not None:
                ignored_rules[r.code] = why
            if not run_ignored:
                continue
        severity = selection.severity_of(r)
        for v in r.check(ctx):
            d = loaded.diagnostic(
                path=v.path,
                code=r.code,
                severity=severity or v.severity or r.severity,
                message=v.message,
                fix=v.fix,
                category=r.category,
                source=r.source,
            )
            yield Finding(r, v, d, ctx, why)


def _recipe_reason(entries: list[tuple[str, str]], r: Rule) -> str | None:
    best = max(entries, key=lambda e: specificity(e[0], r), default=None)
    if best is None or specificity(best[0], r) < 0:
        return None
    return f"the recipe's ignore: {best[1]}" if best[1] else "the recipe's ignore:"


def worst(diags: list[Diagnostic]) -> Severity | None:
    return min((d.severity for d in diags), key=lambda s: s.rank, default=None)
