"""Shared by the real-engine tests: find the engine, or skip (locally) / fail (in CI)."""

from __future__ import annotations

import os

import pytest

from recipectl.engine_env import engine_venv


def require_engine() -> None:
    py = engine_venv() / "bin" / "python"
    if not py.exists():
        msg = f"the CPU engine is not installed at {py.parent.parent}: run scripts/install-engine.sh"
        if os.environ.get("CI"):
            pytest.fail(msg)
        pytest.skip(msg)
