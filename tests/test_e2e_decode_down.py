"""Decode dies under the real local deployment: `recipectl bench` must call the sweep invalid and
name the level, and `recipectl doctor` must then fail and name decode.

One scenario on one deployment of its own (a launch is minutes of a 2-core CI host): the kill
would break any test that ran after it on a shared one, and the suite runs in random order.
With its decode peer killed while transfers were in flight, prefill's NIXL/UCX threads spin on
the host's cores until the KV lease expires (measured: 110-160% CPU, mostly in the kernel, for
minutes), so prefill is killed too once the failed level is on disk: doctor then finds both down."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from recipectl.runs.processes import group_alive

from .e2e_support import ROOT, cli_watched, launched, wait_for
from .recipe_text import write_edited

pytestmark = pytest.mark.engine


@pytest.fixture(scope="module")
def deployment(tmp_path_factory):
    yield from launched(tmp_path_factory)


def _kill(process: dict) -> None:
    os.killpg(process["pid"], signal.SIGKILL)
    assert wait_for(lambda: not group_alive(process["pid"]), 60), f"{process['name']} outlived SIGKILL"


def test_decode_dying_makes_the_bench_level_invalid_and_doctor_name_decode(deployment, tmp_path):
    processes = {p["kind"]: p for p in deployment["state"]["processes"]}
    recipe = tmp_path / "sweep.yaml"
    write_edited(deployment["recipe"], recipe, ("concurrency: [1, 2, 4]", "concurrency: [1, 4, 8]"))
    out = tmp_path / "bench"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "recipectl",
            "bench",
            str(recipe),
            "--out",
            str(out),
            "--run",
            deployment["state"]["run_dir"],
        ],
        cwd=ROOT,
        text=True,
        env={**os.environ, **deployment["env"]},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        assert wait_for(lambda: (out / "level-c1.json").exists() or proc.poll() is not None, 600, 0.5)
        _kill(processes["decode"])
        assert wait_for(lambda: (out / "level-c4.json").exists() or proc.poll() is not None, 900, 0.5)
        _kill(processes["prefill"])
        stdout, stderr = proc.communicate(timeout=900)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 1, stderr[-2000:]
    assert "invalid run: concurrency 4" in stderr, stderr[-2000:]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["valid"] is False and summary["levels"][0]["valid"] is True

    t0 = time.time()
    r = cli_watched(
        "doctor",
        str(deployment["recipe"]),
        "--no-env",
        "--format",
        "json",
        "--timeout",
        "10",
        env=deployment["env"],
        timeout=400,
        dump_after=45,
    )
    elapsed = time.time() - t0
    body = json.loads(r.stdout)
    down = [c for c in body["checks"] if c["status"] == "fail" and c["name"].startswith("health decode")]
    assert r.returncode == 1 and down, body
    # Every check is bounded by --timeout 10: a bound a 10x slower host still meets, far below
    # the minutes a check without its timeout would wait on the dead decode.
    assert elapsed < 300, f"doctor took {elapsed:.0f}s; its stacks after 45 s:\n{r.stderr[-6000:]}"
