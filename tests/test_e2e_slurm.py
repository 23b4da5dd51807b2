"""`recipectl launch --target slurm` on a real single-node Slurm (slurm-wlm + munge, started by
the fixture): the local CPU recipe is submitted with sbatch, becomes ready, serves a completion
through the router, passes doctor's endpoint and P/D checks from the run state, and is stopped
with scancel — nothing left. A job whose endpoint cannot start is reported and cancelled."""

from __future__ import annotations

import json
import time

import httpx
import pytest

from .e2e_support import LOCAL_RECIPE, assert_nothing_left, cli, local_recipe_on_free_ports, log_tails, read_state
from .recipe_text import edited
from .requirements import require_engine
from .slurm_support import slurm_cluster  # noqa: F401 - fixture

pytestmark = [pytest.mark.slurm, pytest.mark.engine]


def test_local_recipe_through_slurm(slurm_cluster, tmp_path):
    require_engine()
    recipe, ports = local_recipe_on_free_ports(tmp_path / "tiny-hybrid-cpu.yaml")
    # a variable of the caller's shell that the recipe does not name: it must not reach the job
    env = slurm_cluster.full_env({"RECIPECTL_RUN_DIR": str(tmp_path / "runs"), "CALLER_SECRET": "not-for-jobs"})
    t0 = time.time()
    r = cli("launch", str(recipe), "--target", "slurm", "--detach", env=env, timeout=1200)
    ready_s = time.time() - t0
    state = read_state(tmp_path / "runs")
    try:
        assert r.returncode == 0, r.stdout + r.stderr[-4000:]
        print(f"slurm launch ready in {ready_s:.0f}s (job {state['job_id']})")
        assert state["target"] == "slurm" and state["job_id"]
        out = httpx.post(
            state["router_url"] + "/v1/completions",
            timeout=300,
            json={"model": "tiny", "prompt": "the quick brown fox " * 12, "max_tokens": 8},
        )
        assert out.status_code == 200 and out.json()["choices"][0]["text"], (
            f"HTTP {out.status_code}: {out.text[:500]}\n" + log_tails(tmp_path / "runs")
        )
        st = cli("status", "--format", "json", env=env)
        body = json.loads(st.stdout)
        assert body["job_state"] == "RUNNING" and all(p["healthy"] for p in body["processes"]), body
        doc = cli(
            "doctor", str(recipe), "--no-env", "--no-parity", "--no-gsm8k", "--format", "json", env=env, timeout=600
        )
        checks = json.loads(doc.stdout)["checks"]
        assert doc.returncode == 0, [c for c in checks if c["status"] == "fail"]
        assert any(c["name"] == "P/D transfer (NIXL)" and c["status"] == "pass" for c in checks), checks
        job_env = [e for e in _environs() if e.get("LOG_DIR") == state["run_dir"]]
        assert job_env and all("CALLER_SECRET" not in e for e in job_env), len(job_env)
    finally:
        stop = cli("stop", env=env, timeout=600)
        print(stop.stderr)
    assert stop.returncode == 0
    assert slurm_cluster.job_state(state["job_id"]) in (None, "CANCELLED", "COMPLETED", "FAILED")
    assert_nothing_left(None, ports)
    daemons = ("slurmctld", "slurmd", "munged")
    steps_left = [p for p in slurm_cluster.leftover_processes() if not any(d in p[1] for d in daemons)]
    assert steps_left == []


def test_a_job_whose_endpoint_cannot_start_is_reported_and_cancelled(slurm_cluster, tmp_path):
    require_engine()
    bad, ports = local_recipe_on_free_ports(
        tmp_path / "bad.yaml",
        edited(LOCAL_RECIPE.read_text(), ("~/.cache/recipectl/models/qwen3next-tiny", str(tmp_path / "no-such-model"))),
    )
    env = slurm_cluster.full_env({"RECIPECTL_RUN_DIR": str(tmp_path / "runs")})
    t0 = time.time()
    r = cli("launch", str(bad), "--target", "slurm", "--detach", env=env, timeout=900)
    elapsed = time.time() - t0
    state = read_state(tmp_path / "runs")
    assert r.returncode == 1, r.stderr
    assert "launch failed" in r.stderr and "last lines of" in r.stderr
    assert f"job {state['job_id']} cancelled" in r.stderr
    print(f"failure reported in {elapsed:.0f}s")
    assert slurm_cluster.job_state(state["job_id"]) in (None, "CANCELLED", "COMPLETED", "FAILED")
    assert_nothing_left(None, ports)


def _environs() -> list[dict]:
    """The environment of every process this user may read (the job's steps run on this host)."""
    import psutil

    out = []
    for p in psutil.process_iter():
        try:
            out.append(p.environ())
        except (psutil.Error, OSError):
            continue
    return out
