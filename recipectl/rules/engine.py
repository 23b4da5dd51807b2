"""Run every registered rule on a loaded recipe and turn Violations into Diagnostics."""

from __future__ import annotations

from pathlib import Path

from ..diagnostics import Diagnostic, Severity
from ..loader import LoadedRecipe
from .catalog import all_rules
from .context import RuleContext


def check_recipe(loaded: LoadedRecipe, *, select: set[str] | None = None) -> list[Diagnostic]:
    ctx = RuleContext(loaded.recipe, Path(loaded.source.file).parent if loaded.source.file else None)
    ignored = loaded.recipe.ignore
    out: list[Diagnostic] = []
    for r in all_rules():
        if select and r.code not in select and r.name not in select:
            continue
        if r.code in ignored:
            continue
        for v in r.check(ctx):
            msg = v.message
            out.append(loaded.diagnostic(path=v.path, code=r.code, severity=v.severity or r.severity,
                                         message=msg, fix=v.fix, category=r.category, source=r.source))
    return out


def worst(diags: list[Diagnostic]) -> Severity | None:
    return min((d.severity for d in diags), key=lambda s: s.rank, default=None)
