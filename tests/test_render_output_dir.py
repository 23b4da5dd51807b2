"""`recipectl render -o DIR` writes into DIR and nowhere else: plain file names only, no file
overwritten without --force, no symlink followed, one file per host."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from recipectl.errors import RecipectlError
from recipectl.render.targets import RenderedFile, write
from tests.disk_faults import full_disk, read_only_disk

ROOT = Path(__file__).resolve().parent.parent
H200 = ROOT / "recipes" / "h200" / "qwen3.5-35b-a3b-pd.yaml"
SCRIPT = "qwen3.5-35b-a3b-h200-pd.node0.sh"


@pytest.mark.parametrize("name", ["../escape.sh", "a/b.sh", "..", ".", "", "/tmp/abs.sh"])
def test_a_name_that_is_not_a_plain_file_name_is_refused(tmp_path, name):
    out = tmp_path / "out"
    with pytest.raises(RecipectlError, match="not a file name"):
        write([RenderedFile("ok.sh", "x"), RenderedFile(name, "x")], out)
    assert not out.exists() or list(out.iterdir()) == []
    assert not (tmp_path / "escape.sh").exists()


def test_two_files_of_one_name_are_refused(tmp_path):
    with pytest.raises(RecipectlError, match="both named"):
        write([RenderedFile("r.h.sh", "a"), RenderedFile("r.h.sh", "b")], tmp_path / "out")
    assert not (tmp_path / "out" / "r.h.sh").exists()


def test_existing_files_are_kept_unless_forced(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "a.sh").write_text("mine")
    files = [RenderedFile("b.sh", "new b", executable=True), RenderedFile("a.sh", "new a", executable=True)]
    with pytest.raises(RecipectlError, match="already holds a.sh") as e:
        write(files, out)
    assert "--force" in (e.value.fix or "")
    assert (out / "a.sh").read_text() == "mine" and not (out / "b.sh").exists()  # nothing written
    write(files, out, force=True)
    assert (out / "a.sh").read_text() == "new a" and (out / "b.sh").read_text() == "new b"
    for name in ("a.sh", "b.sh"):
        assert stat.S_IMODE((out / name).stat().st_mode) == 0o755
    assert sorted(p.name for p in out.iterdir()) == ["a.sh", "b.sh"]  # no temporary file left


def test_a_symlink_in_the_directory_is_never_followed(tmp_path):
    outside = tmp_path / "outside.txt"
    outside.write_text("precious")
    out = tmp_path / "out"
    out.mkdir()
    (out / "a.sh").symlink_to(outside)
    (out / "dangling.sh").symlink_to(tmp_path / "created-through-the-link")
    with pytest.raises(RecipectlError, match="already holds"):
        write([RenderedFile("a.sh", "x")], out)
    with pytest.raises(RecipectlError, match="already holds"):
        write([RenderedFile("dangling.sh", "x")], out)
    assert not (tmp_path / "created-through-the-link").exists()
    write([RenderedFile("a.sh", "x"), RenderedFile("dangling.sh", "y")], out, force=True)
    assert outside.read_text() == "precious"
    assert not (out / "a.sh").is_symlink() and (out / "a.sh").read_text() == "x"
    assert not (tmp_path / "created-through-the-link").exists()


def test_a_directory_in_the_way_is_an_error(tmp_path):
    out = tmp_path / "out"
    (out / "a.sh").mkdir(parents=True)
    with pytest.raises(RecipectlError, match="is a directory"):
        write([RenderedFile("a.sh", "x")], out, force=True)


def _render(module: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", module, "render", str(H200), *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )


@pytest.mark.parametrize("module", ["recipectl", "recipectl.cli"])  # the fast path and the Typer app
def test_cli_refuses_to_overwrite_and_force_replaces(tmp_path, module):
    out = tmp_path / "out"
    r = _render(module, "-o", str(out))
    assert r.returncode == 0, r.stderr
    (out / SCRIPT).write_text("edited by hand")
    r = _render(module, "-o", str(out))
    assert r.returncode == 2 and "already holds" in r.stderr and "--force" in r.stderr
    assert (out / SCRIPT).read_text() == "edited by hand"
    r = _render(module, "-o", str(out), "--force")
    assert r.returncode == 0, r.stderr
    assert (out / SCRIPT).read_text().startswith("#!/usr/bin/env bash")
    assert os.access(out / SCRIPT, os.X_OK)


# ---------------------------------------------------------------------------------------------------
# what render reads is never what it writes, whatever --force says

LOCAL = ROOT / "recipes" / "local" / "tiny-hybrid-cpu.yaml"
LOCAL_K8S = "local-tiny-hybrid.k8s.yaml"  # what `render -t k8s` writes for it


def _render_local(recipe: Path, out: Path, *args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "recipectl", "render", str(recipe), "-t", "k8s", "-o", str(out), "--force", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=120,
    )


def _assert_refused(r: subprocess.CompletedProcess, kept: Path, text: str) -> None:
    assert r.returncode == 2, r.stderr
    assert "refusing to replace" in r.stderr and "nothing was written" in r.stderr and "fix:" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr
    assert kept.read_text() == text


def test_force_never_replaces_the_recipe_being_rendered(tmp_path):
    """A recipe named like what it renders to (`x.k8s.yaml`), rendered into its own directory."""
    recipe = tmp_path / LOCAL_K8S
    recipe.write_text(LOCAL.read_text())
    _assert_refused(_render_local(recipe, tmp_path), recipe, LOCAL.read_text())
    _assert_refused(_render_local(Path(LOCAL_K8S), Path("."), cwd=tmp_path), recipe, LOCAL.read_text())
    assert sorted(p.name for p in tmp_path.iterdir()) == [LOCAL_K8S]  # no temporary file left


def test_force_never_replaces_the_recipe_under_another_name(tmp_path):
    """The output file is a hard link to the recipe, or the recipe given is a symlink to it."""
    out = tmp_path / "out"
    out.mkdir()
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(LOCAL.read_text())
    os.link(recipe, out / LOCAL_K8S)
    _assert_refused(_render_local(recipe, out), recipe, LOCAL.read_text())
    (out / LOCAL_K8S).unlink()
    (out / LOCAL_K8S).write_text(LOCAL.read_text())
    (tmp_path / "link.yaml").symlink_to(out / LOCAL_K8S)
    _assert_refused(_render_local(tmp_path / "link.yaml", out), out / LOCAL_K8S, LOCAL.read_text())


def test_force_never_replaces_the_models_config(tmp_path):
    """The model's config.json is read too: a hard link to it in the output directory stays."""
    model = tmp_path / "model"
    model.mkdir()
    config = ROOT / "tests" / "fixtures" / "gdn-hd128" / "config.json"
    (model / "config.json").write_text(config.read_text())
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(LOCAL.read_text().replace("~/.cache/recipectl/models/qwen3next-tiny", str(model)))
    out = tmp_path / "out"
    out.mkdir()
    os.link(model / "config.json", out / LOCAL_K8S)
    _assert_refused(_render_local(recipe, out), model / "config.json", config.read_text())


def test_force_still_replaces_an_earlier_render(tmp_path):
    """The control: a file that is not an input is replaced."""
    (tmp_path / LOCAL_K8S).write_text("an earlier render")
    r = _render_local(LOCAL, tmp_path)
    assert r.returncode == 0, r.stderr
    assert (tmp_path / LOCAL_K8S).read_text().startswith("# Rendered by recipectl")


# ---------------------------------------------------------------------------------------------------
# an -o that cannot be written: a clean error naming it and the OS's reason, exit 2, nothing cut off


@pytest.mark.parametrize("where", ["a file", "a device", "under a file"])
def test_an_out_that_is_no_directory_is_an_error(recipectl_in_process, tmp_path, where):
    plain = tmp_path / "plain.txt"
    plain.write_text("mine\n")
    out = {"a file": plain, "a device": Path(os.devnull), "under a file": plain / "sub"}[where]
    code, stdout, stderr = recipectl_in_process("render", str(LOCAL), "-o", str(out), "--force")
    assert code == 2, stderr
    assert f"{out}" in stderr and "not a directory" in stderr and "fix:" in stderr, stderr
    assert plain.read_text() == "mine\n" and sorted(p.name for p in tmp_path.iterdir()) == ["plain.txt"]


def _listing(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in directory.iterdir()}


GB200 = ROOT / "recipes" / "gb200" / "qwen3.5-397b-nvfp4-pd.yaml"
GB200_VARIANT = ("--variant", "prefill-endpoints-4")  # four hosts: four scripts


@pytest.mark.parametrize("files_that_fit", [0, 2])  # the first script, or the third, fills the disk
def test_a_full_disk_leaves_the_earlier_render_whole(recipectl_in_process, monkeypatch, tmp_path, files_that_fit):
    out = tmp_path / "out"
    assert recipectl_in_process("render", str(GB200), *GB200_VARIANT, "-o", str(out))[0] == 0
    first = sorted(out.iterdir())[0]
    first.write_text("edited by hand\n")
    before = _listing(out)
    assert len(before) == 4
    full_disk(monkeypatch, files_that_fit=files_that_fit)
    code, _, stderr = recipectl_in_process("render", str(GB200), *GB200_VARIANT, "-o", str(out), "--force")
    assert code == 2, stderr
    assert "No space left on device".lower() in stderr and str(out) in stderr and "Traceback" not in stderr, stderr
    assert _listing(out) == before  # every old file as it was, no new one, no temporary file


def test_a_read_only_directory_is_an_error_naming_it(recipectl_in_process, monkeypatch, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    read_only_disk(monkeypatch)
    code, _, stderr = recipectl_in_process("render", str(LOCAL), "-o", str(out))
    assert code == 2, stderr
    assert "read-only file system" in stderr and str(out) in stderr and "Traceback" not in stderr, stderr
    assert list(out.iterdir()) == []


def test_a_full_disk_takes_away_the_directories_the_render_made(recipectl_in_process, monkeypatch, tmp_path):
    """A render into directories it makes, that writes nothing, leaves none of them behind (an
    empty one had stood where the next render, or a script, looked for the files); a directory that
    was there stays."""
    (tmp_path / "was-there").mkdir()
    out = tmp_path / "was-there" / "new" / "deeper"
    full_disk(monkeypatch, files_that_fit=2)
    code, _, stderr = recipectl_in_process("render", str(GB200), *GB200_VARIANT, "-o", str(out))
    assert code == 2 and "No space left on device".lower() in stderr, stderr
    assert list((tmp_path / "was-there").iterdir()) == []


def test_a_render_that_writes_nothing_takes_away_no_directory_that_was_there(
    recipectl_in_process, monkeypatch, tmp_path
):
    """`-o new/../was-there/x`: `was-there` existed, so only `new` and `x` are the render's; a check
    of each path as written had counted `was-there` as made, and removed it."""
    (tmp_path / "was-there").mkdir()
    monkeypatch.chdir(tmp_path)
    full_disk(monkeypatch)
    code, _, stderr = recipectl_in_process("render", str(LOCAL), "-o", "new/../was-there/x")
    assert code == 2 and "no space left on device" in stderr.lower(), stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["was-there"]
    assert list((tmp_path / "was-there").iterdir()) == []
