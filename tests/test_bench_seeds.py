"""Every level of a `bench` sweep sends prompts of its own: vLLM's random dataset draws the same
first prompts from one seed whatever their number (vLLM 0.32.0's RandomDataset: a level of 4's
prompts are the first 4 of a level of 16's), so one seed for every level, or for two runs against
one deployment, hands a later level prompts the engine's prefix cache already holds. The real
`vllm bench serve` runs in tests/test_e2e_local.py::test_bench_sweep; here its process is a mock
that records its command line and writes the result file it was asked for."""

from __future__ import annotations

import json
import subprocess

from recipectl.bench import sweep
from recipectl.validate import load_variant

RECIPE = "recipes/local/tiny-hybrid-cpu.yaml"


def _seeds_of_a_sweep(monkeypatch, tmp_path, **kwargs) -> list[int]:
    recipe = load_variant(RECIPE, None).recipe
    seen: list[list[str]] = []

    def mock_vllm_bench_serve(argv, **_):
        seen.append(argv)
        out = tmp_path / argv[argv.index("--result-filename") + 1]
        n = int(argv[argv.index("--num-prompts") + 1])
        out.write_text(json.dumps({"completed": n, "duration": 1.0, "total_input_tokens": n, "total_output_tokens": n}))
        return subprocess.CompletedProcess(argv, 0)

    monkeypatch.setattr(sweep.subprocess, "run", mock_vllm_bench_serve)
    levels = sweep.run_sweep(recipe, "http://127.0.0.1:1", tmp_path, **kwargs)
    seeds = [int(argv[argv.index("--seed") + 1]) for argv in seen]
    assert seeds == [lv.seed for lv in levels]  # what each level ran with is recorded
    return seeds


def test_each_level_and_each_run_has_its_own_seed(monkeypatch, tmp_path):
    first = _seeds_of_a_sweep(monkeypatch, tmp_path)
    second = _seeds_of_a_sweep(monkeypatch, tmp_path)
    assert len(first) == len(load_variant(RECIPE, None).recipe.workload.concurrency) > 1
    assert len(set(first)) == len(first)
    assert not set(first) & set(second)  # fails about once in 10^8 runs: the seeds are random


def test_a_given_seed_is_the_first_levels_and_the_rest_follow(monkeypatch, tmp_path):
    assert _seeds_of_a_sweep(monkeypatch, tmp_path, seed=7)[:2] == [7, 8]
