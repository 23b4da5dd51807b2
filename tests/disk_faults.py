"""A full or read-only disk in a test, without one: the OS calls recipectl's writes make fail as
they fail there (ENOSPC when the data is synced, EROFS when the file is created)."""

from __future__ import annotations

import errno
import os
import stat
import tempfile

import pytest


def full_disk(monkeypatch: pytest.MonkeyPatch, *, files_that_fit: int = 0) -> None:
    """os.fsync of a file fails with ENOSPC once `files_that_fit` files have been synced: the data
    written to the file so far stays in it (a cut-off file), as on a disk that filled up."""
    real_fsync = os.fsync
    synced: list[int] = []

    def fsync(fd: int) -> None:
        if stat.S_ISDIR(os.fstat(fd).st_mode):  # a directory's entry: no room needed
            return real_fsync(fd)
        if len(synced) < files_that_fit:
            synced.append(fd)
            return real_fsync(fd)
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "fsync", fsync)


def read_only_disk(monkeypatch: pytest.MonkeyPatch) -> None:
    """Creating a file fails with EROFS, as in a directory on a read-only mount (or, for a user
    other than root, one without write permission)."""

    def mkstemp(*args, **kwargs):
        raise OSError(errno.EROFS, os.strerror(errno.EROFS), kwargs.get("dir"))

    monkeypatch.setattr(tempfile, "mkstemp", mkstemp)
