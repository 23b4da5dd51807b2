"""The H200 measurements docs/sla-planner.md reports (docs/sla-accuracy/, scripts/gpu-sla-accuracy.sh),
scored again by this checkout's performance model: a change to the model that moves the errors
the document states fails here, and the document is rewritten with the change."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
RECIPE = ROOT / "recipes" / "h200" / "qwen3.5-9b-pd-1gpu.yaml"
spec = importlib.util.spec_from_file_location("sla_planner_accuracy", ROOT / "benchmarks" / "sla_planner_accuracy.py")
assert spec is not None and spec.loader is not None
accuracy = importlib.util.module_from_spec(spec)
spec.loader.exec_module(accuracy)


# (run, metric): the calibrated model's median and worst absolute error, as docs/sla-planner.md says
STATED = {
    ("h200-9b-1p1d", "ttft_s"): (0.20, 0.50),
    ("h200-9b-1p1d", "itl_s"): (0.01, 0.02),
    ("h200-9b-1p1d", "total_tps"): (0.15, 0.29),
    ("h200-9b-2p1d", "ttft_s"): (0.13, 0.38),
    ("h200-9b-2p1d", "itl_s"): (0.02, 0.07),
    ("h200-9b-2p1d", "total_tps"): (0.05, 0.19),
}


@pytest.mark.parametrize("run", ["h200-9b-1p1d", "h200-9b-2p1d"])
def test_the_h200_runs_score_as_the_document_says(run, tmp_path):
    assert accuracy.rescore(str(RECIPE), ROOT / "docs" / "sla-accuracy" / f"{run}.json", tmp_path) == 0
    summary = json.loads((tmp_path / "results.json").read_text())["summary"]["calibrated"]
    for metric in ("ttft_s", "itl_s", "total_tps"):
        median, worst = STATED[(run, metric)]
        assert summary[metric]["median_abs_error"] == pytest.approx(median, abs=0.005), metric
        assert summary[metric]["worst_abs_error"] == pytest.approx(worst, abs=0.005), metric


def test_the_two_prefill_run_is_predicted_from_the_one_prefill_runs_calibration():
    one = json.loads((ROOT / "docs" / "sla-accuracy" / "h200-9b-1p1d.json").read_text())
    two = json.loads((ROOT / "docs" / "sla-accuracy" / "h200-9b-2p1d.json").read_text())
    assert (one["endpoints"], two["endpoints"]) == ({"prefill": 1, "decode": 1}, {"prefill": 2, "decode": 1})
    assert two["calibration"]["fingerprint"] == one["calibration"]["fingerprint"]
