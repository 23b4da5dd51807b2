"""`recipectl doctor` on the real local deployment after decode was killed: it must fail and name
decode. A module of its own, with its own deployment: the kill would break any test that ran
after it on a shared one (the suite runs in random order)."""

from __future__ import annotations

import json

import pytest

from .e2e_support import cli_watched, launched, read_state

pytestmark = pytest.mark.engine


@pytest.fixture(scope="module")
def deployment(tmp_path_factory):
    yield from launched(tmp_path_factory)


def test_doctor_fails_and_names_decode_when_it_is_down(deployment):
    """It kills decode (nothing in flight, so prefill stays calm): its own deployment, so no other
    test depends on running before it."""
    import os
    import signal
    import time

    from recipectl.runs.processes import group_alive

    state = read_state(deployment["run_root"])
    decode = next(p for p in state["processes"] if p["kind"] == "decode")
    os.killpg(decode["pid"], signal.SIGKILL)
    deadline = time.time() + 30
    while group_alive(decode["pid"]) and time.time() < deadline:
        time.sleep(0.2)
    t0 = time.time()
    r = cli_watched("doctor", str(deployment["recipe"]), "--no-env", "--format", "json", "--timeout", "10",
                    env=deployment["env"], timeout=400, dump_after=45)
    elapsed = time.time() - t0
    body = json.loads(r.stdout)
    down = [c for c in body["checks"] if c["status"] == "fail" and c["name"].startswith("health decode")]
    assert r.returncode == 1 and down, body
    # Every check is bounded by --timeout 10: a bound a 10x slower host still meets, far below
    # the minutes a check without its timeout would wait on the dead decode.
    assert elapsed < 300, f"doctor took {elapsed:.0f}s; its stacks after 45 s:\n{r.stderr[-6000:]}"
