"""How long `recipectl validate` takes on the seed's GB200 recipe, as a user runs it (a new
process each time), and which heavy modules its start-up imports (none may be an engine).

    .venv/bin/python benchmarks/validate_startup.py [--runs 15] [RECIPE]

Target (issue: validate): under 0.3 s wall on a 2-core machine.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
HEAVY = ("vllm", "torch", "httpx", "jinja2", "rich.live", "numpy", "transformers")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("recipe", nargs="?", default=str(ROOT / "recipes/gb200/qwen3.5-397b-nvfp4-pd.yaml"))
    ap.add_argument("--runs", type=int, default=15)
    args = ap.parse_args()
    cmd = [sys.executable, "-m", "recipectl", "validate", args.recipe]
    subprocess.run(cmd, capture_output=True)  # warm the page cache and .pyc files
    times = []
    for _ in range(args.runs):
        t0 = time.perf_counter()
        r = subprocess.run(cmd, capture_output=True)
        times.append(time.perf_counter() - t0)
        assert r.returncode == 0, r.stdout + r.stderr
    print(f"recipectl validate {Path(args.recipe).name}: median {statistics.median(times) * 1000:.0f} ms, "
          f"min {min(times) * 1000:.0f} ms, max {max(times) * 1000:.0f} ms over {args.runs} runs")
    imp = subprocess.run([sys.executable, "-X", "importtime", *cmd[1:]], capture_output=True, text=True)
    mods = [ln.split("|")[-1].strip() for ln in imp.stderr.splitlines() if ln.startswith("import time:")]
    heavy = sorted({m for m in mods for h in HEAVY if m == h or m.startswith(h + ".")})
    print("heavy modules imported:", ", ".join(heavy) if heavy else "none")
    top = sorted(((int(ln.split("|")[1]), ln.split("|")[-1].strip()) for ln in imp.stderr.splitlines()
                  if ln.startswith("import time:") and ln.split("|")[1].strip().isdigit()), reverse=True)[:8]
    print("largest cumulative imports (us):", ", ".join(f"{name} {us}" for us, name in top))


if __name__ == "__main__":
    main()
