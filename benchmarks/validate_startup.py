"""How long `recipectl validate` takes on the seed's GB200 recipe, as a user runs it (a new
process each time), against the interpreter importing yaml and pydantic alone, and which heavy
modules its start-up imports (none may be an engine).

    .venv/bin/python benchmarks/validate_startup.py [--runs 21] [RECIPE]

Each round runs the floor (`python -c "import yaml, pydantic"`) and validate back to back, so
the two see the same machine: its speed drifts by a third over minutes on a shared host. The
number to compare with the goal (issue #32: at most 1.3) is the ratio of the two medians.
Bytecode is compiled first; set nothing that changes how the interpreter starts.
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
FLOOR = "import yaml, pydantic"
# pydantic imports its BaseModel machinery on first use, which `import pydantic` is not: what any
# program that declares one pydantic model pays. A reference, measured in the same rounds.
MODEL_FLOOR = "import yaml; from pydantic import BaseModel"
HEAVY = ("vllm", "torch", "httpx", "jinja2", "rich", "numpy", "transformers")


def _timed(cmd: list[str], cpu: list[float] | None = None) -> float:
    """Wall seconds of one run of `cmd`; its CPU seconds (user + system) appended to `cpu`."""
    ru0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    r = subprocess.run(cmd, capture_output=True, cwd=ROOT)
    elapsed = time.perf_counter() - t0
    ru1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    assert r.returncode == 0, (cmd, r.stdout, r.stderr)
    if cpu is not None:
        cpu.append(ru1.ru_utime + ru1.ru_stime - ru0.ru_utime - ru0.ru_stime)
    return elapsed


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("recipe", nargs="?", default=str(ROOT / "recipes/gb200/qwen3.5-397b-nvfp4-pd.yaml"))
    ap.add_argument("--runs", type=int, default=21)
    args = ap.parse_args()
    cmd = [sys.executable, "-m", "recipectl", "validate", args.recipe]
    floor_cmd = [sys.executable, "-c", FLOOR]
    if os.environ.get("PYTHONDONTWRITEBYTECODE"):
        print(
            "note: PYTHONDONTWRITEBYTECODE is set: modules without up-to-date bytecode are compiled again "
            "by every run; unset it to measure an installed CLI"
        )
    _timed(cmd)  # warm the page cache and write the .pyc files
    _timed(floor_cmd)
    model_cmd = [sys.executable, "-c", MODEL_FLOOR]
    times, floor, model_floor, cpu, floor_cpu = [], [], [], [], []
    for i in range(args.runs):
        pair = (("floor", floor_cmd), ("validate", cmd)) if i % 2 == 0 else (("validate", cmd), ("floor", floor_cmd))
        for what, c in pair:  # alternate which goes first, so neither always follows the other
            if what == "floor":
                floor.append(_timed(c, floor_cpu))
            else:
                times.append(_timed(c, cpu))
        model_floor.append(_timed(model_cmd))
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    med, fmed = statistics.median(times), statistics.median(floor)
    print(
        f"recipectl validate {Path(args.recipe).name}: median {med * 1000:.0f} ms, min {min(times) * 1000:.0f} ms, "
        f"max {max(times) * 1000:.0f} ms over {args.runs} runs (load average {load})"
    )
    print(
        f"  the interpreter importing yaml and pydantic alone ({FLOOR!r}): median {fmed * 1000:.0f} ms, "
        f"min {min(floor) * 1000:.0f} ms"
    )
    print(
        f"  ratio of the medians: {med / fmed:.2f} (goal: at most 1.3); recipectl's own share: median "
        f"{statistics.median(a - b for a, b in zip(times, floor, strict=True)) * 1000:.0f} ms"
    )
    # CPU time (user + system) is inflated much less than wall time by a busy machine
    mmed = statistics.median(model_floor)
    print(f"  reference: {MODEL_FLOOR!r}: median {mmed * 1000:.0f} ms; validate / it: {med / mmed:.2f}")
    cmed, cfloor = statistics.median(cpu), statistics.median(floor_cpu)
    print(
        f"  CPU time: validate median {cmed * 1000:.0f} ms, floor median {cfloor * 1000:.0f} ms, "
        f"ratio {cmed / cfloor:.2f}"
    )
    imp = subprocess.run([sys.executable, "-X", "importtime", *cmd[1:]], capture_output=True, text=True, cwd=ROOT)
    rows = [ln.split("|") for ln in imp.stderr.splitlines() if ln.startswith("import time:")]
    mods = [r[-1].strip() for r in rows]
    heavy = sorted({m for m in mods for h in HEAVY if m == h or m.startswith(h + ".")})
    print("heavy modules imported:", ", ".join(heavy) if heavy else "none")
    top = sorted(((int(r[1]), r[-1].strip()) for r in rows if r[1].strip().isdigit()), reverse=True)[:8]
    print("largest cumulative imports (us):", ", ".join(f"{name} {us}" for us, name in top))


if __name__ == "__main__":
    main()
