"""Putting an endpoint's threads back on its cores (recipectl/runs/cpu_binding.py), on real
processes: one that moves its own main thread to another core, as vLLM's NIXL connector does on
the CPU platform, and a thread that may run anywhere, as vLLM's API server's do."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import psutil
import pytest

from recipectl.render.processes import OMP_BIND
from recipectl.runs import cpu_binding

pytestmark = pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two cores to move a thread between")

# The child's main thread moves itself to `away`; a second thread stays allowed on every core.
CHILD = """
import os, sys, threading, time
threading.Thread(target=time.sleep, args=(60,), daemon=True).start()
os.sched_setaffinity(0, {int(sys.argv[1])})
print("moved", flush=True)
time.sleep(60)
"""


@pytest.fixture
def moved_child():
    home, away = sorted(os.sched_getaffinity(0))[:2]
    p = subprocess.Popen([sys.executable, "-c", CHILD, str(away)], stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout is not None and p.stdout.readline().strip() == "moved"
        yield p.pid, frozenset({home}), away
    finally:
        p.kill()
        p.wait()


def test_a_thread_moved_off_its_endpoints_cores_is_found_and_put_back(moved_child):
    pid, cores, away = moved_child
    found = cpu_binding.strays("prefill-0", [pid], cores)
    assert [(s.tid, s.allowed) for s in found] == [(pid, frozenset({away}))]  # the main thread only
    moved = cpu_binding.put_back(found, {"prefill-0": cores})
    assert moved == found and os.sched_getaffinity(pid) == set(cores)
    assert cpu_binding.strays("prefill-0", [pid], cores) == []
    assert cpu_binding.describe(moved, {"prefill-0": cores}) == [
        f"prefill-0: 1 thread the engine had allowed on cores {away} put back on its cpu_cores {min(cores)}"
    ]


def test_threads_allowed_some_of_the_cores_are_left_as_they_are(moved_child):
    pid, cores, away = moved_child
    others = [t.id for t in psutil.Process(pid).threads() if t.id != pid]
    assert others and all(os.sched_getaffinity(t) >= cores | {away} for t in others)
    cpu_binding.put_back(cpu_binding.strays("prefill-0", [pid], cores), {"prefill-0": cores})
    assert all(os.sched_getaffinity(t) >= cores | {away} for t in others)


def test_a_process_that_has_exited_is_no_stray():
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    time.sleep(0.05)
    assert cpu_binding.strays("decode-0", [p.pid], frozenset({0})) == []


@pytest.mark.parametrize(
    "value, cores",
    [
        ("0", {0}),
        ("0-2", {0, 1, 2}),
        ("1,3|4,5", {1, 3, 4, 5}),
        ("0|1", {0, 1}),
        ("0|nobind", None),
        ("auto", None),
        ("nobind", None),
        ("", None),
        ("x", None),
    ],
)
def test_the_cores_an_endpoint_is_bound_to_are_all_its_ranks(value, cores):
    """Every rank's list (a tensor-parallel endpoint's rank 1 on its own core is no stray to move
    onto rank 0's)."""
    got = cpu_binding.bound_cores({OMP_BIND: value} if value else {})
    assert got == (frozenset(cores) if cores else None)


def test_a_running_process_is_bound_to_the_cores_its_own_environment_names():
    child = "import time; print('up', flush=True); time.sleep(30)"
    p = subprocess.Popen(
        [sys.executable, "-c", child], env={**os.environ, OMP_BIND: "0-1|2"}, stdout=subprocess.PIPE, text=True
    )
    try:
        # read once it runs: a process just made can show an empty environment for a moment
        assert p.stdout is not None and p.stdout.readline().strip() == "up"
        assert cpu_binding.process_cores(p.pid) == frozenset({0, 1, 2})  # every rank's
    finally:
        p.kill()
        p.wait()
    assert cpu_binding.process_cores(p.pid) is None  # gone: no cores, no error
