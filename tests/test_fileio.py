"""The one reader and the one writer every user file goes through (recipectl/fileio.py)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

import pytest

from recipectl.fileio import UnreadableFile, read_text_bounded, write_atomic


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


@pytest.mark.parametrize("kill_after_writes", [0, 1, 2, 3])
def test_a_kill_mid_write_leaves_the_old_file_or_the_new_one(tmp_path, kill_after_writes):
    """SIGKILL injected at each os-level step of a write: the file is whole, old or new."""
    f = tmp_path / "recipe.yaml"
    old = "name: old\n" * 1000
    f.write_text(old)
    new = "name: new\n" * 2000
    script = textwrap.dedent(f"""
        import os, signal
        from recipectl import fileio
        steps = 0
        real_write, real_fsync, real_replace = os.write, os.fsync, os.replace
        def step():
            global steps
            if steps == {kill_after_writes}:
                os.kill(os.getpid(), signal.SIGKILL)
            steps += 1
        def fsync(fd):
            step(); return real_fsync(fd)
        def replace(a, b):
            step(); return real_replace(a, b)
        os.fsync = fsync
        os.replace = replace
        import io
        real_fdopen = os.fdopen
        class Out(io.FileIO):
            def write(self, b):
                step(); return super().write(b)
        os.fdopen = lambda fd, mode: Out(fd, "wb")
        fileio.write_atomic({str(f)!r}, {new!r})
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    text = f.read_text()
    assert text in (old, new)
    if proc.returncode == -signal.SIGKILL:
        leftovers = [p.name for p in tmp_path.iterdir() if p.name != "recipe.yaml"]
        assert all(p.endswith(".tmp") for p in leftovers)  # never a second recipe-looking file
    else:
        assert proc.returncode == 0, proc.stderr
        assert text == new
