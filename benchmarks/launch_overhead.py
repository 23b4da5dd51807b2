"""recipectl's own overhead in `launch`: the time from the slowest process's first healthy
/health to launch seeing every process ready, from the run state it records. Launches the local
recipe (or RECIPE) with --detach, reads the state, stops it. Needs the CPU engine.

After that, launch sends one request through the router before it says "ready" (it proves the
deployment serves; a NIXL handshake that timed out is retried there). That request is engine work
(prefill, transfer, decode of 2 tokens), reported on its own line, and so is the time from the last
/health to the `launch --detach` process exiting.

    .venv/bin/python benchmarks/launch_overhead.py [RECIPE] [--runs 1]
    .venv/bin/python benchmarks/launch_overhead.py --state PATH/state.json   # an existing run
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def report(state: dict, exited_at: float | None = None) -> float:
    for p in state["processes"]:
        print(f"  {p['name']:<10} ready {p['healthy_at'] - p['started_at']:7.1f} s after start")
    last_healthy = max(p["healthy_at"] for p in state["processes"])
    overhead = state["ready_at"] - last_healthy
    print(f"  recipectl overhead after the last /health: {overhead * 1000:.0f} ms")
    if state.get("first_request_s") is not None:
        print(f"  then the first request through the router: {state['first_request_s']:.2f} s (engine work)")
    if exited_at is not None:
        print(f"  launch --detach exited {exited_at - last_healthy:.2f} s after the last /health")
    return overhead


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("recipe", nargs="?", default=str(ROOT / "recipes/local/tiny-hybrid-cpu.yaml"))
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument("--state")
    args = ap.parse_args()
    if args.state:
        report(json.loads(Path(args.state).read_text()))
        return
    for i in range(args.runs):
        with tempfile.TemporaryDirectory() as d:
            env = {**os.environ, "RECIPECTL_RUN_DIR": d}
            r = subprocess.run([sys.executable, "-m", "recipectl", "launch", args.recipe, "--detach"], env=env,
                               capture_output=True, text=True)
            exited_at = time.time()
            try:
                if r.returncode != 0:
                    sys.exit(f"launch failed:\n{r.stderr[-3000:]}")
                print(f"run {i + 1}:")
                report(json.loads((Path(d) / "latest" / "state.json").read_text()), exited_at)
            finally:
                subprocess.run([sys.executable, "-m", "recipectl", "stop"], env=env, capture_output=True)


if __name__ == "__main__":
    main()
