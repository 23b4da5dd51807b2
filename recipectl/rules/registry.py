"""The rule registry: one place where every rule is declared, with its stable code.

A rule is a pure function of the recipe (and the facts derived from it) that *yields*
Violations; the registry attaches code, severity, category and source. Its docstring is its
documentation page (`recipectl explain CODE`, docs/rules.md) and must have the sections
What it checks / Why / Example / Fix: a rule without a docstring fails at import, one that lacks a
section fails tests/test_registry.py.
"""

from __future__ import annotations

import inspect
import re
import textwrap
from dataclasses import dataclass
from enum import Enum
from functools import cached_property
from typing import TYPE_CHECKING, Any, Callable, Iterator

from ..diagnostics import Category, Severity

if TYPE_CHECKING:
    from .context import RuleContext

SECTIONS = ("What it checks", "Why", "Example", "Fix")

# Severity follows evidence. A rule's default severity is `error` only for these categories; a
# rule whose evidence depends on the version, host or model lowers a finding to a warning where
# it cannot be proven (Violation.severity).
ERROR_CATEGORIES = frozenset({Category.CRASH, Category.SILENT_CORRUPTION, Category.REFUSED, Category.SECURITY})
SEVERITY_POLICY = (
    "Severity follows evidence. `error`: the engine, at the declared version, refuses the command line "
    "or the requests, crashes, or corrupts results — or a credential would be written into rendered "
    "files, run state or `ps`. `warning`: deprecated but working settings, costs in speed or capacity, "
    "and anything that cannot be proven here (an unknown vLLM version: the finding says what to "
    "declare, `engine.vllm_version` or `patches`, and does not block `render` or `launch`). `info`: "
    "advice. Each rule's scope (roles, versions, platforms) is its source's, cited on its page."
)
_CODE_RE = re.compile(r"^[A-Z]{3}\d{3}$")


@dataclass(frozen=True)
class Violation:
    """What a rule yields: the field it concerns, the message and the fix."""

    path: str  # dotted field path the finding points at
    message: str  # what is wrong, in this recipe's terms
    fix: str  # what to write instead (YAML where possible)
    severity: Severity | None = None  # overrides the rule's default (e.g. info on the CPU platform)


CheckFn = Callable[["RuleContext"], Iterator[Violation]]


class Applicability(str, Enum):
    """Whether `recipectl fix` applies a rule's fix, as in ruff: `safe` fixes do what the finding
    asks and nothing else, and there is one way to do it; `unsafe` ones change what the deployment
    does beyond the finding (memory, numerics, a feature turned off, one of several ways) and are
    applied only with `--unsafe-fixes`."""

    SAFE = "safe"
    UNSAFE = "unsafe"
    NONE = "none"


@dataclass(frozen=True)
class Edit:
    """One change to a recipe document: the value at a dotted key path (created, with the mappings
    above it, where absent), or the key removed."""

    path: str  # dotted, as a Violation's path: decode.env.VLLM_SSM_CONV_STATE_LAYOUT
    value: Any = None
    remove: bool = False

    def to_json(self) -> dict[str, Any]:
        return {"path": self.path, "remove": True} if self.remove else {"path": self.path, "value": self.value}


FixFn = Callable[["RuleContext", Violation], "tuple[Edit, ...]"]


@dataclass(frozen=True)
class Fix:
    """A rule's mechanical fix: a pure function of the recipe and one finding that gives the edits
    (none where this finding has no mechanical fix, e.g. a value set in extra_args), how safe it
    is, and when it applies, in words (docs/rules.md)."""

    edits: FixFn
    applicability: Applicability
    when: str


def safe(edits: FixFn, when: str) -> Fix:
    return Fix(edits, Applicability.SAFE, when)


def unsafe(edits: FixFn, when: str) -> Fix:
    return Fix(edits, Applicability.UNSAFE, when)


def set_field(value: Any, *, remove: bool = False) -> FixFn:
    """The fix that writes `value` at the finding's path (or removes the key), where that path is a
    typed field of the recipe; a finding that points into extra_args gets no edit."""

    def edits(ctx: RuleContext, v: Violation) -> tuple[Edit, ...]:
        if ".extra_args" in f".{v.path}":
            return ()
        return (Edit(v.path, None, remove=True),) if remove else (Edit(v.path, value),)

    return edits


@dataclass(frozen=True)
class Rule:
    """A registered rule: its code, severity, category, when it applies, and the check itself."""

    code: str
    name: str  # dotted readable name, e.g. hybrid.ds-layout
    title: str
    severity: Severity
    category: Category
    applies: str  # when it applies, in words
    source: str  # the seed, a vLLM PR or issue, a file and symbol of vLLM's code
    check: CheckFn
    fix: Fix | None = None  # what `recipectl fix` may do about a finding

    @property
    def fixable(self) -> Applicability:
        return self.fix.applicability if self.fix else Applicability.NONE

    @cached_property
    def doc(self) -> dict[str, str]:
        """The documentation page's sections, parsed from the check's docstring when first asked
        for (`validate` never asks); tests/test_registry.py parses every rule's."""
        return _parse_doc(self.code, self.check.__doc__ or "")


REGISTRY: dict[str, Rule] = {}


def _parse_doc(code: str, text: str) -> dict[str, str]:
    text = inspect.cleandoc(text)
    parts = re.split(r"^(What it checks|Why|Example|Fix):\s*$", text, flags=re.M)
    doc: dict[str, str] = {}
    for head, body in zip(parts[1::2], parts[2::2], strict=True):
        doc[head] = textwrap.dedent(body.strip("\n")).strip()
    missing = [s for s in SECTIONS if not doc.get(s)]
    if missing:
        raise TypeError(f"rule {code} docstring lacks section(s): {', '.join(missing)}")
    return doc


def rule(
    *,
    code: str,
    name: str,
    title: str,
    severity: Severity,
    category: Category,
    applies: str,
    source: str,
    fix: Fix | None = None,
) -> Callable[[CheckFn], CheckFn]:
    """Register a rule (with its fix, declared next to it: `fix=safe(...)` or `fix=unsafe(...)`);
    refuses malformed codes, duplicates and undocumented rules."""

    def deco(fn: CheckFn) -> CheckFn:
        if not _CODE_RE.match(code):
            raise TypeError(f"rule code {code!r} must look like HYB001")
        if code in REGISTRY:
            raise TypeError(f"rule code {code} registered twice")
        if any(r.name == name for r in REGISTRY.values()):
            raise TypeError(f"rule name {name} registered twice")
        if not fn.__doc__:
            raise TypeError(f"rule {code} has no docstring")
        if severity is Severity.ERROR and category not in ERROR_CATEGORIES:
            raise TypeError(
                f"rule {code} is an error in category {category.value}: errors are for "
                + ", ".join(sorted(c.value for c in ERROR_CATEGORIES))
            )
        REGISTRY[code] = Rule(code, name, title, severity, category, applies, source, fn, fix)
        return fn

    return deco
