"""`recipectl launch --target slurm` on a real two-node Slurm (slurm_support.slurm_cluster_2: each
node a network namespace with its own address and slurmd; slurmctld and the client commands on a
login namespace). recipes/local/tiny-hybrid-cpu-2node.yaml renders through the multi-node path the
GB200 recipe uses (no hosts: the job's node list; servers on every interface; each node's name its
NIXL side-channel host; the router reaching the workers by node name): prefill and the router on
node1, decode on node2.

The real engine: launched, one completion through the router, status, logs, doctor's proof that
the KV crossed from node1's address to node2's, stop leaving no process and no job. Then, with the
engine replaced by a stand-in (cheap), a node killed mid-run (its slurmd and every process on it):
status names the node and its state, Slurm ends the job, nothing is left on the other node, and
stop has nothing to do.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from .e2e_support import read_state, wait_for
from .recipe_text import write_edited
from .requirements import require_engine
from .slurm_support import SlurmCluster, slurm_cluster_2  # noqa: F401 - fixture

pytestmark = [pytest.mark.slurm, pytest.mark.engine]
ROOT = Path(__file__).resolve().parent.parent
RECIPE = ROOT / "recipes" / "local" / "tiny-hybrid-cpu-2node.yaml"
DAEMONS = ("slurmctld", "slurmd", "munged")
WHERE = {"prefill-0": "node1", "decode-0": "node2", "router": "node1"}


def cli(c: SlurmCluster, *args: str, env: dict, timeout: float = 600) -> subprocess.CompletedProcess:
    """recipectl as a user runs it on the cluster's login node."""
    t0 = time.monotonic()
    try:
        return subprocess.run(
            c.client_argv([sys.executable, "-m", "recipectl", *args]),
            capture_output=True,
            text=True,
            timeout=timeout,
            env=env,
            cwd=ROOT,
            stdin=subprocess.DEVNULL,
        )
    finally:
        # how long each command took, in the output of a failed run
        print(f"[slurm-2] recipectl {' '.join(args[:2])}: {time.monotonic() - t0:.1f} s")


POST = """\
import json, sys, urllib.request
req = urllib.request.Request(sys.argv[1], data=sys.argv[2].encode(), headers={"Content-Type": "application/json"})
with urllib.request.urlopen(req, timeout=float(sys.argv[3])) as r:
    print(r.status, r.read().decode())
"""


def post(c: SlurmCluster, url: str, body: dict, timeout: float = 300) -> tuple[int, dict]:
    """POST from the login node (the router's address is the test network's)."""
    r = subprocess.run(
        c.client_argv([sys.executable, "-c", POST, url, json.dumps(body), str(timeout)]),
        capture_output=True,
        text=True,
        timeout=timeout + 30,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    status, text = r.stdout.split(" ", 1)
    return int(status), json.loads(text)


def log_tails(run_dir: Path, lines: int = 30) -> str:
    out = []
    for log in sorted(run_dir.glob("*.log")) + sorted(run_dir.glob("slurm-*.out")):
        out.append(f"----- {log.name}\n" + "\n".join(log.read_text(errors="replace").splitlines()[-lines:]))
    return "\n".join(out)


def assert_nothing_left(c: SlurmCluster, job_id: str) -> None:
    """No job, no job step or task on any node, nothing but slurmd in the nodes' namespaces."""
    assert c.job_state(job_id) in (None, "CANCELLED", "COMPLETED", "FAILED", "NODE_FAIL")
    assert c.run(["squeue", "-h"]).stdout.strip() == ""

    def leftovers():
        steps = [p for p in c.leftover_processes() if not any(d in p[1] for d in DAEMONS)]
        slurmd = {c.procs[f"slurmd-{n.name}"].pid for n in c.nodes if c.procs[f"slurmd-{n.name}"].poll() is None}
        in_ns = [pid for n in c.nodes for pid in c.net.pids(n.netns) if pid not in slurmd]
        return steps, in_ns

    assert wait_for(lambda: leftovers() == ([], []), 60, 0.5) is not None or leftovers() == ([], []), (
        f"left behind: {leftovers()}"
    )


def test_two_node_pd_launch_doctor_stop(slurm_cluster_2, tmp_path):
    require_engine()
    c = slurm_cluster_2
    runs = tmp_path / "runs"
    env = c.full_env({"RECIPECTL_RUN_DIR": str(runs)})
    t0 = time.monotonic()
    r = cli(c, "launch", str(RECIPE), "--target", "slurm", "--detach", env=env, timeout=1500)
    ready_s = time.monotonic() - t0
    state = read_state(runs)
    assert state, r.stderr
    run_dir = Path(state["run_dir"])
    try:
        assert r.returncode == 0, r.stdout + r.stderr[-4000:] + log_tails(run_dir)
        print(f"[slurm-2] launch ready in {ready_s:.0f} s (job {state['job_id']})")
        # one srun step per node, each where the placement put it
        assert {p["name"]: p["node"] for p in state["processes"]} == WHERE, state["processes"]
        assert c.step_nodes(state["job_id"]) == {"prefill-0": "node1", "decode-0": "node2", "router": "node1"}
        assert state["router_url"] == "http://node1:30000"
        assert (run_dir / "nodes").read_text().split() == ["node1", "node2"]

        t1 = time.monotonic()
        status, body = post(
            c,
            state["router_url"] + "/v1/completions",
            {"model": "tiny", "prompt": "the quick brown fox " * 12, "max_tokens": 8},
        )
        assert status == 200 and body["choices"][0]["text"], body
        print(f"[slurm-2] completion through the router in {time.monotonic() - t1:.1f} s")

        st = cli(c, "status", "--format", "json", env=env, timeout=600)
        s = json.loads(st.stdout)
        assert st.returncode == 0 and s["job_state"] == "RUNNING", st.stdout + st.stderr
        assert all(p["healthy"] for p in s["processes"]) and s["problems"] == [], s
        assert {n: v["down"] for n, v in s["nodes"].items()} == {"node1": False, "node2": False}, s

        logs = cli(c, "logs", "decode", "-n", "400", env=env, timeout=600)
        assert logs.returncode == 0 and "NixlPullConnector" in logs.stdout, logs.stdout[-2000:] + logs.stderr

        t1 = time.monotonic()
        doc = cli(
            c, "doctor", str(RECIPE), "--no-env", "--no-parity", "--no-gsm8k", "--format", "json", env=env, timeout=900
        )
        checks = {ch["name"]: ch for ch in json.loads(doc.stdout)["checks"]}
        print(f"[slurm-2] doctor in {time.monotonic() - t1:.0f} s")
        assert doc.returncode == 0, [ch for ch in checks.values() if ch["status"] == "fail"]
        assert checks["P/D transfer (NIXL)"]["status"] == "pass", checks
        path = checks["NIXL path (prefill host -> decode host)"]
        print(f"[slurm-2] {path['detail']}")
        assert path["status"] == "pass", path
        # the KV left node1's address and arrived at node2's
        assert path["data"]["from"]["host"] == "node1" and path["data"]["from"]["address"] == c.address("node1")
        assert path["data"]["to"]["host"] == "node2" and path["data"]["to"]["address"] == c.address("node2")
        assert path["data"]["between_hosts"] is True
        assert path["data"]["evidence"]["nixl_bytes"] > 0, path
    finally:
        t1 = time.monotonic()
        stop = cli(c, "stop", env=env, timeout=300)
        print(f"[slurm-2] stop in {time.monotonic() - t1:.0f} s: {stop.stderr.strip()}")
    assert stop.returncode == 0, stop.stdout + stop.stderr
    assert_nothing_left(c, state["job_id"])


# Stands in for `vllm serve` and `vllm-router`: 200 to every GET and POST on --host/--port, until killed.
FAKE = """\
#!{python}
import argparse, http.server, json
p = argparse.ArgumentParser()
p.add_argument("--host", default="0.0.0.0")
p.add_argument("--port", type=int, required=True)
a, _ = p.parse_known_args()
class H(http.server.BaseHTTPRequestHandler):
    def _ok(self, body=b"ok"):
        self.send_response(200); self.send_header("Content-Length", str(len(body))); self.end_headers()
        self.wfile.write(body)
    def do_GET(self):
        self._ok()
    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self._ok(json.dumps({{"choices": [{{"text": " ok"}}]}}).encode())
    def log_message(self, *args):
        pass
http.server.ThreadingHTTPServer((a.host, a.port), H).serve_forever()
"""


def test_a_killed_node_is_reported_and_the_job_cleaned_up_with_a_stand_in_engine(slurm_cluster_2, tmp_path):
    """The scheduler, the nodes, recipectl and the kill are real; the engine and the router are a
    stand-in HTTP server (FAKE above): a second two-node launch of the real engine would add minutes
    to CI, and what is under test is what Slurm and recipectl do when a node dies."""
    c = slurm_cluster_2
    venv = tmp_path / "fake-engine"
    (venv / "bin").mkdir(parents=True)
    for name in ("vllm", "vllm-router"):
        (venv / "bin" / name).write_text(FAKE.format(python=sys.executable))
        (venv / "bin" / name).chmod(0o755)
    recipe = tmp_path / "fake.yaml"
    write_edited(RECIPE, recipe, ("venv: ~/.cache/recipectl/engine", f"venv: {venv}"))
    runs = tmp_path / "runs"
    env = c.full_env({"RECIPECTL_RUN_DIR": str(runs)})
    r = cli(c, "launch", str(recipe), "--target", "slurm", "--detach", env=env, timeout=600)
    state = read_state(runs)
    assert state and r.returncode == 0, r.stdout + r.stderr[-4000:]
    job = state["job_id"]
    try:
        assert c.step_nodes(job) == WHERE
        t0 = time.monotonic()
        killed = c.kill_node("node2")
        assert killed, "nothing ran on node2"
        # slurmctld marks the node DOWN once it stops answering (SlurmdTimeout 20 s) and ends the job
        gone = wait_for(lambda: c.run(["squeue", "-h", "-j", job, "-o", "%T"]).stdout.strip() == "", 240, 1)
        print(f"[slurm-2] node2 killed: job {job} {c.job_state(job)} after {time.monotonic() - t0:.0f} s")
        assert gone, f"job {job} still {c.job_state(job)} 240 s after node2 died\n{c.logs()}"
        assert c.job_state(job) == "NODE_FAIL", c.job_info(job)
        st = cli(c, "status", "--format", "json", env=env, timeout=600)
        s = json.loads(st.stdout)
        assert st.returncode == 1, s  # not all up
        assert s["job_state"] is None and s["job_end_state"] == "NODE_FAIL", s
        assert s["nodes"]["node2"]["down"] and not s["nodes"]["node1"]["down"], s
        assert any(p.startswith("node node2 is DOWN") and "decode-0" in p for p in s["problems"]), s["problems"]
        assert not any(p["alive"] for p in s["processes"]), s
        human = cli(c, "status", env=env, timeout=600)
        assert "node node2 is DOWN" in human.stdout and "NODE_FAIL" in human.stdout, human.stdout
        # the job's steps on the node that survived are gone too
        assert_nothing_left(c, job)
    finally:
        stop = cli(c, "stop", env=env, timeout=300)
        # bring node2 back for any later test: slurmd again, and the node resumed (ReturnToService=2)
        c.start_slurmd(next(n for n in c.nodes if n.name == "node2"))
        c.wait_idle(time.monotonic() + 300)
    assert stop.returncode == 0 and "not running" in stop.stderr, stop.stdout + stop.stderr
