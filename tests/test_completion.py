"""Shell completion as the shells ask for it: `recipectl --show-completion` / `--install-completion`
(Typer's), and the completion requests the installed scripts make (an environment variable, the
words typed so far), run as subprocesses: recipe files, a matrix recipe's variants for every
command that takes --variant, rule selectors, run ids."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from recipectl.commands.complete import paths, variant_names

ROOT = Path(__file__).resolve().parent.parent
GB200 = "recipes/gb200/qwen3.5-397b-nvfp4-pd.yaml"
GB200_VARIANTS = [f"prefill-endpoints-{n}" for n in range(4, 9)]
BIN = Path(sys.executable).parent  # the venv's recipectl script


def bash_complete(line: str, *, cwd: Path = ROOT, env: dict | None = None) -> list[str]:
    """What the bash script's request returns for `line` (the word after its last space is the
    one being completed), through `python -m recipectl`."""
    words = line.split(" ")
    r = subprocess.run(
        [sys.executable, "-m", "recipectl"],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=60,
        env={
            **os.environ,
            **(env or {}),
            "_RECIPECTL_COMPLETE": "complete_bash",
            "COMP_WORDS": line,
            "COMP_CWORD": str(len(words) - 1),
        },
    )
    assert r.returncode == 0 and r.stderr == "", r.stderr
    return [w for w in r.stdout.splitlines() if w]


def zsh_complete(line: str) -> str:
    r = subprocess.run(
        [sys.executable, "-m", "recipectl"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
        env={**os.environ, "_RECIPECTL_COMPLETE": "complete_zsh", "_TYPER_COMPLETE_ARGS": line},
    )
    assert r.returncode == 0, r.stderr
    return r.stdout


# ------------------------------------------------------------------ the scripts a user installs
@pytest.mark.skipif(shutil.which("bash") is None, reason="bash is not installed")
def test_show_completion_gives_a_bash_script_that_completes_in_bash(tmp_path):
    env = {**os.environ, "PATH": f"{BIN}:{os.environ['PATH']}", "HOME": str(tmp_path)}
    # run under bash, so that Typer detects the shell it is asked from
    script = subprocess.run(
        ["bash", "-c", "recipectl --show-completion; echo rc=$?"], capture_output=True, text=True, env=env, timeout=60
    ).stdout
    assert "_RECIPECTL_COMPLETE=complete_bash" in script and "complete -o default -F" in script
    assert script.rstrip().endswith("rc=0")
    (tmp_path / "completion.bash").write_text(script.rsplit("rc=", 1)[0])
    # the function bash calls on TAB, with the words it sets, in a real bash
    probe = (
        "source completion.bash; COMP_WORDS=(recipectl plan " + GB200 + ' --variant ""); COMP_CWORD=4; '
        '_recipectl_completion recipectl; printf "%s\\n" "${COMPREPLY[@]}"'
    )
    out = subprocess.run(["bash", "-c", probe], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=60)
    assert out.returncode == 0, out.stderr
    # cwd is tmp_path: the recipe path is relative to where the user stands, so name it from there
    probe = probe.replace(GB200, str(ROOT / GB200))
    out = subprocess.run(["bash", "-c", probe], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=60)
    assert out.stdout.split() == GB200_VARIANTS, out.stderr


@pytest.mark.skipif(shutil.which("bash") is None, reason="bash is not installed")
def test_install_completion_writes_the_script_where_bash_reads_it(tmp_path):
    env = {**os.environ, "PATH": f"{BIN}:{os.environ['PATH']}", "HOME": str(tmp_path)}
    # `&& true` keeps bash from exec'ing recipectl in its place: typer names the shell by the
    # parent process, and without that bash the parent is whatever ran pytest (none, detached)
    r = subprocess.run(
        ["bash", "-c", "recipectl --install-completion && true"], capture_output=True, text=True, env=env, timeout=60
    )
    assert r.returncode == 0, r.stderr
    bashrc = (tmp_path / ".bashrc").read_text()
    installed = [p for p in tmp_path.rglob("*") if p.is_file() and "_RECIPECTL_COMPLETE" in p.read_text()]
    assert installed and any(str(p.relative_to(tmp_path)) in bashrc for p in installed), bashrc


# ------------------------------------------------------------------------------ what completes
def test_commands_and_options_complete():
    assert {"validate", "render", "doctor", "bench"} <= set(bash_complete("recipectl "))
    assert bash_complete("recipectl bench ")[:2] == ["run", "compare"]
    assert "--install-completion" in bash_complete("recipectl --")


def test_bench_offers_its_subcommands_and_the_recipes_bench_recipe_takes(tmp_path):
    (tmp_path / "recipes").mkdir()
    (tmp_path / "recipes" / "a.yaml").write_text("")
    (tmp_path / "run.yaml").write_text("")
    assert bash_complete("recipectl bench ", cwd=tmp_path) == ["run", "compare", "run.yaml", "recipes/"]
    assert bash_complete("recipectl bench r", cwd=tmp_path) == ["run", "run.yaml", "recipes/"]
    assert bash_complete("recipectl bench recipes/", cwd=tmp_path) == ["recipes/a.yaml"]
    assert bash_complete("recipectl bench co", cwd=tmp_path) == ["compare"]


def test_recipe_arguments_complete_yaml_files_and_directories(tmp_path):
    (tmp_path / "recipes" / "gpu").mkdir(parents=True)
    (tmp_path / "recipes" / "cpu").mkdir()
    for name in ("a.yaml", "b.yml", "notes.txt", ".hidden.yaml"):
        (tmp_path / "recipes" / name).write_text("")
    assert bash_complete("recipectl validate recipes/", cwd=tmp_path) == [
        "recipes/a.yaml",
        "recipes/b.yml",
        "recipes/cpu/",
        "recipes/gpu/",
    ]
    assert bash_complete("recipectl render recipes/a", cwd=tmp_path) == ["recipes/a.yaml"]


def test_paths_leaves_a_lone_directory_to_the_shell(tmp_path):
    """The shell's own file completion enters a directory without the space a completed word gets."""
    from recipectl.commands.complete import recipe_files

    (tmp_path / "recipes").mkdir()
    (tmp_path / "run.sh").write_text("")
    (tmp_path / ".git").mkdir()
    assert paths(f"{tmp_path}/re") == []
    assert paths(f"{tmp_path}/") == []  # recipes/ alone: .git is hidden, run.sh no recipe
    assert paths(f"{tmp_path}/r", (".sh",)) == [f"{tmp_path}/run.sh", f"{tmp_path}/recipes/"]
    assert paths(f"{tmp_path}/.", (".sh",)) == []  # hidden entries when named: .git, alone
    assert recipe_files(f"{tmp_path}/nope/") == []  # a missing directory: nothing, and no error


@pytest.mark.parametrize(
    "line",
    [
        f"recipectl render {GB200} --variant ",
        f"recipectl show {GB200} --resolved --variant ",
        f"recipectl plan --format json {GB200} --variant ",
        f"recipectl launch {GB200} --variant ",
        f"recipectl doctor {GB200} --no-env --variant ",
        f"recipectl bench {GB200} --variant ",
        f"recipectl bench run {GB200} --variant ",
        f"recipectl status {GB200} --variant ",
        f"recipectl logs --run {GB200} --variant ",
        f"recipectl top {GB200} --variant ",
    ],
)
def test_variant_completes_from_the_recipe_given_earlier(line):
    assert bash_complete(line) == GB200_VARIANTS


def test_variant_completion_narrows_and_needs_a_matrix_recipe():
    assert bash_complete(f"recipectl plan {GB200} --variant prefill-endpoints-7") == ["prefill-endpoints-7"]
    assert bash_complete(f"recipectl plan {GB200} --variant qwen") == [
        f"qwen3.5-397b-nvfp4-gb200-pd.prefill-endpoints-{n}" for n in range(4, 9)
    ]
    assert bash_complete("recipectl plan recipes/local/tiny-hybrid-cpu.yaml --variant ") == []  # no matrix
    assert bash_complete("recipectl plan --variant ") == []  # no recipe yet


def test_variant_names_match_what_variant_accepts():
    from recipectl.validate import load_variant

    for short, full in variant_names(str(ROOT / GB200)):
        assert load_variant(str(ROOT / GB200), short).recipe.name == full
    assert variant_names(str(ROOT / "recipes/local/tiny-hybrid-cpu.yaml")) == []


def test_rule_selectors_complete_from_the_registry():
    from recipectl.rules import all_rules

    hyb = sorted(r.code for r in all_rules() if r.code.startswith("HYB"))
    assert bash_complete("recipectl validate --select HYB") == ["HYB", *hyb]
    assert bash_complete("recipectl validate --ignore=VER00")[0].startswith("VER00")
    # the last of a comma-separated list, the others kept
    assert bash_complete("recipectl validate --extend-select HYB001,HYB00") == [f"HYB001,{c}" for c in hyb]
    arg = sorted(r.code for r in all_rules() if r.code.startswith("ARG"))
    assert arg[:3] == ["ARG001", "ARG002", "ARG003"]
    assert bash_complete("recipectl validate --select A") == ["ALL", "ARG", *arg]
    assert "PRF002=warning" in bash_complete("recipectl validate --severity PRF002=w")
    assert bash_complete("recipectl explain HYB00") == hyb
    # zsh and fish show each candidate's help: the rule's title
    assert "Prefix caching on a hybrid P/D pair" in zsh_complete("recipectl validate --ignore hybrid.dec")


def test_runs_complete_by_id(tmp_path):
    from recipectl.runs.state import RunState, new_run_dir

    run_id, d = new_run_dir(tmp_path, "tiny")
    RunState(run_id=run_id, recipe_name="tiny", recipe_path="x.yaml", recipe_hash="0", run_dir=str(d)).save()
    assert bash_complete("recipectl status ti", env={"RECIPECTL_RUN_DIR": str(tmp_path)}) == [run_id]
