"""`recipectl bench RECIPE` and `recipectl bench compare A B`."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from ..errors import RecipectlError


def _load_summary(ref: str) -> dict:
    p = Path(ref)
    if p.is_dir():
        p = p / "summary.json"
    try:
        return json.loads(p.read_text())
    except (OSError, ValueError) as e:
        raise RecipectlError(f"cannot read a bench summary from {ref}: {e}",
                             fix="give a bench output directory (it holds summary.json)") from e


def bench_compare(a: str, b: str, *, as_json: bool) -> int:
    from ..bench.sweep import compare

    rows = compare(_load_summary(a), _load_summary(b))
    if as_json:
        sys.stdout.write(json.dumps(rows, indent=2) + "\n")
        return 0
    from rich.console import Console
    from rich.table import Table

    t = Table(title=f"B / A   (A={a}, B={b})", title_justify="left")
    for col in ("concurrency", "TPS/GPU A", "TPS/GPU B", "TPS/GPU B/A", "TPOT B/A", "TTFT B/A"):
        t.add_column(col, justify="right")
    fmt = lambda v: "-" if v is None else f"{v:.3f}"  # noqa: E731
    for r in rows:
        t.add_row(str(r["concurrency"]), f"{r['tps_per_gpu_a']:.2f}", f"{r['tps_per_gpu_b']:.2f}",
                  fmt(r["tps_per_gpu_ratio"]), fmt(r["tpot_median_ratio"]), fmt(r["ttft_median_ratio"]))
    Console().print(t)
    return 0


def require_workload(recipe, recipe_path: str) -> None:
    """bench sweeps the recipe's workload: a recipe without one (accuracy only) cannot be benched."""
    if recipe.workload is None:
        raise RecipectlError(
            f"{recipe_path} has no workload: bench sends random prompts of workload.isl/osl tokens at each "
            "workload.concurrency level",
            fix="workload:\n  isl: 8192\n  osl: 1024\n  concurrency: [1, 64]")


def bench(recipe_path: str, *, out: str | None, run: str | None, router: str | None, max_failed_ratio: float,
          as_json: bool, variant: str | None = None) -> int:
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from ..bench.sweep import run_sweep, write_outputs
    from ..runs.state import find_run, runs_root
    from ..validate import load_variant

    recipe = load_variant(recipe_path, variant).recipe
    require_workload(recipe, recipe_path)
    console = Console(stderr=True)
    if router is None:
        state = find_run(run or recipe_path, runs_root(recipe.launch.run_dir),
                         lambda _: (recipe.name, recipe.launch.run_dir))
        router = state.router_url
        out_dir = Path(out) if out else Path(state.run_dir) / f"bench-{time.strftime('%Y%m%d-%H%M%S')}"
    else:
        out_dir = Path(out) if out else Path(f"bench-{recipe.name}-{time.strftime('%Y%m%d-%H%M%S')}")
    levels_total = len(recipe.workload.concurrency)
    with Progress(TextColumn("bench"), BarColumn(), MofNCompleteColumn(), TextColumn("{task.description}"),
                  TimeElapsedColumn(), console=console) as bar:
        task = bar.add_task(f"concurrency {recipe.workload.concurrency[0]}", total=levels_total)

        def on_level(lv):
            mark = "ok" if lv.valid else "INVALID: " + "; ".join(lv.problems)[:200]
            bar.console.print(f"c={lv.concurrency}: {lv.tps_per_gpu:.2f} TPS/GPU, {lv.output_tps:.2f} out tok/s, "
                              f"TPOT p50 {lv.tpot_median_ms or 0:.1f} ms — {mark}", highlight=False)
            done = bar.tasks[0].completed + 1
            nxt = recipe.workload.concurrency[done] if done < levels_total else None
            bar.update(task, advance=1, description=f"concurrency {nxt}" if nxt else "done")

        levels = run_sweep(recipe, router, out_dir, on_level=on_level, max_failed_ratio=max_failed_ratio)
    summary = write_outputs(recipe, levels, out_dir, router)
    summary["out_dir"] = str(out_dir)
    if as_json:
        sys.stdout.write(json.dumps(summary, indent=2) + "\n")
    else:
        from rich.table import Table

        t = Table(title=f"{recipe.name}: {summary['gpus']} device(s); results in {out_dir}", title_justify="left")
        for col in ("conc.", "TPS/GPU", "total tok/s", "out tok/s", "req/s", "TTFT p50/p99 ms", "TPOT p50/p99 ms",
                    "ITL p50/p99 ms", "failed", "valid"):
            t.add_column(col, justify="right")
        f = lambda v: "-" if v is None else f"{v:.1f}"  # noqa: E731
        for lv in levels:
            t.add_row(str(lv.concurrency), f"{lv.tps_per_gpu:.2f}", f"{lv.total_tps:.1f}", f"{lv.output_tps:.1f}",
                      f"{lv.request_throughput:.2f}", f"{f(lv.ttft_median_ms)}/{f(lv.ttft_p99_ms)}",
                      f"{f(lv.tpot_median_ms)}/{f(lv.tpot_p99_ms)}", f"{f(lv.itl_median_ms)}/{f(lv.itl_p99_ms)}",
                      str(lv.failed), "yes" if lv.valid else "[red]NO[/]")
        Console().print(t)
    invalid = [lv for lv in levels if not lv.valid]
    if invalid:
        console.print(f"[red]invalid run[/]: concurrency {invalid[0].concurrency}: {'; '.join(invalid[0].problems)}")
        return 1
    return 0
