"""launch under failure, with the real engine: a process that dies during start-up, and Ctrl-C.
Both must end quickly, say what happened, and leave no process behind."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from recipectl.runs.processes import group_alive

from .e2e_support import ROOT, assert_nothing_left, kill_leftovers, local_recipe_on_free_ports, read_state, wait_for
from .requirements import require_engine

pytestmark = pytest.mark.engine


def _start_launch(run_root):
    """`recipectl launch` of the local recipe on free ports, and those ports."""
    recipe, ports = local_recipe_on_free_ports(run_root / "tiny-hybrid-cpu.yaml")
    env = {**os.environ, "RECIPECTL_RUN_DIR": str(run_root)}
    return subprocess.Popen(
        [sys.executable, "-m", "recipectl", "launch", str(recipe)],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=_ctrl_c_as_at_a_terminal,
    ), ports


def _ctrl_c_as_at_a_terminal() -> None:
    """SIGINT back to its default in the child, as a terminal gives it: a suite started in the
    background by a non-interactive shell (nohup, `cmd &`) passes SIGINT on ignored, and Python
    then never turns it into KeyboardInterrupt, so Ctrl-C could not be tested there."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _end(proc: subprocess.Popen, run_root) -> list[str]:
    """However the test went, no launch and none of its servers left behind: the servers that
    were still alive (and are now killed), for the test to fail on."""
    if proc.poll() is None:
        proc.kill()
        proc.wait()
    return kill_leftovers(run_root)


def _pid_of(run_root, kind):
    state = read_state(run_root)
    if not state:
        return None
    return next((p["pid"] for p in state["processes"] if p["kind"] == kind and p.get("pid")), None)


def test_decode_killed_during_startup_fails_launch_with_its_log(tmp_path):
    require_engine()
    proc, ports = _start_launch(tmp_path)
    left: list[str] = []
    try:
        pid = wait_for(lambda: _pid_of(tmp_path, "decode"), 300)
        assert pid, "decode was never started"
        time.sleep(3)  # let it write a few log lines
        os.killpg(pid, signal.SIGKILL)
        t0 = time.time()
        out, err = proc.communicate(timeout=600)
        elapsed = time.time() - t0
    finally:
        left = _end(proc, tmp_path)
    assert proc.returncode == 1 and left == [], (err, left)
    assert "decode-0 exited" in err and "last lines of" in err and "decode-0.log" in err
    # a bound a 10x slower host meets, far below the ready_timeout_s (900 s) launch would wait
    # if it did not watch its processes
    assert elapsed < 300, f"launch took {elapsed:.1f}s to notice and clean up"
    assert_nothing_left(read_state(tmp_path), ports)


def test_ctrl_c_during_startup_leaves_nothing(tmp_path):
    require_engine()
    proc, ports = _start_launch(tmp_path)
    left: list[str] = []
    try:
        assert wait_for(lambda: _pid_of(tmp_path, "decode") and _pid_of(tmp_path, "prefill"), 300)
        time.sleep(2)
        proc.send_signal(signal.SIGINT)
        t0 = time.time()
        out, err = proc.communicate(timeout=600)
        elapsed = time.time() - t0
    finally:
        left = _end(proc, tmp_path)
    assert proc.returncode == 130 and left == [], (err, left)
    assert "interrupted" in err
    # a bound a 10x slower host meets: stopping two servers, each given stop_grace_s (15 s)
    assert elapsed < 300, f"launch took {elapsed:.1f}s to stop after Ctrl-C"
    state = read_state(tmp_path)
    assert all(not group_alive(p["pid"]) for p in state["processes"] if p.get("pid"))
    assert_nothing_left(state, ports)
