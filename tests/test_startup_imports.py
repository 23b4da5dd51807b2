"""What `recipectl validate` and `recipectl render` import (the CLI must start fast): no engine,
torch or httpx ever; on these two commands not Typer or Rich either (recipectl/entry.py parses
their command lines), and Jinja2 only to render. Timing itself is measured by
benchmarks/validate_startup.py and benchmarks/render_speed.py, not asserted here."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
GB200 = "recipes/gb200/qwen3.5-397b-nvfp4-pd.yaml"
NEVER = ("vllm", "torch", "httpx", "numpy", "transformers")


def _imported(*argv: str) -> set[str]:
    code = (f"import sys, runpy; sys.argv=['recipectl', *{list(argv)!r}]\n"
            "try:\n    runpy.run_module('recipectl', run_name='__main__')\nexcept SystemExit as e:\n"
            "    assert e.code == 0, e.code\n"
            "print('MODULES', ' '.join(sorted({m.split('.')[0] for m in sys.modules})))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    line = next((ln for ln in r.stdout.splitlines() if ln.startswith("MODULES ")), None)
    assert line, r.stdout + r.stderr
    return set(line.split()[1:])


def test_validate_imports_nothing_heavy():
    mods = _imported("validate", GB200)
    assert "pydantic" in mods and "yaml" in mods  # what it does need: the check is real
    heavy = mods & {*NEVER, "jinja2", "typer", "click", "rich"}
    assert not heavy, sorted(heavy)


@pytest.mark.parametrize("target", ["bash", "k8s"])
def test_render_imports_jinja2_and_nothing_heavy(tmp_path, target):
    mods = _imported("render", GB200, "--variant", "prefill-endpoints-4", "-t", target, "-o", str(tmp_path))
    assert "jinja2" in mods
    heavy = mods & {*NEVER, "typer", "click", "rich"}
    assert not heavy, sorted(heavy)


def test_other_commands_still_go_through_typer():
    assert "typer" in _imported("rules")
