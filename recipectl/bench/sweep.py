"""Run `vllm bench serve` once per concurrency level against the router; summarise and gate.

TPS per GPU is the seed's headline metric: (input + output tokens) / duration / GPUs of all
prefill and decode endpoints. On the CPU platform each endpoint counts as one device. Tokens/s per
user (interactivity) is what one user sees, 1000 / median TPOT: the field plots throughput per GPU
against it, and the levels no other level beats on both are the Pareto frontier (`pareto`).
"""

from __future__ import annotations

import csv
import io
import json
import os
import secrets
import subprocess
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

from ..engine_env import engine_venv
from ..fileio import write_atomic
from ..schema import Recipe, WorkloadSection

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure
from ..topology import place


@dataclass
class Level:
    concurrency: int
    num_prompts: int
    result_file: str
    seed: int = 0  # vllm bench serve's --seed: the level's prompts
    completed: int = 0
    failed: int = 0
    total_input_tokens: int = 0
    total_output_tokens: int = 0
    duration_s: float = 0.0
    total_tps: float = 0.0
    output_tps: float = 0.0
    tps_per_gpu: float = 0.0
    tps_per_user: float | None = None  # 1000 / median TPOT: output tokens/s one user sees
    request_throughput: float = 0.0
    ttft_median_ms: float | None = None
    ttft_p99_ms: float | None = None
    tpot_median_ms: float | None = None
    tpot_p99_ms: float | None = None
    itl_median_ms: float | None = None
    itl_p99_ms: float | None = None
    valid: bool = True
    problems: list[str] = field(default_factory=list)


def devices(recipe: Recipe) -> int:
    """The devices the deployment runs on, for TPS/GPU: each GPU once, also when prefill and decode
    share it (`devices`); on the CPU platform, one per endpoint rank."""
    if recipe.cluster.is_cpu:
        return sum(s.endpoints * s.parallel.gpus for s in recipe.roles.values())
    return len({(p.node, g) for p in place(recipe).processes for g in p.gpus})


def _workload(recipe: Recipe) -> WorkloadSection:
    """The workload a sweep runs: a recipe without one (accuracy only) has nothing to sweep."""
    if recipe.workload is None:
        raise ValueError(f"recipe {recipe.name} has no workload to sweep")
    return recipe.workload


def bench_argv(
    recipe: Recipe, router_url: str, concurrency: int, num_prompts: int, out_dir: Path, result_file: str, seed: int
) -> list[str]:
    w = _workload(recipe)
    model = os.path.expanduser(recipe.model.path)
    exe = engine_venv(recipe.engine.venv) / "bin" / "vllm"
    return [
        str(exe) if exe.exists() else "vllm",
        "bench",
        "serve",
        "--backend",
        "vllm",
        "--base-url",
        router_url,
        "--endpoint",
        "/v1/completions",
        "--model",
        model,
        "--served-model-name",
        recipe.served_name,
        "--tokenizer",
        model,
        "--dataset-name",
        "random",
        "--random-input-len",
        str(w.isl),
        "--random-output-len",
        str(w.osl),
        "--random-range-ratio",
        str(w.random_range_ratio),
        "--max-concurrency",
        str(concurrency),
        "--num-prompts",
        str(num_prompts),
        "--ignore-eos",
        "--percentile-metrics",
        "ttft,tpot,itl,e2el",
        "--save-result",
        "--result-dir",
        str(out_dir),
        "--result-filename",
        result_file,
        "--disable-tqdm",
        "--seed",
        str(seed),
    ]


def summarise(raw: dict[str, Any], level: Level, gpus: int, max_failed_ratio: float) -> Level:
    level.completed = int(raw.get("completed", 0))
    level.failed = int(raw.get("failed", 0) or 0)
    level.total_input_tokens = int(raw.get("total_input_tokens", 0))
    level.total_output_tokens = int(raw.get("total_output_tokens", 0))
    level.duration_s = float(raw.get("duration", 0.0))
    level.total_tps = float(raw.get("total_token_throughput", 0.0))
    level.output_tps = float(raw.get("output_throughput", 0.0))
    level.request_throughput = float(raw.get("request_throughput", 0.0))
    if level.duration_s > 0:
        level.tps_per_gpu = (level.total_input_tokens + level.total_output_tokens) / level.duration_s / gpus
    for metric in ("ttft", "tpot", "itl"):
        setattr(level, f"{metric}_median_ms", raw.get(f"median_{metric}_ms"))
        setattr(level, f"{metric}_p99_ms", raw.get(f"p99_{metric}_ms"))
    if level.tpot_median_ms:
        level.tps_per_user = 1000.0 / level.tpot_median_ms
    # Validity gates: a benchmark that "succeeds" with nothing generated is not a result.
    if level.total_output_tokens == 0:
        level.problems.append("zero output tokens")
    if level.completed < level.num_prompts:
        level.problems.append(f"{level.completed} of {level.num_prompts} requests completed")
    if level.num_prompts and level.failed / level.num_prompts > max_failed_ratio:
        level.problems.append(f"{level.failed} failed requests")
    level.valid = not level.problems
    return level


def run_sweep(
    recipe: Recipe,
    router_url: str,
    out_dir: Path,
    *,
    on_level: Callable[[Level], None] | None = None,
    max_failed_ratio: float = 0.0,
    level_timeout_s: float = 3600,
    seed: int | None = None,
) -> list[Level]:
    """Each level's prompts from a seed of its own, ``seed`` + the level's index (a random one
    where none is given), recorded in the level: vLLM's random dataset draws the same first
    prompts from one seed whatever their number (vLLM 0.32.0's RandomDataset: the 4 of a level of
    4 are the first 4 of a level of 16), so one seed for every level, or for two runs on one
    deployment, sends a later level prompts the engine's prefix cache already holds."""
    workload = _workload(recipe)
    base = secrets.randbelow(1 << 30) if seed is None else seed
    out_dir.mkdir(parents=True, exist_ok=True)
    gpus = devices(recipe)
    levels: list[Level] = []
    for i, c in enumerate(workload.concurrency):
        n = c * workload.prompts_per_concurrency
        level = Level(concurrency=c, num_prompts=n, result_file=f"level-c{c}.json", seed=base + i)
        argv = bench_argv(recipe, router_url, c, n, out_dir, level.result_file, level.seed)
        log = out_dir / f"level-c{c}.log"
        with open(log, "w") as f:
            f.write("$ " + " ".join(argv) + "\n")
            f.flush()
            try:
                proc = subprocess.run(
                    argv,
                    stdout=f,
                    stderr=subprocess.STDOUT,
                    timeout=level_timeout_s,
                    env={**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"},
                )
                rc = proc.returncode
            except subprocess.TimeoutExpired:
                rc = 124
        result = out_dir / level.result_file
        if rc != 0 or not result.exists():
            tail = "\n".join(log.read_text(errors="replace").splitlines()[-15:])
            level.valid = False
            level.problems.append(f"vllm bench serve exited {rc}: {tail[-800:]}")
        else:
            summarise(json.loads(result.read_text()), level, gpus, max_failed_ratio)
        levels.append(level)
        if on_level:
            on_level(level)
        if not level.valid:
            break  # the deployment is broken; later levels would only measure that
    return levels


def write_outputs(recipe: Recipe, levels: list[Level], out_dir: Path, router_url: str) -> dict[str, Any]:
    summary = {
        "recipe": recipe.name,
        "router": router_url,
        "gpus": devices(recipe),
        "workload": _workload(recipe).model_dump(),
        "valid": all(lv.valid for lv in levels),
        "levels": [asdict(lv) for lv in levels],
    }
    write_atomic(out_dir / "summary.json", json.dumps(summary, indent=2))
    fields = [f for f in asdict(levels[0]).keys() if f != "problems"] if levels else []
    table = io.StringIO(newline="")
    w = csv.DictWriter(table, fieldnames=fields, extrasaction="ignore")
    w.writeheader()
    for lv in levels:
        w.writerow(asdict(lv))
    write_atomic(out_dir / "summary.csv", table.getvalue())
    plot(levels, out_dir, recipe.name)
    return summary


def plot(levels: list[Level], out_dir: Path, title: str) -> None:
    """throughput.png beside the summary; skipped (with a note in the summary folder) without
    matplotlib: the numbers matter more than the picture, and a sweep is never lost for it."""
    ok = [lv for lv in levels if lv.valid]
    if not ok:
        return
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        (out_dir / "throughput.png.missing").write_text(
            "no plot: matplotlib is not installed (pip install 'recipectl[plot]')\n"
        )
        return
    fig, ax = plt.subplots(figsize=(6, 4))
    ax.plot([lv.concurrency for lv in ok], [lv.tps_per_gpu for lv in ok], marker="o")
    ax.set_xscale("log", base=2)
    _finish(plt, fig, ax, "concurrency", title, out_dir / "tps_per_gpu_vs_concurrency.png")
    fig, ax = plt.subplots(figsize=(6, 4))
    xs = [lv.tpot_median_ms or 0 for lv in ok]
    ax.plot(xs, [lv.tps_per_gpu for lv in ok], marker="o")
    for lv, x in zip(ok, xs, strict=True):
        ax.annotate(f"c={lv.concurrency}", (x, lv.tps_per_gpu), fontsize=7, xytext=(3, 3), textcoords="offset points")
    _finish(plt, fig, ax, "median TPOT (ms)  — interactivity", title, out_dir / "tps_per_gpu_vs_tpot.png")
    plot_pareto(plt, ok, out_dir / PARETO_PLOT, title)


PARETO_PLOT = "tps_per_gpu_vs_tps_per_user.png"


def pareto(levels: list[Level]) -> list[Level]:
    """The levels no other level beats on both throughput per GPU and tokens/s per user, by
    tokens/s per user: the frontier the field draws (a level that another matches on one and beats
    on the other is off it). Levels without a TPOT have no tokens/s per user and no place on it."""
    pts = sorted((lv for lv in levels if lv.tps_per_user), key=lambda lv: (-(lv.tps_per_user or 0.0), -lv.tps_per_gpu))
    front: list[Level] = []
    for lv in pts:  # from the most interactive: each one on the frontier has more throughput than all before
        if not front or lv.tps_per_gpu > front[-1].tps_per_gpu:
            front.append(lv)
    return sorted(front, key=lambda lv: lv.tps_per_user or 0.0)


def plot_pareto(plt: ModuleType, levels: list[Level], path: Path, title: str) -> None:
    """Throughput per GPU against tokens/s per user, each level marked with its concurrency and the
    Pareto frontier drawn through the levels on it: the field's picture of a configuration."""
    pts = [lv for lv in levels if lv.tps_per_user]
    if not pts:
        return
    fig, ax = plt.subplots(figsize=(6, 4))
    ax.scatter([lv.tps_per_user for lv in pts], [lv.tps_per_gpu for lv in pts], color="tab:blue", zorder=3)
    front = pareto(pts)
    ax.plot(
        [lv.tps_per_user for lv in front],
        [lv.tps_per_gpu for lv in front],
        color="tab:orange",
        label="Pareto frontier",
        zorder=2,
    )
    for lv in pts:
        ax.annotate(
            f"c={lv.concurrency}",
            (lv.tps_per_user, lv.tps_per_gpu),
            fontsize=7,
            xytext=(3, 3),
            textcoords="offset points",
        )
    ax.legend(fontsize=7)
    _finish(plt, fig, ax, "tokens/s per user  (1000 / median TPOT)", title, path)


def _finish(plt: ModuleType, fig: Figure, ax: Axes, xlabel: str, title: str, path: Path) -> None:
    """Every sweep plot's y axis (throughput per GPU), title, grid and file; the figure is closed."""
    ax.set_xlabel(xlabel)
    ax.set_ylabel("total tokens/s per GPU")
    ax.set_title(title, fontsize=9)
    ax.grid(True, alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def compare(a: dict[str, Any], b: dict[str, Any]) -> list[dict[str, Any]]:
    """Level-by-level ratios B / A for the levels both runs have."""
    by_c = {lv["concurrency"]: lv for lv in a["levels"]}
    rows = []
    for lv in b["levels"]:
        base = by_c.get(lv["concurrency"])
        if not base:
            continue
        rows.append(
            {
                "concurrency": lv["concurrency"],
                "tps_per_gpu_a": base["tps_per_gpu"],
                "tps_per_gpu_b": lv["tps_per_gpu"],
                "tps_per_gpu_ratio": _ratio(base, lv, "tps_per_gpu"),
                "tps_per_user_ratio": _ratio(base, lv, "tps_per_user"),
                "tpot_median_ratio": _ratio(base, lv, "tpot_median_ms"),
                "ttft_median_ratio": _ratio(base, lv, "ttft_median_ms"),
            }
        )
    return rows


def _ratio(a: dict[str, Any], b: dict[str, Any], key: str) -> float | None:
    """b[key] / a[key]; None when either is missing or a's is 0."""
    x, y = a.get(key), b.get(key)
    return None if not x or y is None else y / x
