"""Pipeline stages on GPUs (--pipeline-parallel-size above 1): a recipe vLLM runs where its launcher
gives an endpoint TP x PP GPUs a DP rank, and one recipectl cannot lay out yet. validate warns
(TOP008) and exits 0; render and launch refuse it, exit 2, and write or start nothing; on the CPU
platform there is no device count to outgrow, and the flag is rendered as it is."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from .recipe_text import write_edited

ROOT = Path(__file__).resolve().parent.parent
TWO_GPU = ROOT / "recipes" / "h200" / "qwen3.5-35b-a3b-2gpu-pd.yaml"
CPU = ROOT / "recipes" / "local" / "tiny-hybrid-cpu.yaml"
REFUSAL = "recipectl cannot lay out pipeline parallelism yet; decode sets 2 pipeline stages"


@pytest.fixture
def staged(tmp_path: Path) -> Path:
    """The two-GPU H200 recipe with two pipeline stages on its decode endpoint."""
    return write_edited(
        TWO_GPU,
        tmp_path / "pp2.yaml",
        ("\ndecode:\n", '\ndecode:\n  extra_args: [-pp, "2"]\n'),
        ("  venv: ~/.cache/recipectl/engine-cu130\n", f"  venv: {tmp_path / 'no-engine'}\n"),
    )


def test_validate_warns_that_recipectl_cannot_lay_it_out_and_finds_no_error(recipectl_cli, staged):
    r = recipectl_cli("validate", str(staged))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "0 error(s)" in r.stdout and "TOP008 warning: decode sets 2 pipeline stages" in r.stdout, r.stdout


@pytest.mark.parametrize("target", ["bash", "slurm", "k8s"])
def test_render_refuses_it_and_writes_nothing(recipectl_cli, staged, tmp_path, target):
    out = tmp_path / "out"
    r = recipectl_cli("render", str(staged), "--target", target, "--out", str(out))
    assert r.returncode == 2, r.stdout + r.stderr
    assert REFUSAL in r.stderr and "TOP008" in r.stderr and "Traceback" not in r.stderr, r.stderr
    assert not out.exists()


def test_launch_refuses_it_before_starting_anything(recipectl_cli, staged, tmp_path):
    runs = tmp_path / "runs"
    r = recipectl_cli("launch", str(staged), "--dry-run", env={"RECIPECTL_RUN_DIR": str(runs)})
    assert r.returncode == 2 and REFUSAL in r.stderr, r.stdout + r.stderr
    assert not runs.exists()


def test_on_the_cpu_platform_the_stages_are_rendered_as_written(recipectl_cli, tmp_path):
    recipe = write_edited(CPU, tmp_path / "cpu.yaml", ("\ndecode:\n", '\ndecode:\n  extra_args: [-pp, "2"]\n'))
    r = recipectl_cli("render", str(recipe))
    assert r.returncode == 0, r.stderr
    assert "-pp 2" in r.stdout or "--pipeline-parallel-size 2" in r.stdout, r.stdout


def test_doctor_skips_the_checks_of_command_lines_recipectl_does_not_render(recipectl_cli, staged):
    """The ports check had failed with the render's refusal as an internal error's text; a recipe
    vLLM runs is no failure of the host: the check is skipped, saying why (TP over nodes alike)."""
    r = recipectl_cli("doctor", str(staged), "--format", "json")
    ports = [c for c in json.loads(r.stdout)["checks"] if (c["group"], c["name"]) == ("environment", "ports")]
    assert ports and ports[0]["status"] == "skip", r.stdout
    assert "recipectl cannot lay out pipeline parallelism yet" in ports[0]["detail"]
    assert "RecipectlError" not in r.stdout
