"""The GSM8K gate, shown to fail: `recipectl doctor` (a real subprocess: the real GSM8K client, scorer
and gate of recipectl/checks/gsm8k.py) against a *scripted* local HTTP server in the role of the
router, which answers every question wrong or every question right. No engine: the scripted server
stands in for it, and each test's name says so.

The CPU recipe's own GSM8K check has threshold 0 (random weights answer nothing right), so it cannot
fail on accuracy; doctor names it "GSM8K pipeline (accuracy not gated)". Its gate is the one proven
here, with the recipe's threshold raised in a copy."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from recipectl.checks.endpoints import GSM8K_GATE, GSM8K_PIPELINE, gsm8k_check_name
from recipectl.checks.gsm8k import load_test
from recipectl.validate import load_one

from .recipe_text import write_edited

ROOT = Path(__file__).resolve().parent.parent
LOCAL_RECIPE = ROOT / "recipes" / "local" / "tiny-hybrid-cpu.yaml"
LABELS = {q.question: q.label for q in load_test()}


class ScriptedRouter:
    """A router stand-in on a free port: /health, /v1/models (serving "tiny"), and completions
    whose final number is the label (right) or the label + 1 (wrong)."""

    def __init__(self, right: bool):
        self.completions = 0
        lock = threading.Lock()
        outer = self

        class H(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def _send(self, status: int, body: dict) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self):
                if self.path == "/health":
                    self._send(200, {})
                elif self.path == "/v1/models":
                    self._send(200, {"object": "list", "data": [{"id": "tiny", "object": "model"}]})
                else:
                    self._send(404, {"error": self.path})

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                if self.path != "/v1/completions":
                    return self._send(404, {"error": self.path})
                question = body["prompt"].rsplit("Question: ", 1)[1].removesuffix("\nAnswer:")
                label = LABELS[question]
                answer = label if right else label + 1
                with lock:
                    outer.completions += 1
                self._send(200, {"choices": [{"index": 0, "text": f" The total is {answer}.\n#### {answer}"}],
                                 "usage": {"completion_tokens": 9}})

        class S(ThreadingHTTPServer):
            daemon_threads = True

        self.httpd = S(("127.0.0.1", 0), H)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05},
                                       daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()


def gated_recipe(tmp_path: Path, threshold: str = "0.5") -> Path:
    """The CPU recipe with a real bar: threshold 0.5 (its tolerance is 0; the edit must take)."""
    return write_edited(LOCAL_RECIPE, tmp_path / "gated.yaml",
                        ("    threshold: 0.0\n", f"    threshold: {threshold}\n"))


def doctor_gsm8k(recipectl_cli, recipe: Path, router: str) -> tuple[int, dict]:
    r = recipectl_cli("doctor", str(recipe), "--router", router, "--no-env", "--no-parity",
                      "--format", "json", timeout=300)
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


def test_cpu_recipe_check_is_named_a_pipeline_check_against_a_scripted_server_answering_wrong(
        recipectl_cli):
    """Threshold 0: every answer wrong still passes, so doctor must not call it a gate."""
    with ScriptedRouter(right=False) as server:
        rc, check = doctor_gsm8k(recipectl_cli, LOCAL_RECIPE, server.url)
    assert check["name"] == GSM8K_PIPELINE == "GSM8K pipeline (accuracy not gated)"
    assert check["status"] == "pass" and rc == 0 and "accuracy 0.000" in check["detail"]


@pytest.mark.parametrize(("recipe", "name"), [
    ("recipes/local/tiny-hybrid-cpu.yaml", GSM8K_PIPELINE),
    ("recipes/h200/tiny-qwen35-pd.yaml", GSM8K_PIPELINE),
    ("recipes/h200/qwen3.5-35b-a3b-pd.yaml", GSM8K_GATE),
])
def test_each_shipped_recipe_names_its_gsm8k_check_for_what_it_proves(recipe, name):
    assert gsm8k_check_name(load_one(str(ROOT / recipe)).recipe) == name


def test_the_readme_does_not_call_the_cpu_check_gated():
    readme = (ROOT / "README.md").read_text()
    assert "gated GSM8K" not in readme and "accuracy is not gated" in readme

