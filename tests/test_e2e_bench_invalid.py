"""`recipectl bench` against a deployment whose decode dies mid-sweep: the run is invalid and says
which level. On a deployment of its own: with its decode peer killed while transfers were in
flight, prefill's NIXL/UCX threads spin on this host's cores until the KV lease expires
(measured: 110-160% CPU, mostly in the kernel, for minutes), which starves whatever runs next on
a 2-core host. The fixture stops what is left."""

from __future__ import annotations

import json

import pytest

from .e2e_support import launched
from .recipe_text import write_edited

pytestmark = pytest.mark.engine


@pytest.fixture(scope="module")
def deployment(tmp_path_factory):
    yield from launched(tmp_path_factory)


def test_bench_is_invalid_when_decode_dies_mid_sweep(deployment, tmp_path):
    """Kills decode after the first level: the sweep must say which level is invalid, exit 1."""
    import os
    import signal
    import subprocess
    import sys

    from .e2e_support import ROOT, wait_for

    recipe = tmp_path / "sweep.yaml"
    write_edited(deployment["recipe"], recipe, ("concurrency: [1, 2, 4]", "concurrency: [1, 4, 8]"))
    out = tmp_path / "bench"
    proc = subprocess.Popen([sys.executable, "-m", "recipectl", "bench", str(recipe), "--out", str(out),
                             "--run", deployment["state"]["run_dir"]], cwd=ROOT, text=True,
                            env={**os.environ, **deployment["env"]}, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert wait_for(lambda: (out / "level-c1.json").exists() or proc.poll() is not None, 600, 0.5)
        processes = {p["kind"]: p for p in deployment["state"]["processes"]}
        os.killpg(processes["decode"]["pid"], signal.SIGKILL)
        # Once the failed level is on disk, prefill goes too: with its decode dead and blocks leased
        # it spins on both cores, and bench's summary and plots took 10 minutes instead of seconds.
        assert wait_for(lambda: (out / "level-c4.json").exists() or proc.poll() is not None, 900, 0.5)
        os.killpg(processes["prefill"]["pid"], signal.SIGKILL)
        stdout, stderr = proc.communicate(timeout=900)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 1, stderr[-2000:]
    assert "invalid run: concurrency 4" in stderr, stderr[-2000:]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["valid"] is False and summary["levels"][0]["valid"] is True
