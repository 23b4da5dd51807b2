"""Tensor parallelism wider than a node: a recipe vLLM runs (each node started with --nnodes,
--node-rank and --master-addr, as srt-slurm's srtctl does) and recipectl cannot render yet.
validate warns (TOP009) and exits 0; render and launch refuse it, exit 2, and write nothing."""

from __future__ import annotations

from pathlib import Path

import pytest

from .recipe_text import write_edited

ROOT = Path(__file__).resolve().parent.parent
TWO_GPU = ROOT / "recipes" / "h200" / "qwen3.5-35b-a3b-2gpu-pd.yaml"
REFUSAL = (
    "recipectl cannot render tensor parallelism over 2 nodes yet; prefill TP 4 spans 2 nodes of 2 GPUs; "
    "decode TP 4 spans 2 nodes of 2 GPUs"
)


@pytest.fixture
def tp_over_nodes(tmp_path: Path) -> Path:
    """The two-GPU H200 recipe on four 2-GPU nodes, both roles TP4 (a hybrid model's P/D TP is
    homogeneous): each over two nodes."""
    return write_edited(
        TWO_GPU,
        tmp_path / "tp4.yaml",
        ("  nodes: 1\n  hosts: [127.0.0.1]\n", "  nodes: 4\n  hosts: [10.0.0.1, 10.0.0.2, 10.0.0.3, 10.0.0.4]\n"),
        ("\nprefill:\n", "\nprefill:\n  parallel: TP4\n"),
        ("\ndecode:\n", "\ndecode:\n  parallel: TP4\n"),
        ("  venv: ~/.cache/recipectl/engine-cu130\n", f"  venv: {tmp_path / 'no-engine'}\n"),
    )


def test_validate_warns_that_recipectl_cannot_render_it_and_finds_no_error(recipectl_cli, tp_over_nodes):
    r = recipectl_cli("validate", str(tp_over_nodes))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "0 error(s)" in r.stdout
    assert "TOP009 warning: prefill TP 4 spans 2 nodes of 2 GPUs" in r.stdout
    assert (
        "TOP009 warning: decode TP 4 spans 2 nodes of 2 GPUs: vLLM runs it (each node started with --nnodes 2, "
        "--node-rank and --master-addr), but recipectl cannot render or launch tensor parallelism over nodes yet"
    ) in r.stdout


@pytest.mark.parametrize("target", ["bash", "slurm", "k8s"])
def test_render_refuses_it_and_writes_nothing(recipectl_cli, tp_over_nodes, tmp_path, target):
    out = tmp_path / "out"
    r = recipectl_cli("render", str(tp_over_nodes), "--target", target, "--out", str(out))
    assert r.returncode == 2, r.stdout + r.stderr
    assert REFUSAL in r.stderr
    assert "--nnodes 2 --node-rank R --master-addr LEADER" in r.stderr  # how its publisher runs it
    assert "Traceback" not in r.stderr
    assert not out.exists() or not any(out.iterdir())


@pytest.mark.parametrize("dry_run", [True, False])
def test_launch_refuses_it_before_starting_anything(recipectl_cli, tp_over_nodes, tmp_path, dry_run):
    runs = tmp_path / "runs"
    r = recipectl_cli(
        "launch", str(tp_over_nodes), *(["--dry-run"] if dry_run else []), env={"RECIPECTL_RUN_DIR": str(runs)}
    )
    assert r.returncode == 2, r.stdout + r.stderr
    assert REFUSAL in r.stderr
    assert not runs.exists()
