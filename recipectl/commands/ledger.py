"""Where the plan ledger (recipectl/plan/ledger.py) lives and what `plan --check` and `bench` file in
it: the plan's prediction for the recipe's own configuration (its endpoints and layouts as
written) at each point they measured.

The ledger is `plan-ledger.jsonl` in the directory the recipe's runs are kept in
(`$RECIPECTL_RUN_DIR`, else the recipe's `launch.run_dir`, else `.recipectl/runs`): one file for
every run of every recipe kept there, each line naming its recipe, so that a run directory removed
by hand takes no history with it, and `plan RECIPE --ledger` finds it without a run id.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..loader import LoadedRecipe
from ..plan.ledger import LEDGER_FILE, LedgerEntry, Metrics, Point, Source, append_entries, make_entry
from ..plan.perf import PerfModel, Prediction, RoleShape, predict
from ..runs.state import runs_root
from ..schema import Recipe
from .calibrate import analytic_for, read_calibration, role_shapes
from .measuring import describe


def ledger_file(recipe: Recipe) -> Path:
    return runs_root(recipe.launch.run_dir) / LEDGER_FILE


@dataclass(frozen=True)
class RecipePredictor:
    """The performance model of one recipe's own configuration on this host: calibrated from
    ``calibration`` (refused unless it describes this configuration), or the analytic one."""

    recipe: Recipe
    identity: dict  # describe(): the fingerprint the ledger files each entry under
    prefill: RoleShape
    decode: RoleShape
    model: PerfModel
    calibration: str | None
    vocab_size: int

    def at(self, isl: int, osl: int, concurrency: int) -> Prediction:
        return predict(self.model, self.prefill, self.decode, isl=isl, osl=osl, concurrency=concurrency)

    def configuration(self) -> dict[str, int]:
        """The layout predicted (and measured): endpoints and TP per role."""
        return {
            "prefill_endpoints": self.prefill.endpoints,
            "decode_endpoints": self.decode.endpoints,
            "prefill_tp": self.prefill.tp,
            "decode_tp": self.decode.tp,
        }

    def entry(
        self, source: Source, point: Point, predicted: Prediction, measured: Metrics, run_id: str | None, **extra: Any
    ) -> LedgerEntry:
        return make_entry(
            at=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            source=source,
            recipe=self.recipe.name,
            fingerprint=self.identity["fingerprint"],
            calibration=self.calibration,
            point=point,
            predicted=predicted_metrics(predicted),
            measured=measured,
            run_id=run_id,
            configuration=self.configuration(),
            **extra,
        )


def recipe_predictor(loaded: LoadedRecipe, recipe_path: str, calibration: str | None) -> RecipePredictor:
    recipe = loaded.recipe
    identity = describe(loaded, recipe_path)
    shapes, plans, spec = role_shapes(recipe, recipe_path)
    model = (
        read_calibration(calibration, identity, (shapes["prefill"], shapes["decode"]))
        if calibration
        else analytic_for(recipe, plans, spec)
    )
    return RecipePredictor(
        recipe=recipe,
        identity=identity,
        prefill=shapes["prefill"],
        decode=shapes["decode"],
        model=model,
        calibration=calibration,
        vocab_size=spec.vocab_size,
    )


def predicted_metrics(p: Prediction) -> Metrics:
    return Metrics(ttft_s=p.ttft_s, itl_s=p.itl_s, total_tps=p.total_tps)


def bench_entries(predictor: RecipePredictor, levels: list, *, isl: int, osl: int, run_id: str | None) -> list:
    """One entry per valid bench level (bench/sweep.py's Level): its median TTFT, its median TPOT
    as the ITL (the model's ITL is the time per output token after the first) and its total
    tokens/s, against the prediction at the workload's mean lengths and the level's concurrency."""
    out = []
    for lv in levels:
        if not lv.valid:
            continue
        measured = Metrics(
            ttft_s=lv.ttft_median_ms / 1e3 if lv.ttft_median_ms is not None else None,
            itl_s=lv.tpot_median_ms / 1e3 if lv.tpot_median_ms is not None else None,
            total_tps=lv.total_tps,
        )
        point = Point(isl=isl, osl=osl, concurrency=lv.concurrency)
        predicted = predictor.at(isl, osl, lv.concurrency)
        out.append(predictor.entry("bench", point, predicted, measured, run_id, requests=lv.completed))
    return out


def record(recipe: Recipe, entries: list[LedgerEntry]) -> Path:
    path = ledger_file(recipe)
    append_entries(path, entries)
    return path
