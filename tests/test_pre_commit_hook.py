"""The pre-commit hook (.pre-commit-hooks.yaml), run by the real `pre-commit` in a scratch
repository: pre-commit clones this repository at its HEAD commit (what a `rev:` names: commit
the hook before running this), installs recipectl into an environment of its own from there
(pip, from the package index) and runs the hook on the scratch repository's recipes."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from .requirements import require

ROOT = Path(__file__).resolve().parent.parent
GB200 = ROOT / "recipes" / "gb200" / "qwen3.5-397b-nvfp4-pd.yaml"
LOCAL = ROOT / "recipes" / "local" / "tiny-hybrid-cpu.yaml"
PRE_COMMIT = Path(sys.executable).parent / "pre-commit"


def _git(repo: Path, *args: str) -> str:
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@example.com",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@example.com",
    }
    return subprocess.run(
        ["git", *args], cwd=repo, env=env, check=True, capture_output=True, text=True, timeout=60
    ).stdout.strip()


def test_hooks_file_declares_the_recipectl_hook():
    (hook,) = yaml.safe_load((ROOT / ".pre-commit-hooks.yaml").read_text())
    assert hook["id"] == "recipectl" and hook["entry"] == "recipectl validate" and hook["language"] == "python"


@pytest.mark.timeout(900)
def test_pre_commit_runs_the_hook_on_a_scratch_repository(tmp_path):
    require(PRE_COMMIT.exists() and shutil.which("git") is not None, "pre-commit", ".venv/bin/pip install -e '.[test]'")
    rev = _git(ROOT, "rev-parse", "HEAD")
    if "recipectl" not in _git(ROOT, "show", f"{rev}:.pre-commit-hooks.yaml"):
        pytest.fail("HEAD has no .pre-commit-hooks.yaml: commit it first")
    repo = tmp_path / "project"
    (repo / "recipes").mkdir(parents=True)
    _git(repo, "init", "-q")
    (repo / ".pre-commit-config.yaml").write_text(
        f"repos:\n  - repo: {ROOT}\n    rev: {rev}\n    hooks: [{{id: recipectl}}]\n"
    )
    shutil.copy(LOCAL, repo / "recipes" / "local.yaml")
    (repo / "ci.yaml").write_text("on: push\njobs: {}\n")  # YAML that is no recipe: not the hook's
    _git(repo, "add", "-A")
    env = {**os.environ, "PRE_COMMIT_HOME": str(tmp_path / "cache"), "PRE_COMMIT_COLOR": "never"}
    env.pop("CI", None)  # pre-commit would change nothing, but keep its output plain

    def run() -> subprocess.CompletedProcess:
        return subprocess.run(
            [str(PRE_COMMIT), "run", "--all-files"], cwd=repo, env=env, capture_output=True, text=True, timeout=800
        )

    r = run()
    assert r.returncode == 0, r.stdout + r.stderr
    assert "recipectl validate" in r.stdout and "Passed" in r.stdout

    data = yaml.safe_load(GB200.read_text())
    data["decode"]["env"].pop("VLLM_SSM_CONV_STATE_LAYOUT")  # HYB001
    (repo / "recipes" / "gb200.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
    _git(repo, "add", "-A")
    r = run()
    assert r.returncode == 1, r.stdout + r.stderr
    assert "Failed" in r.stdout and "recipes/gb200.yaml:" in r.stdout and "HYB001 error" in r.stdout
    assert "ci.yaml" not in r.stdout

    # the project's settings apply inside the hook as on the command line
    (repo / "pyproject.toml").write_text('[tool.recipectl]\nignore = ["HYB001"]\n')
    _git(repo, "add", "-A")
    r = run()
    assert r.returncode == 0, r.stdout + r.stderr
