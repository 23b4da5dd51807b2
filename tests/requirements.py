"""The one place that decides what a missing component means: a skip or a failure.

A test that needs something this host may lack (the CPU engine, Slurm, shellcheck, the Kubernetes
schemas) calls :func:`require` (or :func:`require_engine`). The component is *required* - its
absence fails the test, with the install command - when

- the environment variable ``CI`` is true-ish (``true``, ``1``, ``yes``, ``on``; any case), or
- pytest runs with ``--require-all`` (tests/conftest.py adds the option and calls :func:`configure`).

Otherwise the test is skipped, and the skip says how to install what is missing. ``CI=false``,
``CI=0`` and an empty ``CI`` are not CI.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
TRUE = frozenset({"true", "1", "yes", "on"})
FALSE = frozenset({"false", "0", "no", "off", ""})

_require_all_option = False  # set once, from --require-all, by pytest_configure


def configure(require_all: bool) -> None:
    global _require_all_option
    _require_all_option = require_all


def ci_is_set(environ: Mapping[str, str] | None = None) -> bool:
    """Whether ``CI`` says this is a CI run. A value neither true-ish nor false-ish is an error:
    a typo must not quietly turn the failures into skips."""
    raw = (os.environ if environ is None else environ).get("CI", "").strip().lower()
    if raw in TRUE:
        return True
    if raw in FALSE:
        return False
    raise pytest.UsageError(f"CI={raw!r}: expected one of {sorted(TRUE)} or {sorted(FALSE - {''})}")


def required(environ: Mapping[str, str] | None = None, require_all: bool | None = None) -> bool:
    """Whether a missing component fails (True) or skips (False)."""
    return (_require_all_option if require_all is None else require_all) or ci_is_set(environ)


def require(available: bool, what: str, install: str) -> None:
    """Nothing when ``available``; else fail (required) or skip, naming ``install``."""
    if available:
        return
    if required():
        pytest.fail(f"{what} is required (CI or --require-all) and missing: {install}", pytrace=False)
    pytest.skip(f"{what} is missing: {install} (under CI or --require-all this test fails instead)")


# -------------------------------------------------------------------------------- the engine

ENGINE_DISTS = ("vllm", "nixl", "vllm_router")  # dist-info names (normalized: '-' -> '_')
ENGINE_INSTALL = "bash scripts/install-engine.sh (or set RECIPECTL_ENGINE_VENV)"


def engine_missing(venv: Path) -> list[str]:
    """What the engine's virtual environment lacks: its python, or the distributions vllm, nixl
    and vllm-router (a ``*.dist-info`` in its site-packages). Empty when it is complete."""
    py = venv / "bin" / "python"
    if not py.exists():
        return [f"{py} (no engine virtual environment)"]
    sites = list(venv.glob("lib/python*/site-packages"))
    if not sites:
        return [f"{venv}/lib/python*/site-packages"]
    missing = []
    for dist in ENGINE_DISTS:
        if not any(any(site.glob(f"{dist}-*.dist-info")) for site in sites):
            missing.append(dist.replace("_", "-"))
    return missing


def require_engine() -> None:
    """The real CPU engine (vllm, nixl, vllm-router in its own venv), or skip / fail."""
    from recipectl.engine_env import engine_venv

    venv = engine_venv()
    missing = engine_missing(venv)
    require(not missing, f"the CPU engine at {venv} (missing: {', '.join(missing)})", ENGINE_INSTALL)


SLURM_INSTALL = "sudo bash scripts/install-slurm.sh"
SHELLCHECK_INSTALL = "apt-get install shellcheck"
PIP_TEST_EXTRA = "pip install -e '.[test]'"
