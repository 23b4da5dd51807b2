"""A SIGKILL at any write step of `recipectl fix` or `recipectl import -o` leaves the old file or the
new one, byte for byte: the kill is injected before each os-level write, fsync and rename in turn
(tests/killpoints.py)."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from .killpoints import count_steps, recipectl_code, run_killed_at

ROOT = Path(__file__).resolve().parent.parent
ODD = Path(__file__).parent / "fix_corpus" / "comments-everywhere.yaml"
SCRIPT = ROOT / "tests" / "field" / "vllm-serve" / "qwen35-35b-a3b-fp8-h100-pd.sh"


def _each_kill(tmp_path: Path, target: Path, old: bytes, code: str) -> None:
    target.write_bytes(old)
    done, steps = count_steps(code, tmp_path, cwd=ROOT)
    assert done.returncode == 0, done.stdout + done.stderr
    new = target.read_bytes()
    assert new != old and steps >= 3  # written, synced, renamed
    for k in range(steps):
        target.write_bytes(old)
        proc = run_killed_at(k, code, tmp_path, cwd=ROOT)
        assert proc.returncode == -signal.SIGKILL, (k, proc.stderr)
        assert target.read_bytes() in (old, new), k
        others = [p.name for p in tmp_path.iterdir() if p != target and not p.name.startswith(".killpoint")]
        assert all(name.endswith(".tmp") or name == "pd.sh" for name in others), others


@pytest.mark.parametrize("endings", ["\n", "\r\n"])
def test_fix_killed_at_any_step(tmp_path, endings):
    recipe = tmp_path / "recipe.yaml"
    _each_kill(tmp_path, recipe, ODD.read_text().replace("\n", endings).encode(), recipectl_code("fix", str(recipe)))


def test_import_out_killed_at_any_step(tmp_path):
    script = tmp_path / "pd.sh"
    script.write_bytes(SCRIPT.read_bytes())
    out = tmp_path / "recipe.yaml"
    _each_kill(
        tmp_path,
        out,
        b"# the user's own file\nname: keep\n",
        recipectl_code("import", str(script), "-o", str(out), "--force"),
    )
