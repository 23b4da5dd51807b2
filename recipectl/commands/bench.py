"""`recipectl bench RECIPE` and `recipectl bench compare A B`."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.text import Text

from ..bench.sweep import compare, run_sweep, write_outputs
from ..errors import RecipectlError
from ..fileio import JsonRefused, UnreadableFile, read_json_bounded
from ..loader import LoadedRecipe
from ..runs.state import find_run, runs_root
from ..schema import Recipe, WorkloadSection
from ..validate import load_variant
from .ledger import RecipePredictor, bench_entries, ledger_file, recipe_predictor, record
from .tables import Col, fitted, num

# bench's table: what a level achieved, then how long users waited
LEVEL_COLUMNS = [
    [
        Col("conc.", "conc.", lambda lv: str(lv.concurrency)),
        Col("TPS/GPU", "TPS\n/GPU", lambda lv: num(lv.tps_per_gpu, 2)),
        Col("tok/s/user", "tok/s\n/user", lambda lv: num(lv.tps_per_user)),
        Col("total tok/s", "total\ntok/s", lambda lv: num(lv.total_tps)),
        Col("out tok/s", "out\ntok/s", lambda lv: num(lv.output_tps)),
        Col("req/s", "req/s", lambda lv: num(lv.request_throughput, 2)),
        Col("failed", "failed", lambda lv: str(lv.failed)),
        Col("valid", "valid", lambda lv: "yes" if lv.valid else "NO"),
    ],
    [
        Col("TTFT p50 ms", "TTFT\np50", lambda lv: num(lv.ttft_median_ms)),
        Col("TTFT p99 ms", "TTFT\np99", lambda lv: num(lv.ttft_p99_ms)),
        Col("TPOT p50 ms", "TPOT\np50", lambda lv: num(lv.tpot_median_ms)),
        Col("TPOT p99 ms", "TPOT\np99", lambda lv: num(lv.tpot_p99_ms)),
        Col("ITL p50 ms", "ITL\np50", lambda lv: num(lv.itl_median_ms)),
        Col("ITL p99 ms", "ITL\np99", lambda lv: num(lv.itl_p99_ms)),
    ],
]
LEVEL_TITLES = ["throughput", "latency (ms)"]

# bench compare's: B against A
_ratio = lambda v: "-" if v is None else f"{v:.3f}"  # noqa: E731
COMPARE_COLUMNS = [
    [
        Col("concurrency", "conc.", lambda r: str(r["concurrency"])),
        Col("TPS/GPU A", "TPS/GPU\nA", lambda r: num(r["tps_per_gpu_a"], 2)),
        Col("TPS/GPU B", "TPS/GPU\nB", lambda r: num(r["tps_per_gpu_b"], 2)),
        Col("TPS/GPU B/A", "TPS/GPU\nB/A", lambda r: _ratio(r["tps_per_gpu_ratio"])),
    ],
    [
        Col("tok/s/user B/A", "tok/s/user\nB/A", lambda r: _ratio(r.get("tps_per_user_ratio"))),
        Col("TPOT B/A", "TPOT\nB/A", lambda r: _ratio(r["tpot_median_ratio"])),
        Col("TTFT B/A", "TTFT\nB/A", lambda r: _ratio(r["ttft_median_ratio"])),
    ],
]


def print_fitted(title: str, rows: list, groups: list, titles: list[str], label) -> None:
    """`title`, then `rows` laid out to the terminal's width (commands/tables.py), on stdout."""
    out = Console(highlight=False)
    out.print(Text(title))
    for part in fitted(out, rows, groups, titles=titles, label=label):
        out.print(part)


def print_levels(levels: list, title: str) -> None:
    print_fitted(title, levels, LEVEL_COLUMNS, LEVEL_TITLES, lambda lv: f"concurrency {lv.concurrency}")


MAX_SUMMARY_BYTES = 16 << 20  # a summary is a few KB per concurrency level


def _load_summary(ref: str) -> dict:
    """A bench output's summary.json (bounded, regular file, JSON nested a few levels), with the
    fields compare reads of the types it reads them as."""
    p = Path(ref)
    if p.is_dir():
        p = p / "summary.json"
    fix = "give a bench output directory (it holds summary.json)"
    try:
        data = read_json_bounded(p, MAX_SUMMARY_BYTES)
    except UnreadableFile as e:
        raise RecipectlError(f"cannot read a bench summary from {ref}: {e.reason}", fix=fix) from None
    except JsonRefused as e:
        raise RecipectlError(f"{p}: not a bench summary: {e}", fix=fix) from None
    levels = data.get("levels") if isinstance(data, dict) else None
    if not isinstance(data, dict) or not isinstance(levels, list) or not all(_summary_level(lv) for lv in levels):
        raise RecipectlError(
            f"{p}: not a bench summary: it needs levels, each with a concurrency (a whole number) "
            "and numbers for tps_per_gpu, tps_per_user, tpot_median_ms, ttft_median_ms",
            fix=fix,
        )
    return data


def _summary_level(lv: object) -> bool:
    def number(v: object, *, none: bool = True) -> bool:
        return (v is None and none) or (isinstance(v, (int, float)) and not isinstance(v, bool))

    return (
        isinstance(lv, dict)
        and isinstance(lv.get("concurrency"), int)
        and number(lv.get("tps_per_gpu"), none=False)
        and all(number(lv.get(k)) for k in ("tps_per_user", "tpot_median_ms", "ttft_median_ms"))
    )


def bench_compare(a: str, b: str, *, as_json: bool) -> int:
    rows = compare(_load_summary(a), _load_summary(b))
    if as_json:
        sys.stdout.write(json.dumps(rows, indent=2) + "\n")
        return 0
    print_fitted(
        f"B / A   (A={a}, B={b})",
        rows,
        COMPARE_COLUMNS,
        ["throughput", "per user and latency"],
        lambda r: f"concurrency {r['concurrency']}",
    )
    return 0


def require_workload(recipe: Recipe, recipe_path: str) -> WorkloadSection:
    """bench sweeps the recipe's workload: a recipe without one (accuracy only) cannot be benched."""
    if recipe.workload is None:
        raise RecipectlError(
            f"{recipe_path} has no workload: bench sends random prompts of workload.isl/osl tokens at each "
            "workload.concurrency level",
            fix="workload:\n  isl: 8192\n  osl: 1024\n  concurrency: [1, 64]",
        )
    return recipe.workload


def ledger_predictor(
    loaded: LoadedRecipe, recipe_path: str, calibration: str | None, console: Console
) -> RecipePredictor | None:
    """The plan's model the ledger holds each level against. A --calibration that cannot be used
    is refused before the sweep (exit 2); without one, a recipe the planner cannot model is
    benched all the same, its levels left out of the ledger."""
    if calibration:
        return recipe_predictor(loaded, recipe_path, calibration)
    try:
        return recipe_predictor(loaded, recipe_path, None)
    except (RecipectlError, ValueError) as e:
        console.print(f"[yellow]the plan ledger is left out[/]: the plan cannot model this recipe ({e})")
        return None


def file_levels(
    predictor: RecipePredictor | None, levels: list, workload: WorkloadSection, run_id: str | None, console: Console
) -> str | None:
    """Each valid level's line in the plan ledger; the ledger's path, None when nothing was filed. A
    ledger that cannot be written is said, and the sweep's results stand."""
    entries = bench_entries(predictor, levels, isl=workload.isl, osl=workload.osl, run_id=run_id) if predictor else []
    if not entries or predictor is None:
        return None
    try:
        return str(record(predictor.recipe, entries))
    except OSError as e:
        console.print(f"[yellow]not filed in the plan ledger[/] {ledger_file(predictor.recipe)}: {e}")
        return None


def bench(
    recipe_path: str,
    *,
    out: str | None,
    run: str | None,
    router: str | None,
    max_failed_ratio: float,
    as_json: bool,
    variant: str | None = None,
    calibration: str | None = None,
) -> int:
    loaded = load_variant(recipe_path, variant)
    recipe = loaded.recipe
    workload = require_workload(recipe, recipe_path)
    console = Console(stderr=True)
    predictor = ledger_predictor(loaded, recipe_path, calibration, console)
    run_id = None
    if router is None:
        state = find_run(
            run or recipe_path, runs_root(recipe.launch.run_dir), lambda _: (recipe.name, recipe.launch.run_dir)
        )
        if state.router_url is None:  # a Slurm job whose router has not come up yet
            raise RecipectlError(
                f"run {state.run_id} has no router yet: nothing to bench",
                fix="wait until `recipectl status` shows the router's URL, or give --router URL",
            )
        router, run_id = state.router_url, state.run_id
        out_dir = Path(out) if out else Path(state.run_dir) / f"bench-{time.strftime('%Y%m%d-%H%M%S')}"
    else:
        out_dir = Path(out) if out else Path(f"bench-{recipe.name}-{time.strftime('%Y%m%d-%H%M%S')}")
    levels_total = len(workload.concurrency)
    with Progress(
        TextColumn("bench"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.description}"),
        TimeElapsedColumn(),
        console=console,
    ) as bar:
        task = bar.add_task(f"concurrency {workload.concurrency[0]}", total=levels_total)

        def on_level(lv):
            mark = "ok" if lv.valid else "INVALID: " + "; ".join(lv.problems)[:200]
            bar.console.print(
                f"c={lv.concurrency}: {lv.tps_per_gpu:.2f} TPS/GPU, {num(lv.tps_per_user)} tok/s/user, "
                f"TPOT p50 {lv.tpot_median_ms or 0:.1f} ms — {mark}",
                highlight=False,
            )
            done = bar.tasks[0].completed + 1
            nxt = workload.concurrency[done] if done < levels_total else None
            bar.update(task, advance=1, description=f"concurrency {nxt}" if nxt else "done")

        levels = run_sweep(recipe, router, out_dir, on_level=on_level, max_failed_ratio=max_failed_ratio)
    summary = write_outputs(recipe, levels, out_dir, router)
    summary["out_dir"] = str(out_dir)
    summary["ledger"] = file_levels(predictor, levels, workload, run_id, console)
    if as_json:
        sys.stdout.write(json.dumps(summary, indent=2) + "\n")
    else:
        print_levels(levels, f"{recipe.name}: {summary['gpus']} device(s); results in {out_dir}")
    invalid = [lv for lv in levels if not lv.valid]
    if invalid:
        console.print(f"[red]invalid run[/]: concurrency {invalid[0].concurrency}: {'; '.join(invalid[0].problems)}")
        return 1
    return 0
