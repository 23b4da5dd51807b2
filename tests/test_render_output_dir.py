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
