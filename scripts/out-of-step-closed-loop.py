"""A model of users out of step on shared compute, tried against plan's waves and not adopted
(docs/sla-planner.md, "A closed loop of one server, tried"): each user's request queues at one
server that does its prompt's prefill and then its state's transfer, one request after another
(the prefill endpoint batching the prompts that wait: its step overhead shared among them), and
is away for its decoding; mean-value analysis of that closed loop (exact for fixed service
times; the batch share makes the service depend on the queue, so an approximation), with decode's
residents from Little's law; a prefill endpoint's users as predict spreads them, ceil(users /
endpoints). Scores the out-of-step runs given against it and against plan's model
(perf.predict: the waves, or the pipeline where each role has GPUs of its own), each from the
run's own calibration. Markdown on stdout.

    .venv/bin/python scripts/out-of-step-closed-loop.py RECIPE RESULTS.json...

RECIPE: the recipe the runs' calibration was measured on (its layout). A run whose users started
together is refused.
"""

from __future__ import annotations

import json
import math
import statistics
import sys
from pathlib import Path

from recipectl.commands.calibrate import refit_on_layout, role_shapes
from recipectl.errors import RecipectlError
from recipectl.plan import perf
from recipectl.validate import load_variant

METRICS = ("ttft_s", "itl_s", "total_tps")


def closed_loop(
    model: perf.PerfModel, prefill: perf.RoleShape, decode: perf.RoleShape, *, isl: int, osl: int, users: int
) -> dict[str, float]:
    """TTFT, ITL and throughput of ``users`` users out of step: one server per prefill endpoint for
    prefill then transfer; decoding the time away."""
    steps = perf.wave_prefill_steps(1, isl, prefill)
    transfer = model.transfer.time_s(perf.transfer_bytes(prefill, isl))
    most_batched = max(1, (prefill.tokens_per_step or 10**9) // isl)
    per_server = math.ceil(users / prefill.endpoints)
    itl = model.decode.itl_s(users, isl + osl / 2)
    rate = residence = 0.0
    for _ in range(200):  # ITL depends on decode's residents, which depend on ITL: a fixed point
        away = itl + (osl - 1) * itl
        queue = 0.0
        for k in range(1, per_server + 1):  # exact MVA: an arrival sees the queue of k - 1 users
            batched = min(most_batched, 1 + queue)
            service = transfer + model.prefill.per_token_s * isl + model.prefill.overhead_s * steps / batched
            residence = service * (1 + queue)
            rate = k / (residence + away)
            queue = rate * residence
        residents = rate * away * prefill.endpoints / decode.endpoints
        settled = model.decode.itl_s(max(residents, 1.0), isl + osl / 2)
        if abs(settled - itl) < 1e-12:
            break
        itl = (itl + settled) / 2
    return {"ttft_s": residence + itl, "itl_s": itl, "total_tps": rate * prefill.endpoints * (isl + osl)}


class NotScored(Exception):
    """A run this script does not score, and why."""


def score(recipe_path: str, results: Path) -> dict[str, dict[str, list[float]]]:
    """Each point's error, (predicted - measured) / measured, per model and metric: NotScored for a
    file that is not an out-of-step run of RECIPE's deployment with points and a calibration."""
    try:
        run = json.loads(results.read_text())
    except (OSError, ValueError) as e:
        raise NotScored(f"{results}: not a benchmark run ({type(e).__name__}: {e})") from e
    if not isinstance(run, dict) or not run.get("held_out"):
        raise NotScored(f"{results}: no held-out points")
    if not run.get("out_of_step"):
        raise NotScored(f"{results}: its users started together; this model is of users out of step")
    recipe = load_variant(recipe_path, None).recipe
    if run.get("recipe") != recipe.name:
        raise NotScored(f"{results}: a run of {run.get('recipe')!r}, not of {recipe_path} ({recipe.name!r})")
    try:
        return _errors(run, recipe, recipe_path)
    except (KeyError, TypeError, IndexError, ValueError) as e:
        raise NotScored(f"{results}: a part of the run is missing or malformed ({type(e).__name__}: {e})") from e


def _errors(run: dict, recipe, recipe_path: str) -> dict[str, dict[str, list[float]]]:
    shapes, _, _ = role_shapes(recipe, recipe_path)
    model = refit_on_layout(run["calibration"], shapes, run.get("calibration_endpoints"))
    pre, dec = (shapes[r].model_copy(update={"endpoints": run["endpoints"][r]}) for r in ("prefill", "decode"))
    errors: dict[str, dict[str, list[float]]] = {
        "plan": {m: [] for m in METRICS},
        "closed loop": {m: [] for m in METRICS},
    }
    for row in run["held_out"]:
        point = {"isl": row["isl"], "osl": row["osl"]}
        planned = perf.predict(model, pre, dec, **point, concurrency=row["concurrency"])
        loop = closed_loop(model, pre, dec, **point, users=row["concurrency"])
        for m in METRICS:
            seen = row["metrics"][m]["measured"]
            errors["plan"][m].append((getattr(planned, m) - seen) / seen)
            errors["closed loop"][m].append((loop[m] - seen) / seen)
    return errors


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    recipe, *runs = argv
    try:
        scored = {results: score(recipe, Path(results)) for results in runs}
    except (NotScored, RecipectlError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print("| run | model | TTFT median / worst | ITL | throughput |\n|---|---|---|---|---|")
    for results, models in scored.items():
        for name, errs in models.items():
            cells = [
                f"{statistics.median(abs(e) for e in errs[m]):.0%} / {max(abs(e) for e in errs[m]):.0%}"
                for m in METRICS
            ]
            print(f"| {Path(results).stem} | {name} | " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
