"""bench's results as a user reads them, from canned `vllm bench serve` results (tests/fixtures/bench:
the files `--save-result` writes, sized like a 16-GPU GB200 sweep from concurrency 1 to 4096; no
engine): every number whole at 80 columns (two tables), and at 40 (a list per level); one table
where the terminal is wide; tokens/s per user, the Pareto frontier and its plot."""

from __future__ import annotations

import importlib.util
import json
import re
from dataclasses import asdict
from pathlib import Path

import pytest

from recipectl.bench.sweep import PARETO_PLOT, Level, pareto, plot, summarise
from recipectl.commands.bench import COMPARE_COLUMNS, LEVEL_COLUMNS, bench_compare, print_levels

from .requirements import require

FIXTURES = Path(__file__).parent / "fixtures" / "bench"
CONCURRENCY = (1, 16, 64, 256, 1024, 4096)
TITLE = (
    "qwen3.5-397b-nvfp4-gb200-pd.prefill-endpoints-4: 16 device(s); results in "
    "/home/someone/runs/qwen3.5-397b-nvfp4-gb200-pd.prefill-endpoints-4-20250101-120000/bench-20250101-130000"
)


def canned_levels(gpus: int = 16) -> list[Level]:
    out = []
    for c in CONCURRENCY:
        lv = Level(concurrency=c, num_prompts=c * 10, result_file=f"level-c{c}.json")
        out.append(summarise(json.loads((FIXTURES / lv.result_file).read_text()), lv, gpus, 0.0))
    return out


def _cells(lines: list[str]) -> set[str]:
    return {w for ln in lines for w in re.split(r"[\s│┃]+", ln) if w}


def _print(monkeypatch, capsys, columns: int, levels: list[Level]) -> list[str]:
    monkeypatch.setenv("COLUMNS", str(columns))
    print_levels(levels, TITLE)
    return [ln.rstrip() for ln in capsys.readouterr().out.splitlines()]


def test_tokens_per_second_per_user_is_1000_over_median_tpot():
    for lv in canned_levels():
        raw = json.loads((FIXTURES / lv.result_file).read_text())
        assert lv.tps_per_user == pytest.approx(1000 / raw["median_tpot_ms"]) and lv.valid
    lv = summarise({"completed": 1, "total_output_tokens": 1, "duration": 1.0}, Level(1, 1, "x.json"), 1, 0.0)
    assert lv.tps_per_user is None  # no TPOT reported: none made up


@pytest.mark.parametrize("columns", [80, 40])
def test_every_number_is_whole_at_the_terminal_width(monkeypatch, capsys, columns):
    levels = canned_levels()
    lines = _print(monkeypatch, capsys, columns, levels)
    assert all(len(ln) <= columns for ln in lines), "\n".join(ln for ln in lines if len(ln) > columns)
    assert "…" not in "\n".join(lines)
    cells = _cells(lines)
    for lv in levels:
        for col in (c for g in LEVEL_COLUMNS for c in g):
            assert col.value(lv) in cells, (columns, col.name, lv.concurrency, col.value(lv))
    assert re.sub(r"\s", "", TITLE) in re.sub(r"\s", "", "\n".join(lines))  # the results directory, whole


def test_at_80_columns_two_tables_at_40_a_list_per_level(monkeypatch, capsys):
    levels = canned_levels()
    lines = _print(monkeypatch, capsys, 80, levels)
    assert "throughput" in lines and "latency (ms)" in lines
    lines = _print(monkeypatch, capsys, 40, levels)
    assert [ln.strip() for ln in lines if ln.startswith("concurrency ")] == [f"concurrency {c}" for c in CONCURRENCY]
    assert any(ln.split() == ["TPS/GPU", "11407.88"] for ln in lines)


def test_one_table_where_the_terminal_is_wide(monkeypatch, capsys):
    lines = _print(monkeypatch, capsys, 250, canned_levels())
    header = next(ln for ln in lines if "TPS/GPU" in ln)
    assert "tok/s/user" in header and "ITL p99 ms" in header and "latency (ms)" not in lines


@pytest.mark.parametrize("columns", [80, 200])
def test_compare_reads_whole_at_80_columns(monkeypatch, capsys, tmp_path, columns):
    for name, gpus in (("a", 16), ("b", 12)):
        (tmp_path / name).mkdir()
        (tmp_path / name / "summary.json").write_text(
            json.dumps({"levels": [asdict(lv) for lv in canned_levels(gpus)]})
        )
    monkeypatch.setenv("COLUMNS", str(columns))
    assert bench_compare(str(tmp_path / "a"), str(tmp_path / "b"), as_json=True) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [r["tps_per_gpu_ratio"] for r in rows] == pytest.approx([16 / 12] * len(CONCURRENCY))
    assert [r["tps_per_user_ratio"] for r in rows] == pytest.approx([1.0] * len(CONCURRENCY))
    assert bench_compare(str(tmp_path / "a"), str(tmp_path / "b"), as_json=False) == 0
    lines = capsys.readouterr().out.splitlines()
    assert all(len(ln) <= columns for ln in lines) and "…" not in "\n".join(lines)
    cells = _cells(lines)
    for r in rows:
        for col in (c for g in COMPARE_COLUMNS for c in g):
            assert col.value(r) in cells, (col.name, r["concurrency"])


def _level(c: int, tps_per_gpu: float, tpot_ms: float | None) -> Level:
    lv = Level(concurrency=c, num_prompts=c, result_file="", tps_per_gpu=tps_per_gpu, tpot_median_ms=tpot_ms)
    lv.tps_per_user = 1000 / tpot_ms if tpot_ms else None
    return lv


def test_pareto_frontier_keeps_the_levels_nothing_beats_on_both():
    a, b, c, d = _level(1, 100, 10), _level(4, 300, 20), _level(8, 250, 40), _level(16, 500, 50)
    e = _level(32, 500, 80)  # as much throughput as d, less per user: dominated
    none = _level(64, 900, None)  # no TPOT: no place on a per-user axis
    assert [lv.concurrency for lv in pareto([e, d, c, b, a, none])] == [16, 4, 1]  # by tokens/s per user
    assert [lv.concurrency for lv in pareto(canned_levels())] == [4096, 1024, 256, 64, 16, 1]


def test_the_sweep_plots_throughput_per_gpu_against_tokens_per_second_per_user(tmp_path):
    require(importlib.util.find_spec("matplotlib") is not None, "matplotlib", "pip install 'recipectl[plot]'")
    plot(canned_levels(), tmp_path, "canned")
    for name in ("tps_per_gpu_vs_concurrency.png", "tps_per_gpu_vs_tpot.png", PARETO_PLOT):
        assert (tmp_path / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", name
