"""The validate path imports no engine, torch, httpx or Jinja2 (the CLI must start fast).
Timing itself is measured by benchmarks/validate_startup.py, not asserted here."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_validate_imports_nothing_heavy():
    code = ("import sys, runpy; sys.argv=['recipectl','validate','recipes/gb200/qwen3.5-397b-nvfp4-pd.yaml'];\n"
            "try:\n    runpy.run_module('recipectl', run_name='__main__')\nexcept SystemExit:\n    pass\n"
            "bad=[m for m in sys.modules if m.split('.')[0] in ('vllm','torch','httpx','jinja2','numpy','transformers')]\n"
            "print('HEAVY', sorted(bad))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert "HEAVY []" in r.stdout, r.stdout + r.stderr
