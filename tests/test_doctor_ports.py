"""doctor's port check beside a running deployment: the ports this recipe's own run listens on are
not "in use" by a stranger; a port another process holds is (real listening processes here)."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from types import SimpleNamespace

import pytest

from recipectl.checks.catalog import get_check
from recipectl.checks.doctor import ONE, DoctorRun, Targets, timed
from recipectl.diagnostics import Status
from recipectl.runs.processes import port_in_use
from recipectl.validate import load_variant

from .e2e_support import local_recipe_on_free_ports

LISTEN = "import socket,time; s=socket.socket(); s.bind(('127.0.0.1', {port})); s.listen(); time.sleep(120)"


@pytest.fixture
def prefill_listening(tmp_path):
    """The recipe on free ports, and a process holding its prefill port (as a running prefill would)."""
    recipe, ports = local_recipe_on_free_ports(tmp_path / "recipe.yaml")
    proc = subprocess.Popen([sys.executable, "-c", LISTEN.format(port=ports.prefill)])
    deadline = time.monotonic() + 30
    while not port_in_use("127.0.0.1", ports.prefill):
        assert time.monotonic() < deadline and proc.poll() is None
        time.sleep(0.05)
    try:
        yield load_variant(str(recipe), None).recipe, ports, proc
    finally:
        proc.kill()
        proc.wait()


PASS, WARN = Status.PASS, Status.WARN


def _ports_check(recipe, targets):
    return asyncio.run(timed(get_check("environment.ports"), DoctorRun(recipe, targets, 30), ONE[0]))


def test_a_port_held_by_this_recipes_own_run_passes(prefill_listening):
    recipe, ports, proc = prefill_listening
    run = SimpleNamespace(run_id="local-tiny-hybrid-1", processes=[SimpleNamespace(pid=proc.pid)])
    r = _ports_check(recipe, Targets(run_state=run))
    assert r.status == PASS, r
    assert f"prefill-0:{ports.prefill}" in r.message and "local-tiny-hybrid-1" in r.message


def test_a_port_held_by_another_process_warns(prefill_listening):
    recipe, ports, proc = prefill_listening
    r = _ports_check(recipe, Targets())
    assert r.status == WARN and f"prefill-0:{ports.prefill}" in r.message and "another process" in r.message
    stranger = SimpleNamespace(run_id="x", processes=[SimpleNamespace(pid=proc.pid + 100000)])
    assert _ports_check(recipe, Targets(run_state=stranger)).status == WARN
