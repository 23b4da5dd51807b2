"""Planner vs engine, per recipe and role, from gpu-planner-evidence.sh's folder: what
`recipectl plan` predicted (NAME.plan.json) next to what vLLM printed at start-up
(NAME.ROLE.capacity.txt). Markdown on stdout."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

TOKENS = re.compile(r"KV cache size: ([\d,]+) tokens")
CONCURRENCY = re.compile(r"Maximum concurrency for ([\d,]+) tokens per request: ([\d.]+)x")
BLOCK = re.compile(r"attention block size to (\d+) tokens")


def _last(pattern: re.Pattern, text: str):
    found = pattern.findall(text)
    return found[-1] if found else None


def measured(path: Path) -> dict:
    text = path.read_text(errors="replace") if path.exists() else ""
    tokens, conc, block = _last(TOKENS, text), _last(CONCURRENCY, text), _last(BLOCK, text)
    return {
        "tokens": int(tokens.replace(",", "")) if tokens else None,
        "concurrency": float(conc[1]) if conc else None,
        "block": int(block) if block else None,
    }


def _diff(planned, engine) -> str:
    if planned is None or not engine:
        return "-"
    return f"{100 * (planned - engine) / engine:+.2f}%"


def main(folder: str) -> int:
    out = Path(folder)
    print(
        "| recipe | role | block (plan / engine) | KV-cache tokens (plan / engine, diff) | "
        "max concurrency (plan / engine, diff) |"
    )
    print("|---|---|---|---|---|")
    for plan_file in sorted(out.glob("*.plan.json")):
        name = plan_file.name[: -len(".plan.json")]
        try:
            plan = json.loads(plan_file.read_text())
        except ValueError:
            print(f"| {name} | - | plan failed | | |")
            continue
        for role, p in plan["roles"].items():
            m = measured(out / f"{name}.{role}.capacity.txt")
            print(
                f"| {name} | {role} | {p['block_size']} / {m['block'] or '?'} | "
                f"{p['cache_tokens']:,} / {m['tokens'] if m['tokens'] is None else format(m['tokens'], ',')}, "
                f"{_diff(p['cache_tokens'], m['tokens'])} | "
                f"{p['max_concurrency']:.2f}x / {m['concurrency'] or '?'}x, "
                f"{_diff(p['max_concurrency'], m['concurrency'])} |"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "gpu-planner"))
