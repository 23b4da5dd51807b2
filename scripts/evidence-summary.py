"""Condense the folder scripts/gpu-evidence.sh fills into one Markdown page: doctor's verdicts, the
P/D proof numbers, parity, planner vs the engine's capacity lines, bench per level, time to ready
per process, and what the negative runs printed.

    python scripts/evidence-summary.py EVIDENCE_DIR > summary.md

Only the standard library: it runs wherever the evidence was made.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

CAPACITY = re.compile(
    r"KV cache size: ([\d,]+) tokens.*?Maximum concurrency for ([\d,]+) tokens per request: "
    r"([\d.]+)x",
    re.S,
)


def load(path: Path):
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def text(path: Path, lines: int = 12) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").rstrip().splitlines()[-lines:])
    except OSError:
        return "(none)"


def cell(value) -> str:
    return str(value).replace("|", "\\|").replace("\n", " ")


def doctor_table(body, title: str) -> list[str]:
    if not body:
        return [f"### {title}", "", "(no output)", ""]
    out = [
        f"### {title}: {'PASSED' if body.get('passed') else 'FAILED'}",
        "",
        "| group | check | status | seconds | detail |",
        "|---|---|---|---|---|",
    ]
    for c in body["checks"]:
        out.append(
            f"| {c['group']} | {cell(c['name'])} | {c['status']} | {c.get('seconds') or 0:.1f} | "
            f"{cell(c['detail'])[:300]} |"
        )
    return out + [""]


def ready_times(state) -> list[str]:
    if not state:
        return ["(no run state)", ""]
    out = ["| process | started (s after launch) | /health after start (s) |", "|---|---|---|"]
    t0 = state.get("created_at") or 0
    for p in state.get("processes", []):
        s, r = p.get("started_at"), p.get("healthy_at")
        started = (s - t0) if s else float("nan")
        ready = (r - s) if r and s else float("nan")
        out.append(f"| {p['name']} | {started:.1f} | {ready:.1f} |")
    ready, first = state.get("ready_at"), state.get("first_request_s")
    if ready:
        out += [
            "",
            f"all healthy {ready - t0:.1f} s after launch; first request through the router took "
            f"{first if first is not None else float('nan'):.1f} s more",
        ]
    return out + [""]


def capacity(evidence: Path, plan) -> list[str]:
    out = [
        "| role | engine: KV tokens | engine: max concurrency @ len | planner: KV tokens | "
        "planner: max concurrency @ len |",
        "|---|---|---|---|---|",
    ]
    for role in ("prefill", "decode"):
        logs = sorted((evidence / "runs" / "latest").glob(f"{role}-*.log"))
        m = CAPACITY.search(logs[0].read_text(errors="replace")) if logs else None
        p = (plan or {}).get("roles", {}).get(role, {})
        eng = f"{m[1]} | {m[3]}x @ {m[2]}" if m else "(no line) | -"
        tokens = f"{p['cache_tokens']:,}" if "cache_tokens" in p else "-"
        out.append(
            f"| {role} | {eng} | {tokens} | {p.get('max_concurrency', 0):.2f}x @ {p.get('max_model_len', '-')} |"
        )
    return out + [""]


def bench(evidence: Path) -> list[str]:
    s = load(evidence / "bench" / "summary.json")
    if not s:
        return ["(no bench summary)", ""]
    out = [
        f"valid: {s.get('valid')}; GPUs: {s.get('gpus')}; workload ISL {s['workload']['isl']}, "
        f"OSL {s['workload']['osl']}",
        "",
        "| concurrency | completed | failed | total TPS | output TPS | TPS/GPU | TTFT p50 ms | TPOT p50 ms | valid |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for lv in s["levels"]:
        out.append(
            f"| {lv['concurrency']} | {lv.get('completed')} | {lv.get('failed')} | "
            f"{lv.get('total_tps') or 0:,.0f} | {lv.get('output_tps') or 0:,.0f} | "
            f"{lv.get('tps_per_gpu') or 0:,.0f} | {lv.get('ttft_median_ms') or 0:,.1f} | "
            f"{lv.get('tpot_median_ms') or 0:,.2f} | {lv.get('valid')} |"
        )
    return out + [""]


def main() -> int:
    ev = Path(sys.argv[1])
    out = [
        "# recipectl GPU evidence",
        "",
        "```",
        text(ev / "driver.log", 60),
        "```",
        "",
        "## Environment (doctor, before launch)",
        "",
    ]
    out += doctor_table(load(ev / "doctor-env.out"), "recipectl doctor (environment)")
    launch_log = load(ev / "launch.out") or load(ev / "launch-qwen3next.out")
    out += ["## Time to ready per process", ""] + ready_times(launch_log)
    out += ["## Doctor against the deployment", ""] + doctor_table(load(ev / "doctor.out"), "recipectl doctor")
    out += ["## Planner vs the engine's capacity lines", ""] + capacity(ev, load(ev / "plan.out"))
    out += ["## Bench", ""] + bench(ev)
    out += ["## Negative runs", ""]
    for name in ("neg-ds-validate", "neg-ds-launch", "neg-ds-forced-launch", "neg-gdn-launch", "neg-gdn-forced-launch"):
        out += [f"### {name}", "", "```", text(ev / f"{name}.out", 15), text(ev / f"{name}.err", 25), "```", ""]
    out += doctor_table(load(ev / "neg-gdn-doctor.out"), "doctor with the GDN backend missing")
    sys.stdout.write("\n".join(out) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
