"""The GSM8K gate, shown to fail: `recipectl doctor` (a real subprocess: the real GSM8K client, scorer
and gate of recipectl/checks/gsm8k.py) against a *scripted* local HTTP server in the role of the
router, which answers every question wrong or every question right. No engine: the scripted server
stands in for it, and each test's name says so.

The CPU recipe's own GSM8K check has threshold 0 (random weights answer nothing right), so it cannot
fail on accuracy; doctor names it "GSM8K pipeline (accuracy not gated)". Its gate is the one proven
here, with the recipe's threshold raised in a copy."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from recipectl.checks.endpoints import GSM8K_GATE, GSM8K_PIPELINE, gsm8k_check_name
from recipectl.checks.gsm8k import load_test
from recipectl.validate import load_one

from .fakeserver import FakeServer, Request
from .recipe_text import write_edited

ROOT = Path(__file__).resolve().parent.parent
LOCAL_RECIPE = ROOT / "recipes" / "local" / "tiny-hybrid-cpu.yaml"
LABELS = {q.question: q.label for q in load_test()}


class ScriptedRouter(FakeServer):
    """A router stand-in on a free port: /health, /v1/models (serving "tiny"), and completions
    whose final number is the label (right) or the label + 1 (wrong)."""

    def __init__(self, right: bool):
        def route(req: Request) -> tuple[int, dict]:
            if req.method == "GET":
                if req.path == "/health":
                    return 200, {}
                if req.path == "/v1/models":
                    return 200, {"object": "list", "data": [{"id": "tiny", "object": "model"}]}
                return 404, {"error": req.path}
            if req.path != "/v1/completions":
                return 404, {"error": req.path}
            question = req.body["prompt"].rsplit("Question: ", 1)[1].removesuffix("\nAnswer:")
            label = LABELS[question]
            answer = label if right else label + 1
            return 200, {
                "choices": [{"index": 0, "text": f" The total is {answer}.\n#### {answer}"}],
                "usage": {"completion_tokens": 9},
            }

        super().__init__(route)

    @property
    def completions(self) -> int:
        return sum(r.method == "POST" and r.path == "/v1/completions" for r in self.requests)


def gated_recipe(tmp_path: Path, threshold: str = "0.5") -> Path:
    """The CPU recipe with a real bar: threshold 0.5 (its tolerance is 0; the edit must take)."""
    return write_edited(
        LOCAL_RECIPE, tmp_path / "gated.yaml", ("    threshold: 0.0\n", f"    threshold: {threshold}\n")
    )


def doctor_gsm8k(recipectl_cli, recipe: Path, router: str) -> tuple[int, dict]:
    r = recipectl_cli(
        "doctor", str(recipe), "--router", router, "--no-env", "--no-parity", "--format", "json", timeout=300
    )
    assert r.stdout.strip(), r.stderr[-3000:]
    body = json.loads(r.stdout)
    checks = [c for c in body["checks"] if c["name"].startswith("GSM8K")]
    assert len(checks) == 1, body["checks"]
    return r.returncode, checks[0]


def test_gsm8k_gate_fails_against_a_scripted_server_answering_wrong(recipectl_cli, tmp_path):
    with ScriptedRouter(right=False) as server:
        rc, check = doctor_gsm8k(recipectl_cli, gated_recipe(tmp_path), server.url)
    assert server.completions == 10  # the recipe's num_questions, each answered
    assert check["name"] == GSM8K_GATE
    assert check["status"] == "fail" and rc == 1, check
    assert "GSM8K FAIL: accuracy 0.000 < 0.500" in check["detail"], check["detail"]
    assert check["data"]["gate"]["passed"] is False and check["data"]["result"]["accuracy"] == 0.0
    assert check["data"]["result"]["invalid_rate"] == 0.0  # wrong numbers, not garbage


def test_gsm8k_gate_passes_against_a_scripted_server_answering_right(recipectl_cli, tmp_path):
    with ScriptedRouter(right=True) as server:
        rc, check = doctor_gsm8k(recipectl_cli, gated_recipe(tmp_path), server.url)
    assert check["name"] == GSM8K_GATE
    assert check["status"] == "pass" and rc == 0, check
    assert "GSM8K PASS: accuracy 1.000 >= 0.500" in check["detail"], check["detail"]


def test_cpu_recipe_check_is_named_a_pipeline_check_against_a_scripted_server_answering_wrong(recipectl_cli):
    """Threshold 0: every answer wrong still passes, so doctor must not call it a gate."""
    with ScriptedRouter(right=False) as server:
        rc, check = doctor_gsm8k(recipectl_cli, LOCAL_RECIPE, server.url)
    assert check["name"] == GSM8K_PIPELINE == "GSM8K pipeline (accuracy not gated)"
    assert check["status"] == "pass" and rc == 0 and "accuracy 0.000" in check["detail"]


@pytest.mark.parametrize(
    ("recipe", "name"),
    [
        ("recipes/local/tiny-hybrid-cpu.yaml", GSM8K_PIPELINE),
        ("recipes/h200/tiny-qwen35-pd.yaml", GSM8K_PIPELINE),
        ("recipes/h200/qwen3.5-35b-a3b-pd.yaml", GSM8K_GATE),
    ],
)
def test_each_shipped_recipe_names_its_gsm8k_check_for_what_it_proves(recipe, name):
    assert gsm8k_check_name(load_one(str(ROOT / recipe)).recipe) == name


def test_the_readme_does_not_call_the_cpu_check_gated():
    readme = (ROOT / "README.md").read_text()
    assert "gated GSM8K" not in readme and "accuracy is not gated" in readme
