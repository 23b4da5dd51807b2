"""Which rules run, which findings are ignored, and at what severity: ruff's selection model.

A selector is a rule code (`HYB001`), a code prefix (`HYB`, `VER0`), `ALL`, a rule name
(`hybrid.ds-layout-missing`) or a family of names (`hybrid`). `select` (or, given, `--select`)
says which rules run, `extend-select` adds to it, `ignore` turns findings off: where a rule is
both selected and ignored, the more specific selector wins (`select = ["HYB"]` with
`ignore = ["HYB003"]` runs every HYB rule but HYB003; a tie is ignored). Ignored rules are
reported with the reason they were ignored (and, asked for, run, their findings kept apart). A
selector that names no rule is an error with a did-you-mean; schema findings (SCH...) always apply.

Rules are looked up in the registry when a selection is used, by which time the catalog has
registered every family.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass

from ..diagnostics import Severity
from .registry import REGISTRY, Rule

_CODE_PREFIX_RE = re.compile(r"^[A-Za-z]{1,3}\d{0,3}$")
_SCHEMA_RE = re.compile(r"^SCH\d{0,3}$", re.I)
_EXACT = 10  # a code or a full name: more specific than any prefix


class UnknownSelector(ValueError):
    """A selector that names no rule; `suggestion` is the nearest one, if any."""

    def __init__(self, selector: str, suggestion: str | None, why: str = "no rule matches it"):
        super().__init__(selector)
        self.selector = selector
        self.suggestion = suggestion
        self.why = why

    def describe(self) -> str:
        out = f"unknown rule selector {self.selector!r}: {self.why}"
        return out + (f"; did you mean {self.suggestion}?" if self.suggestion else "")


def specificity(selector: str, r: Rule) -> int:
    """How specifically `selector` names rule `r` (0: ALL), or -1 when it does not name it."""
    if selector == "ALL":
        return 0
    if selector == r.name or selector.upper() == r.code:
        return _EXACT
    if _CODE_PREFIX_RE.match(selector) and r.code.startswith(selector.upper()):
        return len(selector)
    if r.name.startswith(selector + "."):
        return 3  # a family of names, e.g. hybrid: as specific as its code prefix
    return -1


def matching(selector: str) -> list[Rule]:
    """The rules `selector` names; raises UnknownSelector (with a did-you-mean) when none."""
    if _SCHEMA_RE.match(selector):
        raise UnknownSelector(
            selector,
            None,
            "schema findings (SCH...) always apply: a recipe that does not "
            "match the schema cannot be checked by the rules",
        )
    found = [r for r in REGISTRY.values() if specificity(selector, r) >= 0]
    if not found:
        raise UnknownSelector(selector, suggest(selector))
    return found


def names_rule(selector: str) -> bool:
    """Whether `selector` names a rule (matching's test, without its did-you-mean)."""
    return not _SCHEMA_RE.match(selector) and any(specificity(selector, r) >= 0 for r in REGISTRY.values())


def suggest(selector: str) -> str | None:
    rules = list(REGISTRY.values())
    names = [r.name for r in rules] + sorted({r.name.split(".")[0] for r in rules})
    codes = [r.code for r in rules] + sorted({r.code[:3] for r in rules})
    pool = codes if _CODE_PREFIX_RE.match(selector) else names + codes
    close = difflib.get_close_matches(selector.upper() if pool is codes else selector, pool, n=1, cutoff=0.5)
    return close[0] if close else None


def split(values: list[str] | tuple[str, ...] | None) -> list[str]:
    """Selectors from repeated and comma-separated values: ["HYB,VER0", "PRF002"] -> 3 selectors."""
    return [s.strip() for v in values or () for s in v.split(",") if s.strip()]


@dataclass(frozen=True)
class Selection:
    """A resolved selection. `ignore` and `severity` pair each selector with its reason (where the
    setting came from) or its severity."""

    select: tuple[str, ...] = ("ALL",)
    extend_select: tuple[str, ...] = ()
    ignore: tuple[tuple[str, str], ...] = ()
    severity: tuple[tuple[str, Severity], ...] = ()

    def check(self) -> None:
        """Raise UnknownSelector for the first selector that names no rule."""
        for s in (*self.select, *self.extend_select, *(s for s, _ in self.ignore), *(s for s, _ in self.severity)):
            matching(s)

    def runs(self, r: Rule) -> bool:
        return max((specificity(s, r) for s in (*self.select, *self.extend_select)), default=-1) >= 0

    def ignored_by(self, r: Rule) -> str | None:
        """The reason `r`'s findings are ignored (the most specific ignore, when no select is more
        specific), or None."""
        chosen = max((specificity(s, r) for s in (*self.select, *self.extend_select)), default=-1)
        best, reason = -1, None
        for s, why in self.ignore:
            spec = specificity(s, r)
            if spec > best:
                best, reason = spec, why
        return reason if best >= 0 and best >= chosen else None

    def severity_of(self, r: Rule) -> Severity | None:
        """The severity a user set for `r` (the most specific setting; of equals, the last), or None."""
        best, sev = -1, None
        for s, level in self.severity:
            spec = specificity(s, r)
            if spec >= 0 and spec >= best:
                best, sev = spec, level
        return sev


def parse_severity(item: str) -> tuple[str, Severity]:
    """`CODE=warning` -> ("CODE", Severity.WARNING); ValueError on anything else."""
    selector, eq, level = item.partition("=")
    try:
        if not eq or not selector.strip():
            raise ValueError
        return selector.strip(), Severity(level.strip().lower())
    except ValueError:
        raise ValueError(f"severity {item!r}: expected CODE=error, CODE=warning or CODE=info") from None
