"""What `recipectl validate` and `recipectl render` import (the CLI must start fast): no engine,
torch or httpx ever; not Rich (Typer needs it only to print help and errors), and Jinja2 only to
render scripts. Timing itself is measured by
benchmarks/validate_startup.py and benchmarks/render_speed.py, not asserted here."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
GB200 = "recipes/gb200/qwen3.5-397b-nvfp4-pd.yaml"
NEVER = ("vllm", "torch", "httpx", "numpy", "transformers")


def _python(code: str, **env: str) -> str:
    """stdout of `python -c CODE` in the repository, with the caller's PYDANTIC_DISABLE_PLUGINS left out."""
    clean = {k: v for k, v in os.environ.items() if k != "PYDANTIC_DISABLE_PLUGINS"}
    r = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120, env={**clean, **env}
    )
    assert r.returncode == 0, r.stdout + r.stderr
    return r.stdout.strip()


def _imported_modules(*argv: str, **env: str) -> set[str]:
    """Every module a `recipectl ARGV` process has imported when it exits."""
    out = _python(
        f"import sys, runpy; sys.argv=['recipectl', *{list(argv)!r}]\n"
        "try:\n    runpy.run_module('recipectl', run_name='__main__')\nexcept SystemExit as e:\n"
        "    assert e.code == 0, e.code\n"
        "print('MODULES', ' '.join(sorted(sys.modules)))",
        **env,
    )
    line = next((ln for ln in out.splitlines() if ln.startswith("MODULES ")), None)
    assert line, out
    return set(line.split()[1:])


def _imported(*argv: str) -> set[str]:
    """The top-level packages a `recipectl ARGV` process has imported."""
    return {m.split(".")[0] for m in _imported_modules(*argv)}


def test_validate_imports_nothing_heavy():
    mods = _imported("validate", GB200)
    assert "pydantic" in mods and "yaml" in mods  # what it does need: the check is real
    heavy = mods & {*NEVER, "jinja2", "rich"}
    assert not heavy, sorted(heavy)


@pytest.mark.parametrize("target", ["bash", "k8s"])
def test_render_imports_jinja2_and_nothing_heavy(tmp_path, target):
    mods = _imported("render", GB200, "--variant", "prefill-endpoints-4", "-t", target, "-o", str(tmp_path))
    # scripts come from the Jinja2 templates; manifests are Python data written by the YAML emitter
    assert ("jinja2" in mods) == (target != "k8s")
    heavy = mods & {*NEVER, "rich"}
    assert not heavy, sorted(heavy)
