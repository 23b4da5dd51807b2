"""The one reader and the one writer every user file goes through (recipectl/fileio.py)."""

from __future__ import annotations

import os
import signal

import pytest

from recipectl.fileio import UnreadableFile, read_text_bounded, write_atomic

from .killpoints import count_steps, run_killed_at


def test_a_fifo_is_refused_without_blocking(tmp_path):
    fifo = tmp_path / "recipe.yaml"
    os.mkfifo(fifo)
    with pytest.raises(UnreadableFile, match="not a regular file"):
        read_text_bounded(fifo)


def test_a_device_and_a_directory_are_refused(tmp_path):
    with pytest.raises(UnreadableFile, match="not a regular file"):
        read_text_bounded("/dev/zero")
    with pytest.raises(UnreadableFile, match="a directory"):
        read_text_bounded(tmp_path)


def test_the_limit_is_a_limit(tmp_path):
    f = tmp_path / "big.yaml"
    f.write_bytes(b"a" * 1025)
    with pytest.raises(UnreadableFile, match="larger than 1 KiB"):
        read_text_bounded(f, limit=1024)
    assert read_text_bounded(f, limit=1025) == "a" * 1025


def test_binary_content_names_the_byte(tmp_path):
    f = tmp_path / "x.sh"
    f.write_bytes(b"vllm serve \xff\xfe")
    with pytest.raises(UnreadableFile, match=r"not UTF-8 text \(byte 11\)"):
        read_text_bounded(f)


def test_missing_and_overlong_names_are_reasons_not_tracebacks(tmp_path):
    with pytest.raises(UnreadableFile) as e:
        read_text_bounded(tmp_path / "nope.yaml")
    assert e.value.missing
    with pytest.raises(UnreadableFile, match="name too long"):
        read_text_bounded(tmp_path / ("m" * 5000))


def test_write_keeps_the_mode_and_replaces_a_symlink_not_its_target(tmp_path):
    f = tmp_path / "recipe.yaml"
    f.write_text("old\n")
    os.chmod(f, 0o600)
    write_atomic(f, "new\n")
    assert f.read_text() == "new\n" and (os.stat(f).st_mode & 0o777) == 0o600
    target = tmp_path / "target.yaml"
    target.write_text("keep\n")
    link = tmp_path / "link.yaml"
    link.symlink_to(target)
    write_atomic(link, "written\n")
    assert target.read_text() == "keep\n" and not link.is_symlink() and link.read_text() == "written\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link.yaml", "recipe.yaml", "target.yaml"]


def test_a_kill_mid_write_leaves_the_old_file_or_the_new_one(tmp_path):
    """SIGKILL injected at each os-level step of a write: the file is whole, old or new."""
    f = tmp_path / "recipe.yaml"
    old = "name: old\n" * 1000
    new = "name: new\n" * 2000
    code = f"from recipectl import fileio\nfileio.write_atomic({str(f)!r}, {new!r})\n"
    f.write_text(old)
    done, steps = count_steps(code, tmp_path)
    assert done.returncode == 0 and f.read_text() == new and steps >= 3, done.stderr  # write, fsync, replace
    for k in range(steps):
        f.write_text(old)
        proc = run_killed_at(k, code, tmp_path)
        assert proc.returncode == -signal.SIGKILL, proc.stderr
        assert f.read_text() in (old, new)
        leftovers = [p.name for p in tmp_path.iterdir() if p.name != "recipe.yaml"]
        assert all(p.endswith(".tmp") for p in leftovers)  # never a second recipe-looking file


def test_create_only_never_replaces_what_is_there(tmp_path):
    """replace=False (render without --force): a file, or a symlink even dangling, that appeared
    after the caller looked stays as it is, and no temporary file is left."""
    f = tmp_path / "run.sh"
    f.write_text("mine\n")
    dangling = tmp_path / "link.sh"
    dangling.symlink_to(tmp_path / "nowhere")
    for target in (f, dangling):
        with pytest.raises(FileExistsError):
            write_atomic(target, "rendered\n", replace=False)
    assert f.read_text() == "mine\n" and dangling.is_symlink() and not (tmp_path / "nowhere").exists()
    write_atomic(tmp_path / "new.sh", "rendered\n", mode=0o755, replace=False)
    assert (tmp_path / "new.sh").read_text() == "rendered\n" and os.stat(tmp_path / "new.sh").st_mode & 0o777 == 0o755
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link.sh", "new.sh", "run.sh"]
