"""How long `recipectl validate` takes on the seed's GB200 recipe, as a user runs it (a new
process each time), and which heavy modules its start-up imports (none may be an engine).

    .venv/bin/python benchmarks/validate_startup.py [--runs 15] [RECIPE]

Target (issue: validate): under 0.3 s wall on a 2-core machine. Also prints the CPU time of the
runs (user + system), which a busy machine inflates much less than the wall time, and what the
interpreter takes to import yaml and pydantic alone, in the same rounds.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FLOOR = "import gc; gc.disable(); import yaml, pydantic.main, pydantic.fields"  # as validate imports them
HEAVY = ("vllm", "torch", "httpx", "jinja2", "typer", "rich", "numpy", "transformers")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("recipe", nargs="?", default=str(ROOT / "recipes/gb200/qwen3.5-397b-nvfp4-pd.yaml"))
    ap.add_argument("--runs", type=int, default=15)
    args = ap.parse_args()
    cmd = [sys.executable, "-m", "recipectl", "validate", args.recipe]
    if os.environ.get("PYTHONDONTWRITEBYTECODE"):
        print("note: PYTHONDONTWRITEBYTECODE is set: modules without up-to-date bytecode are compiled again "
              "by every run; unset it to measure an installed CLI")
    subprocess.run(cmd, capture_output=True)  # warm the page cache and .pyc files
    # What the interpreter and the libraries validate needs take alone, measured in the same rounds:
    # this machine's speed drifts by a third over minutes, and the difference is recipectl's own.
    floor_cmd = [sys.executable, "-c", FLOOR]
    subprocess.run(floor_cmd, capture_output=True)
    times, cpu, floor = [], [], []
    for _ in range(args.runs):
        ru0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.perf_counter()
        r = subprocess.run(cmd, capture_output=True)
        times.append(time.perf_counter() - t0)
        ru1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu.append(ru1.ru_utime + ru1.ru_stime - ru0.ru_utime - ru0.ru_stime)
        assert r.returncode == 0, r.stdout + r.stderr
        t0 = time.perf_counter()
        subprocess.run(floor_cmd, check=True)
        floor.append(time.perf_counter() - t0)
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"recipectl validate {Path(args.recipe).name}: median {statistics.median(times) * 1000:.0f} ms, "
          f"min {min(times) * 1000:.0f} ms, max {max(times) * 1000:.0f} ms over {args.runs} runs "
          f"(load average {load})")
    print(f"  CPU time: median {statistics.median(cpu) * 1000:.0f} ms, min {min(cpu) * 1000:.0f} ms")
    print(f"  the interpreter importing yaml and pydantic alone ({FLOOR!r}): median "
          f"{statistics.median(floor) * 1000:.0f} ms; recipectl's own share: median "
          f"{statistics.median(a - b for a, b in zip(times, floor, strict=True)) * 1000:.0f} ms")
    imp = subprocess.run([sys.executable, "-X", "importtime", *cmd[1:]], capture_output=True, text=True)
    mods = [ln.split("|")[-1].strip() for ln in imp.stderr.splitlines() if ln.startswith("import time:")]
    heavy = sorted({m for m in mods for h in HEAVY if m == h or m.startswith(h + ".")})
    print("heavy modules imported:", ", ".join(heavy) if heavy else "none")
    top = sorted(((int(ln.split("|")[1]), ln.split("|")[-1].strip()) for ln in imp.stderr.splitlines()
                  if ln.startswith("import time:") and ln.split("|")[1].strip().isdigit()), reverse=True)[:8]
    print("largest cumulative imports (us):", ", ".join(f"{name} {us}" for us, name in top))


if __name__ == "__main__":
    main()
