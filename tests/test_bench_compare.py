"""`recipectl bench compare A B`: level-by-level ratios B / A of two bench runs, as a user reads them
(JSON and the table), and a clear error for a directory that holds no run."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _run_dir(path: Path, levels: list[dict]) -> Path:
    path.mkdir()
    (path / "summary.json").write_text(json.dumps({"levels": levels}))
    return path


def _level(c: int, tps: float, tpot: float | None, ttft: float | None) -> dict:
    return {"concurrency": c, "tps_per_gpu": tps, "tpot_median_ms": tpot, "ttft_median_ms": ttft}


def _compare(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "recipectl", "bench", "compare", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
    )


def test_ratios_for_the_levels_both_runs_have(tmp_path):
    a = _run_dir(tmp_path / "a", [_level(1, 10.0, 20.0, 100.0), _level(2, 16.0, 0.0, None), _level(8, 1.0, 1.0, 1.0)])
    b = _run_dir(tmp_path / "b", [_level(1, 12.0, 25.0, 50.0), _level(2, 20.0, 30.0, 40.0), _level(4, 30.0, 1.0, 1.0)])
    r = _compare(str(a), str(b), "--format", "json")
    assert r.returncode == 0, r.stderr
    rows = {row["concurrency"]: row for row in json.loads(r.stdout)}
    assert sorted(rows) == [1, 2]  # 4 is only in B, 8 only in A
    assert rows[1]["tps_per_gpu_ratio"] == 1.2 and rows[1]["tpot_median_ratio"] == 1.25
    assert rows[1]["ttft_median_ratio"] == 0.5
    # a zero or missing value in A has no ratio, rather than a division error or a made-up number
    assert rows[2]["tpot_median_ratio"] is None and rows[2]["ttft_median_ratio"] is None
    assert (rows[2]["tps_per_gpu_a"], rows[2]["tps_per_gpu_b"]) == (16.0, 20.0)

    table = _compare(str(a), str(b))
    assert table.returncode == 0, table.stderr
    assert "1.200" in table.stdout and "1.250" in table.stdout and "0.500" in table.stdout


def test_a_directory_without_a_run_is_an_error_with_the_fix(tmp_path):
    a = _run_dir(tmp_path / "a", [_level(1, 10.0, 20.0, 100.0)])
    (tmp_path / "empty").mkdir()
    r = _compare(str(a), str(tmp_path / "empty"))
    assert r.returncode != 0 and "Traceback" not in r.stderr
    assert "cannot read a bench summary" in r.stderr and "summary.json" in r.stderr


def test_bench_run_and_compare_are_subcommands_and_bench_recipe_still_runs(tmp_path):
    def recipectl(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "recipectl", *args], capture_output=True, text=True, cwd=ROOT, timeout=60
        )

    usage = recipectl("bench", "--help").stdout
    assert "run" in usage and "compare" in usage
    assert "RUN_A" in recipectl("bench", "compare", "--help").stdout
    r = recipectl("bench", "compare", str(tmp_path))  # one directory: the usage error of a subcommand
    assert r.returncode == 2 and "Missing argument" in r.stderr, r.stderr
    # `bench RECIPE` is `bench run RECIPE`: both reach the recipe (here: one that does not exist)
    for argv in (("bench", "missing.yaml"), ("bench", "run", "missing.yaml"), ("bench", "--run", "x", "missing.yaml")):
        r = recipectl(*argv)
        assert r.returncode != 0 and "missing.yaml" in r.stderr and "No such command" not in r.stderr, (argv, r.stderr)
