"""Bringing the real local deployment up and down for the end-to-end tests."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

from recipectl.runs.processes import group_alive, port_in_use

ROOT = Path(__file__).resolve().parent.parent
LOCAL_RECIPE = ROOT / "recipes" / "local" / "tiny-hybrid-cpu.yaml"
PORTS = (8100, 8200, 30000, 5600, 5700, 29000)  # 29000: the router's Prometheus default
# What vLLM prints at start-up about its cache (docs/engine-cpu.md, "Capacity lines")
CAPACITY_LINE = re.compile(r"KV cache size: ([\d,]+) tokens, Maximum concurrency for ([\d,]+) tokens per "
                           r"request: ([\d.]+)x")


def cli(*args: str, env: dict | None = None, timeout: float = 900, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "recipectl", *args], capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, **(env or {})}, cwd=ROOT, **kw)


def cli_watched(*args: str, env: dict | None = None, timeout: float = 120, dump_after: float = 30):
    """`cli`, but a command still running after `dump_after` seconds is asked (SIGUSR1) to print
    every thread's stack to its stderr: a slow run's failure message then says where it waited."""
    import signal
    import threading

    proc = subprocess.Popen([sys.executable, "-m", "recipectl", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env={**os.environ, **(env or {})}, cwd=ROOT)
    timer = threading.Timer(dump_after, lambda: proc.poll() is None and proc.send_signal(signal.SIGUSR1))
    timer.start()
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
    finally:
        timer.cancel()
        if proc.poll() is None:
            proc.kill()
    return subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)


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


def log_tails(run_root: Path, lines: int = 40) -> str:
    """The last lines of every log of the latest run: what a failed assertion should show."""
    out = []
    for log in sorted((run_root / "latest").glob("*.log")) if (run_root / "latest").exists() else []:
        try:
            tail = log.read_text(errors="replace").splitlines()[-lines:]
        except OSError:
            continue
        out.append(f"----- {log.name}\n" + "\n".join(tail))
    return "\n".join(out) or f"(no logs under {run_root})"


def launched(tmp_path_factory):
    """The local recipe launched with --detach for a module's tests, then stopped; nothing may be
    left. Yields {"env", "state", "run_root"}. (A generator for module-scoped fixtures.)"""
    from .requirements import require_engine

    require_engine()
    run_root = tmp_path_factory.mktemp("runs")
    env = {"RECIPECTL_RUN_DIR": str(run_root)}
    assert_nothing_left(None)  # the ports must be free before we start
    r = cli("launch", str(LOCAL_RECIPE), "--detach", env=env, timeout=1200)
    state = read_state(run_root)
    try:
        assert r.returncode == 0, r.stdout + r.stderr
        yield {"env": env, "state": state, "run_root": run_root}
    finally:
        stop = cli("stop", env=env, timeout=120)
        assert stop.returncode == 0, stop.stdout + stop.stderr
        assert_nothing_left(read_state(run_root))
