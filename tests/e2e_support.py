"""Bringing the real local deployment up and down for the end-to-end tests."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from recipectl.launch.processes import group_alive, port_in_use

ROOT = Path(__file__).resolve().parent.parent
LOCAL_RECIPE = ROOT / "recipes" / "local" / "tiny-hybrid-cpu.yaml"
PORTS = (8100, 8200, 30000, 5600, 5700, 29000)  # 29000: the router's Prometheus default


def cli(*args: str, env: dict | None = None, timeout: float = 900, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "recipectl", *args], capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, **(env or {})}, cwd=ROOT, **kw)


def read_state(run_root: Path) -> dict | None:
    p = run_root / "latest" / "state.json"
    try:
        return json.loads(p.read_text())
    except (OSError, ValueError):
        return None


def assert_nothing_left(state: dict | None) -> None:
    """No process of the run, and nothing on the local recipe's ports."""
    if state:
        left = [p["name"] for p in state["processes"] if p.get("pid") and group_alive(p["pid"])]
        assert left == [], f"processes left behind: {left}"
    deadline = time.time() + 15
    busy = [p for p in PORTS if port_in_use("127.0.0.1", p)]
    while busy and time.time() < deadline:
        time.sleep(0.5)
        busy = [p for p in PORTS if port_in_use("127.0.0.1", p)]
    assert busy == [], f"ports still in use: {busy}"


def wait_for(predicate, timeout: float, interval: float = 0.2):
    deadline = time.time() + timeout
    while time.time() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    return None
