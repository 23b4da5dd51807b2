import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = Path(__file__).resolve().parent / "fixtures"


@pytest.fixture
def recipectl_cli():
    """Run the real console entry point in a subprocess: what a user runs."""
    import subprocess

    def run(*args: str, input: str | None = None, env: dict | None = None, timeout: float = 120):
        full_env = {**os.environ, **(env or {})}
        return subprocess.run([sys.executable, "-m", "recipectl", *args], capture_output=True, text=True,
                              input=input, env=full_env, timeout=timeout, cwd=ROOT)

    return run
