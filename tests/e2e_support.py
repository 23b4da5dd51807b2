"""Bringing the real local deployment up and down for the end-to-end tests."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from recipectl.runs.processes import group_alive, port_in_use, stop_groups

from .ports import free_ports
from .recipe_text import edited

ROOT = Path(__file__).resolve().parent.parent
LOCAL_RECIPE = ROOT / "recipes" / "local" / "tiny-hybrid-cpu.yaml"


@dataclass(frozen=True)
class LocalPorts:
    """The local recipe's ports, chosen free when a test starts: two runs of the suite (or a
    deployment a user left up) never meet on 8100/8200/30000."""

    prefill: int
    decode: int
    prefill_side_channel: int
    decode_side_channel: int
    router: int
    router_metrics: int

    def all(self) -> tuple[int, ...]:
        return (
            self.prefill,
            self.decode,
            self.prefill_side_channel,
            self.decode_side_channel,
            self.router,
            self.router_metrics,
        )


def local_recipe_on_free_ports(dest: Path, text: str | None = None) -> tuple[Path, LocalPorts]:
    """The local recipe (or ``text``, an edit of it) written to ``dest`` with every port it opens
    chosen free now; the router's metrics port too (its default, 29000, is fixed)."""
    ports = LocalPorts(*free_ports(6))
    dest.write_text(
        edited(
            LOCAL_RECIPE.read_text() if text is None else text,
            ("  port: 8100\n", f"  port: {ports.prefill}\n"),
            ("  port: 8200\n", f"  port: {ports.decode}\n"),
            ("side_channel_port: 5600", f"side_channel_port: {ports.prefill_side_channel}"),
            ("side_channel_port: 5700", f"side_channel_port: {ports.decode_side_channel}"),
            (
                "router:\n  port: 30000\n",
                f"router:\n  port: {ports.router}\n  prometheus_port: {ports.router_metrics}\n",
            ),
        )
    )
    return dest, ports


# What vLLM prints at start-up about its cache (docs/engine-cpu.md, "Capacity lines")
CAPACITY_LINE = re.compile(
    r"KV cache size: ([\d,]+) tokens, Maximum concurrency for ([\d,]+) tokens per "
    r"request: ([\d.]+)x"
)


# The tiny models the end-to-end tests use besides the local recipe's own (setup makes that one):
# name -> make-tiny-model.sh's environment. Made once into the model cache, before the first test
# (conftest.py): made inside a test, each competed with a running deployment for 2 cores, and
# once took more than 5 minutes.
TEST_MODELS = {"qwen3next-tiny-seed1": {"SEED": "1"}, "qwen3-dense-tiny": {"KIND": "dense"}}
MAKE_MODEL_TIMEOUT_S = 1800  # ~40 s on an idle 2-core host


def tiny_model(name: str) -> Path:
    """The path of a test model from TEST_MODELS, made if it is not there (the script does
    nothing when the model's stamp matches)."""
    from recipectl.engine_env import engine_venv

    out = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "recipectl" / "models" / name
    subprocess.run(
        ["bash", str(ROOT / "scripts" / "make-tiny-model.sh"), str(out)],
        check=True,
        capture_output=True,
        timeout=MAKE_MODEL_TIMEOUT_S,
        env={**os.environ, "RECIPECTL_ENGINE_VENV": str(engine_venv()), **TEST_MODELS[name]},
    )
    return out


def make_test_models() -> None:
    """Every model of TEST_MODELS, where the engine is installed (where it is not, the tests that
    need it say so through require_engine)."""
    from recipectl.engine_env import engine_venv

    from .requirements import engine_missing

    if not engine_missing(engine_venv()):
        for name in TEST_MODELS:
            tiny_model(name)


def cli(*args: str, env: dict | None = None, timeout: float = 900, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "recipectl", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
        cwd=ROOT,
        **kw,
    )


def cli_watched(*args: str, env: dict | None = None, timeout: float = 120, dump_after: float = 30):
    """`cli`, but a command still running after `dump_after` seconds is asked (SIGUSR1) to print
    every thread's stack to its stderr: a slow run's failure message then says where it waited."""
    import signal
    import threading

    proc = subprocess.Popen(
        [sys.executable, "-m", "recipectl", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, **(env or {})},
        cwd=ROOT,
    )
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


def assert_nothing_left(state: dict | None, ports: LocalPorts) -> None:
    """No process of the run, and nothing on the run's ports."""
    if state:
        left = [p["name"] for p in state["processes"] if p.get("pid") and group_alive(p["pid"])]
        assert left == [], f"processes left behind: {left}"
    deadline = time.time() + 60
    busy = [p for p in ports.all() if port_in_use("127.0.0.1", p)]
    while busy and time.time() < deadline:
        time.sleep(0.5)
        busy = [p for p in ports.all() if port_in_use("127.0.0.1", p)]
    assert busy == [], f"ports still in use: {busy}"


def kill_leftovers(run_root: Path) -> list[str]:
    """Kill every process group the latest run under `run_root` recorded that is still alive, and
    say which. A test that failed half-way (a launch that did not answer Ctrl-C in time, a stop
    that failed) must not leave a deployment spinning on the host's cores for the rest of the suite."""
    state = read_state(run_root) or {}
    alive = [p for p in state.get("processes", []) if p.get("pid") and group_alive(p["pid"])]
    if alive:
        stop_groups([p["pid"] for p in alive], 10)
    return [p["name"] for p in alive]


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
    """The local recipe, on ports free now, launched with --detach for a module's tests, then
    stopped; nothing may be left. Yields {"env", "state", "run_root", "recipe", "ports",
    "launch_output"}. (A
    generator for module-scoped fixtures.)"""
    from .requirements import require_engine

    require_engine()
    run_root = tmp_path_factory.mktemp("runs")
    recipe, ports = local_recipe_on_free_ports(run_root / "tiny-hybrid-cpu.yaml")
    env = {"RECIPECTL_RUN_DIR": str(run_root)}
    r = cli("launch", str(recipe), "--detach", env=env, timeout=1200)
    state = read_state(run_root)
    try:
        assert r.returncode == 0, r.stdout + r.stderr
        yield {
            "env": env,
            "state": state,
            "run_root": run_root,
            "recipe": recipe,
            "ports": ports,
            "launch_output": r.stdout + r.stderr,
        }
    finally:
        try:
            stop = cli("stop", env=env, timeout=300)
        finally:
            left = kill_leftovers(run_root)
        assert stop.returncode == 0 and not left, stop.stdout + stop.stderr + f"\nkilled after stop: {left}"
        assert_nothing_left(read_state(run_root), ports)
