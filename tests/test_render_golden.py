"""Golden files: what `recipectl render` writes for the seed's deployment, byte for byte.

tests/golden/cases.tsv lists the cases (DIR TARGET RECIPE VARIANT); tests/golden/DIR/TARGET/ holds
the files the CLI writes with `-o`. A change in the rendered output fails here with a unified diff;
when the change is intended, regenerate with scripts/update-golden.sh and review the diff.
"""

from __future__ import annotations

import difflib
import os
import stat
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
GOLDEN = ROOT / "tests" / "golden"
UPDATE = "scripts/update-golden.sh"


@dataclass(frozen=True)
class Case:
    dir: str
    target: str
    recipe: str
    variant: str | None

    @property
    def id(self) -> str:
        return f"{self.dir}-{self.target}"

    @property
    def golden_dir(self) -> Path:
        return GOLDEN / self.dir / self.target

    def cli_args(self, out: Path) -> list[str]:
        args = ["render", self.recipe, "--target", self.target, "-o", str(out)]
        return args + (["--variant", self.variant] if self.variant else [])


def load_cases() -> list[Case]:
    cases = []
    for line in (GOLDEN / "cases.tsv").read_text().splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        d, target, recipe, variant = line.split("\t")
        cases.append(Case(d, target, recipe, None if variant == "-" else variant))
    return cases


CASES = load_cases()


def render_case(case: Case) -> dict[str, tuple[str, bool]]:
    """name -> (text, executable), rendered in-process exactly as the CLI does."""
    from recipectl.render.processes import build_deployment
    from recipectl.render.targets import render
    from recipectl.validate import load_variant

    files = render(build_deployment(load_variant(str(ROOT / case.recipe), case.variant).recipe), case.target)
    return {f.name: (f.text, f.executable) for f in files}


def _mismatch(case: Case, name: str, expected: str, actual: str) -> str:
    diff = "".join(
        difflib.unified_diff(
            expected.splitlines(keepends=True),
            actual.splitlines(keepends=True),
            fromfile=f"tests/golden/{case.dir}/{case.target}/{name} (golden)",
            tofile=f"{name} (rendered now)",
            n=2,
        )
    )
    if not diff:  # same lines: the difference is in line endings or the last newline
        diff = f"(same lines; bytes differ: golden ends {expected[-20:]!r}, rendered ends {actual[-20:]!r})\n"
    return diff


def _update_hint() -> str:
    return f"\nIf this change is intended, regenerate the golden files and review the diff:\n    {UPDATE}\n"


def test_cases_file_lists_the_seed_deployment_on_every_target():
    ids = {c.id for c in CASES}
    assert {"gb200-bash", "gb200-slurm", "gb200-k8s", "h200-bash"} <= ids
    gb200 = [c for c in CASES if c.dir == "gb200"]
    assert {c.variant for c in gb200} == {"prefill-endpoints-4"}


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_rendering_matches_golden_files(case: Case):
    assert case.golden_dir.is_dir(), f"no golden files for {case.id}; run {UPDATE}"
    rendered = render_case(case)
    golden = {p.name: p for p in case.golden_dir.iterdir() if p.is_file()}
    problems = []
    for name in sorted(set(golden) - set(rendered)):
        problems.append(f"golden file {name} is no longer rendered\n")
    for name in sorted(set(rendered) - set(golden)):
        problems.append(f"rendered file {name} has no golden file\n")
    for name in sorted(set(golden) & set(rendered)):
        expected = golden[name].read_bytes().decode()
        actual, _ = rendered[name]
        if expected != actual:
            problems.append(_mismatch(case, name, expected, actual))
    if problems:
        pytest.fail(
            f"rendered output of {case.id} differs from tests/golden/{case.dir}/{case.target}:\n\n"
            + "\n".join(problems)
            + _update_hint(),
            pytrace=False,
        )


def test_golden_tree_has_no_stale_cases():
    known = {(c.dir, c.target) for c in CASES}
    found = {(p.parent.name, p.name) for p in GOLDEN.glob("*/*") if p.is_dir()}
    assert found - known == set(), f"golden directories not in cases.tsv (remove them or run {UPDATE})"
    assert known - found == set(), f"cases without golden files: run {UPDATE}"


def test_cli_writes_exactly_the_golden_files(tmp_path):
    """The real CLI (`python -m recipectl render ... -o DIR`), as scripts/update-golden.sh runs it:
    same file names, same bytes, scripts executable."""
    for case in CASES:
        out = tmp_path / case.id
        r = subprocess.run(
            [sys.executable, "-m", "recipectl", *case.cli_args(out)],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert r.returncode == 0, r.stderr
        written = sorted(p.name for p in out.iterdir())
        assert written == sorted(p.name for p in case.golden_dir.iterdir()), case.id
        for name in written:
            actual = (out / name).read_bytes()
            expected = (case.golden_dir / name).read_bytes()
            if actual != expected:
                pytest.fail(_mismatch(case, name, expected.decode(), actual.decode()) + _update_hint(), pytrace=False)
            if case.target in ("bash", "slurm"):
                assert (out / name).stat().st_mode & stat.S_IXUSR, f"{name} is not executable"


def test_golden_files_hold_no_secret_value():
    """scripts/update-golden.sh renders with HF_TOKEN set to a canary; only the reference is kept."""
    for p in GOLDEN.rglob("*"):
        if p.is_file():
            assert "golden-canary" not in p.read_text(), p
            if os.environ.get("HF_TOKEN"):
                assert os.environ["HF_TOKEN"] not in p.read_text(), p
