"""`recipectl validate`: collect recipe files, load, run rules, build reports."""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from .diagnostics import FileReport, Severity, format_reports_text
from .errors import ExitCode, RecipectlError
from .loader import LoadedRecipe, LoadResult, load_file
from .rules import check_recipe
from .rules.engine import run_rules

if TYPE_CHECKING:
    from .rules.selection import Selection


def collect_files(paths: list[str]) -> list[Path]:
    """Files named directly, and every *.yaml / *.yml under directories (sorted, recursive)."""
    out: list[Path] = []
    for raw in paths:
        p = Path(raw)
        if p.is_dir():
            found = sorted(_recipes_under(p))
            if not found:
                raise RecipectlError(
                    f"{raw}: no *.yaml recipes in this directory",
                    fix="name recipe files directly, or point at recipes/",
                )
            out.extend(found)
        else:
            out.append(p)
    return out


def _recipes_under(directory: Path) -> list[Path]:
    """The *.yaml / *.yml files under `directory`, symlinked directories not followed (as rglob
    did). A directory that vanishes or cannot be read while it is walked (/proc's processes come
    and go) is passed over; a file that vanishes before it is read is reported by the loader."""
    found = []
    for parent, _, names in os.walk(directory, onerror=lambda _: None):
        for name in names:
            path = Path(parent, name)
            if path.suffix in (".yaml", ".yml") and path.is_file():
                found.append(path)
    return found


def validate_file(
    path: Path, *, select: set[str] | None = None, selection: Selection | None = None, run_ignored: bool = False
) -> tuple[FileReport, list[LoadedRecipe]]:
    """Load a recipe file and run the selected rules on each of its recipes (`select`: only these
    codes or names; `selection`: a full selection, rules/selection.py; `run_ignored`: the ignored
    rules too, their findings kept apart)."""
    return report_for(load_file(path), select=select, selection=selection, run_ignored=run_ignored)


def report_for(
    result: LoadResult, *, select: set[str] | None = None, selection: Selection | None = None, run_ignored: bool = False
) -> tuple[FileReport, list[LoadedRecipe]]:
    report = FileReport(file=result.file, diagnostics=list(result.diagnostics), valid=result.ok)
    if result.recipes:
        names = {r.recipe.name for r in result.recipes}
        report.recipe_name = result.recipes[0].recipe.name if len(names) == 1 else f"{len(names)} variants"
    if report.valid:
        per_variant = [
            (loaded.variant, run_rules(loaded, select=select, selection=selection, run_ignored=run_ignored))
            for loaded in result.recipes
        ]
        report.diagnostics.extend(_merge_variants([(v, found) for v, (found, _, _) in per_variant]))
        report.ignored = _merge_variants([(v, ignored) for v, (_, ignored, _) in per_variant])
        report.ignored_rules = {code: why for _, (_, _, rules) in per_variant for code, why in rules.items()}
        report.ran_ignored = run_ignored
    return report, result.recipes


def _merge_variants(per_variant: list) -> list:
    """A finding every variant shares is reported once; one that only some variants have names them."""
    order: list = []
    where: dict = {}
    for variant, diags in per_variant:
        for d in diags:
            if d not in where:
                where[d] = []
                order.append(d)
            where[d].append(variant)
    out = []
    for d in order:
        variants = where[d]
        if len(per_variant) > 1 and len(variants) < len(per_variant):
            d = replace(d, message=f"{d.message} (in {', '.join(v or '?' for v in variants)})")
        out.append(d)
    return out


def exit_code_for(reports: list[FileReport], *, strict: bool) -> ExitCode:
    if any(not r.valid for r in reports):
        return ExitCode.INVALID
    if any(r.count(Severity.ERROR) for r in reports):
        return ExitCode.FINDINGS
    if strict and any(r.count(Severity.WARNING) for r in reports):
        return ExitCode.FINDINGS
    return ExitCode.OK


def load_one(path: str) -> LoadedRecipe:
    """Load a recipe for commands that act on one (render, launch, plan): invalid input is an error."""
    report, recipes = validate_file(Path(path))
    if not report.valid:
        raise RecipectlError(format_reports_text([report]).rstrip(), fix="recipectl validate " + path, reports=[report])
    if len(recipes) != 1:
        names = ", ".join(r.recipe.name for r in recipes)
        raise RecipectlError(
            f"{path} expands into {len(recipes)} recipes ({names})",
            fix="pick one with --variant NAME, or write it out with recipectl expand",
        )
    return recipes[0]


def refuse_rule_errors(loaded: LoadedRecipe, path: str) -> None:
    """Commands that start or write a deployment stop at a rule error: each one names a crash or
    a silent corruption, and finding it now costs nothing while the engine finds it minutes into
    start-up. A rule that does not apply is declared in the recipe's `ignore:` with a reason."""
    errors = [d for d in check_recipe(loaded) if d.severity is Severity.ERROR]
    if not errors:
        return
    report = FileReport(file=str(path), diagnostics=errors, valid=True, recipe_name=loaded.recipe.name)
    raise RecipectlError(
        f"the rules found {len(errors)} error(s); nothing was started or written\n"
        + format_reports_text([report]).rstrip(),
        fix="fix them, or declare a rule that does not apply: ignore: {CODE: reason}",
        exit_code=ExitCode.FINDINGS,
        reports=[report],
    )


def load_variant(path: str, variant: str | None, *, refuse_errors: bool = False) -> LoadedRecipe:
    if variant is None:
        loaded = load_one(path)
        if refuse_errors:
            refuse_rule_errors(loaded, path)
        return loaded
    report, recipes = validate_file(Path(path))
    if not report.valid:
        raise RecipectlError(format_reports_text([report]).rstrip(), reports=[report])
    # the whole name, or whole labels at its end: a bare suffix took prefill-endpoints-14 for "4"
    # (and a label's value may hold a dot: 0.9), and the first of several variants that end alike
    matches = [
        r
        for r in recipes
        if variant
        and (r.recipe.name == variant or any(".".join(r.labels[k:]) == variant for k in range(len(r.labels))))
    ]
    if len(matches) == 1:
        if refuse_errors:
            refuse_rule_errors(matches[0], path)
        return matches[0]
    if matches:
        raise RecipectlError(
            f"--variant {variant!r} names {len(matches)} variants of {path}",
            fix="name one: " + ", ".join(r.recipe.name for r in matches),
        )
    raise RecipectlError(
        f"no variant {variant!r} in {path}", fix="variants: " + ", ".join(r.recipe.name for r in recipes)
    )
