"""The table (and plots) of a settings sweep: scripts/gpu-settings-sweep.sh's OUT directory in,
markdown out. For each setting: each arm's capacity as `recipectl plan` gave it before the launch,
then per concurrency level TPS/GPU, median TTFT and median TPOT of both arms and the change from
vLLM's default to the seed's value. A level that either arm calls invalid is marked so, never
compared. Plots (PNG, when matplotlib is importable): OUT/SETTING.png, TPS/GPU against
concurrency and against median TPOT, both arms.

    python3 scripts/settings-summary.py OUT [OUT2] > OUT/summary.md

With OUT2 (a second run of the same driver), each level also shows the second run's change and
whether the two agree in sign; where they do not, the effect is called noise.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

SETTINGS = ("prefill-mnbt", "stream-interval", "async-scheduling", "ssm-dtype")


def _load(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def _pct(seed: float | None, default: float | None) -> str:
    if not seed or not default:
        return "–"
    return f"{(seed - default) / default * 100:+.1f}%"


def _num(v: float | None, fmt: str = "{:,.1f}") -> str:
    return "–" if v is None else fmt.format(v)


def _capacity(out: Path, setting: str, arm: str) -> str:
    plan = _load(out / f"{setting}-{arm}.plan.json")
    if not plan:
        return "no plan"
    d = plan["roles"]["decode"]
    return (
        f"decode {d['cache_tokens']:,} KV tokens, block {d['block_size']}, max concurrency {d['max_concurrency']:.1f}x"
    )


def _plot(out: Path, setting: str, runs: dict[str, dict]) -> str | None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    for arm, run in runs.items():
        levels = [lv for lv in run["levels"] if lv["valid"]]
        left.plot([lv["concurrency"] for lv in levels], [lv["tps_per_gpu"] for lv in levels], marker="o", label=arm)
        right.plot([lv["tpot_median_ms"] for lv in levels], [lv["tps_per_gpu"] for lv in levels], marker="o", label=arm)
    levels = sorted({lv["concurrency"] for run in runs.values() for lv in run["levels"]})
    left.set(xscale="log", xlabel="concurrency", ylabel="TPS/GPU", title=setting)
    left.set_xticks(levels, [str(c) for c in levels])
    left.minorticks_off()
    right.set(xlabel="median TPOT (ms)", ylabel="TPS/GPU", title=setting)
    for ax in (left, right):
        ax.grid(True, alpha=0.3)
        ax.legend()
    fig.tight_layout()
    path = out / f"{setting}.png"
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path.name


def _levels(out: Path, setting: str) -> dict[str, dict[int, dict]] | None:
    """arm -> concurrency -> level of one run; None when an arm has no bench summary."""
    runs = {arm: _load(out / f"{setting}-{arm}" / "summary.json") for arm in ("default", "seed")}
    if not all(runs.values()):
        return None
    return {arm: {lv["concurrency"]: lv for lv in run["levels"]} for arm, run in runs.items()}


def _change(by_c: dict[str, dict[int, dict]] | None, c: int) -> float | None:
    """The seed's TPS/GPU against the default's at level c, as a fraction; None unless both are valid."""
    d, s = (by_c or {}).get("default", {}).get(c), (by_c or {}).get("seed", {}).get(c)
    if not (d and s and d["valid"] and s["valid"] and d["tps_per_gpu"]):
        return None
    return (s["tps_per_gpu"] - d["tps_per_gpu"]) / d["tps_per_gpu"]


def section(out: Path, setting: str, second: Path | None = None) -> list[str]:
    by_c = _levels(out, setting)
    lines = [f"## {setting}", ""]
    if by_c is None:
        return lines + ["not measured: a bench summary is missing (see driver.log)", ""]
    runs = {arm: {"levels": list(levels.values())} for arm, levels in by_c.items()}
    again = _levels(second, setting) if second else None
    for arm in ("default", "seed"):
        lines.append(f"- {arm}: {_capacity(out, setting, arm)}")
    head = "| concurrency | TPS/GPU default | TPS/GPU seed | change | TTFT ms default / seed | TPOT ms default / seed |"
    if second:
        head += " second run | verdict |"
    lines += ["", head, "|---" * (head.count("|") - 1) + "|"]
    for c in sorted(set(by_c["default"]) | set(by_c["seed"])):
        d, s = by_c["default"].get(c), by_c["seed"].get(c)
        if not (d and s and d["valid"] and s["valid"]):
            lines.append(f"| {c} | invalid or missing in one arm |" + " |" * (head.count("|") - 3))
            continue
        row = (
            f"| {c} | {_num(d['tps_per_gpu'])} | {_num(s['tps_per_gpu'])} | "
            f"{_pct(s['tps_per_gpu'], d['tps_per_gpu'])} | {_num(d['ttft_median_ms'])} / "
            f"{_num(s['ttft_median_ms'])} | {_num(d['tpot_median_ms'], '{:,.2f}')} / "
            f"{_num(s['tpot_median_ms'], '{:,.2f}')} |"
        )
        if second:
            first, other = _change(by_c, c), _change(again, c)
            if other is None:
                row += " – | not repeated |"
            else:
                same = (first > 0) == (other > 0)
                row += f" {other * 100:+.1f}% | {'same sign' if same else 'noise: the sign flips'} |"
        lines.append(row)
    plot = _plot(out, setting, runs)
    lines += ["", f"![{setting}]({plot})" if plot else "(no plot: matplotlib is not installed here)", ""]
    return lines


def main(argv: list[str]) -> int:
    out = Path(argv[0]) if argv else Path("gpu-settings")
    second = Path(argv[1]) if len(argv) > 1 else None
    done = [s for s in SETTINGS if (out / f"{s}-seed.yaml").exists()]
    lines = ["# Settings sweep: the seed's value against vLLM's default, one setting at a time", ""]
    for setting in done:
        lines += section(out, setting, second)
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
