"""Real Slurm: jobs, overlapping steps and scancel on the single-node cluster of slurm_support,
and the rendered slurm script of the local recipe with its engines replaced by a fake."""

from __future__ import annotations

import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from .ports import free_ports
from .slurm_support import SlurmCluster, slurm_cluster  # noqa: F401  (the fixture)

pytestmark = pytest.mark.slurm
ROOT = Path(__file__).resolve().parent.parent
JOB_TIMEOUT = 120  # s; a job here takes 2-5 s, but other tests may be loading both CPUs


def _read(path: Path) -> str:
    return path.read_text() if path.exists() else f"<{path.name} missing>"


def test_sbatch_wrap_with_srun_step(slurm_cluster: SlurmCluster, tmp_path: Path) -> None:
    c = slurm_cluster
    out = tmp_path / "hello.out"
    t0 = time.monotonic()
    job = c.sbatch("--job-name=hello", f"--output={out}", "--wrap", "echo hello; srun --overlap hostname", cwd=tmp_path)
    state = c.wait_gone(job, JOB_TIMEOUT)
    print(f"[slurm] job {job}: {state} in {time.monotonic() - t0:.1f} s (submit to out of queue)")
    assert state == "COMPLETED", f"{c.job_info(job)}\n{_read(out)}\n{c.logs()}"
    assert out.read_text().splitlines() == ["hello", c.node]


# Each step waits for the other to have started, so both finish only if they run at the same
# time (a step without --overlap would wait for the job's one CPU).
MEET = """\
me=$1 other=$2
touch "$me.started"
for _ in $(seq 600); do
  if [[ -e $other.started ]]; then
    echo "$me saw $other on $(hostname) step $SLURM_STEP_ID"
    exit 0
  fi
  sleep 0.1
done
exit 1
"""
TWO_STEPS = """\
#!/usr/bin/env bash
#SBATCH --job-name=two-steps
#SBATCH --nodes=1
#SBATCH --ntasks-per-node=1
#SBATCH --output=%x-%j.out
set -euo pipefail
mapfile -t NODES < <(scontrol show hostnames "$SLURM_JOB_NODELIST")
srun --nodes=1 --ntasks=1 --overlap --nodelist="${NODES[0]}" \\
  --job-name=step-a --output=step-a.log bash meet.sh a b &
a=$!
srun --nodes=1 --ntasks=1 --overlap --nodelist="${NODES[0]}" \\
  --job-name=step-b --output=step-b.log bash meet.sh b a &
b=$!
wait "$a"
wait "$b"
echo "both steps done on ${NODES[0]}"
"""


def test_two_overlapping_steps(slurm_cluster: SlurmCluster, tmp_path: Path) -> None:
    c = slurm_cluster
    (tmp_path / "meet.sh").write_text(MEET)
    (tmp_path / "job.sh").write_text(TWO_STEPS)
    t0 = time.monotonic()
    job = c.sbatch("job.sh", cwd=tmp_path)
    state = c.wait_gone(job, JOB_TIMEOUT)
    print(f"[slurm] job {job}: {state} in {time.monotonic() - t0:.1f} s (2 overlapping steps)")
    out = tmp_path / f"two-steps-{job}.out"
    a, b = tmp_path / "step-a.log", tmp_path / "step-b.log"
    detail = f"{c.job_info(job)}\n{_read(out)}\n{_read(a)}\n{_read(b)}\n{c.logs()}"
    assert state == "COMPLETED", detail
    assert out.read_text().strip() == f"both steps done on {c.node}", detail
    assert re.fullmatch(rf"a saw b on {c.node} step \d+\n", a.read_text()), detail
    assert re.fullmatch(rf"b saw a on {c.node} step \d+\n", b.read_text()), detail


def test_scancel_ends_running_job(slurm_cluster: SlurmCluster, tmp_path: Path) -> None:
    c = slurm_cluster
    job = c.sbatch(
        "--job-name=sleeper",
        f"--output={tmp_path / 'sleep.out'}",
        "--wrap",
        "srun --overlap sleep 300 & sleep 300; wait",
        cwd=tmp_path,
    )
    c.wait_running(job, JOB_TIMEOUT)
    deadline = time.monotonic() + JOB_TIMEOUT
    while f"{job}.0" not in c.run(["squeue", "-h", "-s", "-j", job, "-o", "%i"]).stdout:
        assert time.monotonic() < deadline, f"step {job}.0 never started\n{c.logs()}"
        time.sleep(0.2)
    t0 = time.monotonic()
    c.run(["scancel", job], check=True)
    # bounded (wait_gone fails after 120 s, far below the job's 300 s), not timed: KillWait is 5 s
    state = c.wait_gone(job, 120)
    print(f"[slurm] scancel {job}: {state} after {time.monotonic() - t0:.1f} s")
    assert state == "CANCELLED", c.job_info(job)
    deadline = time.monotonic() + 60
    while left := [p for p in c.leftover_processes() if "sleep 300" in p[1]]:
        assert time.monotonic() < deadline, f"still running after scancel: {left}"
        time.sleep(0.2)


# Stands in for `vllm serve` and `vllm-router`: answers every GET (so /health) with 200 on --host
# and --port; the router exits when --stop-file appears, the servers only when killed.
FAKE_ENGINE = """\
import argparse, http.server, os, sys, threading, time
p = argparse.ArgumentParser()
p.add_argument("mode")
p.add_argument("--host", default="127.0.0.1")
p.add_argument("--port", type=int, required=True)
p.add_argument("--stop-file")
a, _ = p.parse_known_args()
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200); self.end_headers(); self.wfile.write(b"ok")
    def log_message(self, *args):
        pass
srv = http.server.ThreadingHTTPServer((a.host, a.port), H)
threading.Thread(target=srv.serve_forever, daemon=True).start()
print(f"fake {a.mode} step {os.environ.get('SLURM_STEP_ID')} on {a.host}:{a.port}", flush=True)
for _ in range(3000):
    if a.stop_file and os.path.exists(a.stop_file):
        print(f"fake {a.mode} stopping", flush=True)
        sys.exit(0)
    time.sleep(0.1)
"""


def test_rendered_local_script_runs_all_steps(slurm_cluster: SlurmCluster, tmp_path: Path) -> None:
    """The real `recipectl render --target slurm` output, engines swapped for a fake: every step
    starts, the health checks pass, the router starts, and when one step exits `wait -n` ends
    the job and Slurm kills the other steps."""
    c = slurm_cluster
    script = subprocess.run(
        [sys.executable, "-m", "recipectl", "render", "recipes/local/tiny-hybrid-cpu.yaml", "--target", "slurm"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
        check=True,
        stdin=subprocess.DEVNULL,
    ).stdout
    fake = tmp_path / "fake_engine.py"
    fake.write_text(FAKE_ENGINE)
    stop = tmp_path / "stop-router"
    script, n_serve = re.subn(r"\S*/bin/vllm serve \S+", f"{sys.executable} {fake} serve", script)
    script, n_router = re.subn(r"\S*/bin/vllm-router\b", f"{sys.executable} {fake} router --stop-file {stop}", script)
    assert (n_serve, n_router) == (2, 1), script
    # Other tests may be running the real deployment on the recipe's ports: use free ones.
    wanted = sorted(set(re.findall(r"--port (\d+)", script)))
    ports = dict(zip(wanted, map(str, free_ports(len(wanted))), strict=True))
    script = re.sub(r"\b(\d+)\b", lambda m: ports.get(m.group(1), m.group(1)), script)
    (tmp_path / "job.sh").write_text(script)

    t0 = time.monotonic()
    # A short READY_TIMEOUT: should the health checks never pass, the script cancels the job.
    job = c.sbatch("job.sh", cwd=tmp_path, env={"READY_TIMEOUT": "60"})
    c.wait_running(job, JOB_TIMEOUT)
    want = {"prefill-0", "decode-0", "router"}
    deadline = time.monotonic() + JOB_TIMEOUT
    while not want <= set(steps := c.steps(job)):
        assert c.job_state(job) == "RUNNING" and time.monotonic() < deadline, (
            f"steps {steps}, job {c.job_info(job)}\n{_read(tmp_path / f'local-tiny-hybrid-{job}.out')}\n{c.logs()}"
        )
        time.sleep(0.5)
    print(f"[slurm] rendered script {job}: steps {sorted(steps)} up after {time.monotonic() - t0:.1f} s")
    stop.touch()  # the router exits: `wait -n` returns, the script exits 1
    state = c.wait_gone(job, JOB_TIMEOUT)
    out = _read(tmp_path / f"local-tiny-hybrid-{job}.out")
    logs = tmp_path / "logs" / f"local-tiny-hybrid-{job}"
    detail = (
        f"{c.job_info(job)}\n{out}\n"
        + "\n".join(f"--- {f.name}\n{f.read_text()}" for f in sorted(logs.glob("*")))
        + f"\n{c.logs()}"
    )
    assert state == "FAILED" and c.job_info(job).get("ExitCode") == "1:0", detail
    for line in (
        f"started prefill-0 on {c.node}",
        f"started decode-0 on {c.node}",
        f"router on {c.node}",
        "a step exited; stopping the job",
    ):
        assert line in out, detail
    assert (logs / "nodes").read_text() == f"{c.node}\n", detail
    # the local recipe names its host (127.0.0.1): URLs use it rather than the node's name
    assert (logs / "router_url").read_text().startswith("http://127.0.0.1:"), detail
    for name, mode in (("prefill-0", "serve"), ("decode-0", "serve"), ("router", "router")):
        assert f"fake {mode} step " in _read(logs / f"{name}.log"), detail
    assert "fake router stopping" in _read(logs / "router.log"), detail
    deadline = time.monotonic() + 15
    while left := [p for p in c.leftover_processes() if str(fake) in p[1]]:
        assert time.monotonic() < deadline, f"engine steps left running after the job: {left}"
        time.sleep(0.2)
