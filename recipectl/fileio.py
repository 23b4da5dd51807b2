"""Every file recipectl reads from a user or writes for one goes through here.

Reading: a regular file only (a FIFO, device or directory is refused without a blocking open:
`validate` on a FIFO once waited forever, `/dev/zero` as a config once took 1.9 GB), bounded in
size, decoded as UTF-8 strictly. JSON a user hands recipectl (a file, a flag value such as
`--kv-transfer-config`) is parsed by `parse_json`, bounded in size and nesting: 1,000 `[` once
ended in a RecursionError. Writing: a temporary file in the target's directory, fsync,
rename, so that a kill or a full disk leaves the old file or the new one, never a cut-off one.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import re
import stat
import tempfile
from pathlib import Path

MiB = 1 << 20
DEFAULT_READ_LIMIT = 1 * MiB  # a recipe, a script, a config file: far larger is not one


class UnreadableFile(ValueError):
    """A path that is not a bounded regular text file. `reason` says what it is instead."""

    def __init__(self, path: str | os.PathLike[str], reason: str, *, missing: bool = False):
        super().__init__(reason)  # the caller names the file, in its own words
        self.path = os.fspath(path)
        self.reason = reason
        self.missing = missing


def read_bytes_bounded(path: str | os.PathLike[str], limit: int = DEFAULT_READ_LIMIT) -> bytes:
    """The bytes of a regular file of at most `limit` bytes.

    Raises UnreadableFile for a directory, FIFO, socket, device, a file over the limit, or one that
    cannot be opened (missing, no permission, a name too long): the reason names which."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise UnreadableFile(path, "no such file", missing=True) from None
    except OSError as e:
        raise UnreadableFile(path, _os_reason(e)) from None
    except ValueError:
        # os.stat refuses a NUL byte rather than failing like a missing file; no such file can exist.
        raise UnreadableFile(path, "a name with a NUL byte cannot name a file", missing=True) from None
    if stat.S_ISDIR(st.st_mode):
        raise UnreadableFile(path, "a directory, not a file")
    if not stat.S_ISREG(st.st_mode):
        raise UnreadableFile(path, "not a regular file (a FIFO, socket or device)")
    if st.st_size > limit:
        raise UnreadableFile(path, f"larger than {_size(limit)}")
    try:
        # O_NONBLOCK: a FIFO swapped in between the stat and the open must not block the open.
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0))
    except OSError as e:
        raise UnreadableFile(path, _os_reason(e)) from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise UnreadableFile(path, "not a regular file (a FIFO, socket or device)")
        chunks: list[bytes] = []
        size = 0
        while size <= limit:  # a file that grows while it is read is still cut at the limit
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    except OSError as e:
        raise UnreadableFile(path, _os_reason(e)) from None
    finally:
        os.close(fd)
    if size > limit:
        raise UnreadableFile(path, f"larger than {_size(limit)}")
    return b"".join(chunks)


def read_text_bounded(path: str | os.PathLike[str], limit: int = DEFAULT_READ_LIMIT) -> str:
    """`read_bytes_bounded`, decoded as UTF-8 (a BOM is kept: writers that round-trip need it).

    Raises UnreadableFile for binary content too, naming the byte offset."""
    data = read_bytes_bounded(path, limit)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise UnreadableFile(path, f"not UTF-8 text (byte {e.start})") from None


JSON_MAX_DEPTH = 32  # a flag value or a model's config.json nests a few levels
JSON_MAX_BYTES = DEFAULT_READ_LIMIT

# what decides JSON's nesting: strings (skipped whole, escapes included) and brackets
_JSON_NESTING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"?|[\[\]{}]')


class JsonRefused(ValueError):
    """JSON text recipectl does not parse: too large, nested too deeply, or not JSON at all."""


def parse_json(text: str, *, max_depth: int = JSON_MAX_DEPTH, max_bytes: int = JSON_MAX_BYTES) -> object:
    """The value of JSON `text`, of at most `max_bytes` bytes (UTF-8) and `max_depth` nested
    arrays/objects; JsonRefused (a ValueError) otherwise, its message short enough to print.

    The nesting is measured before parsing (json recurses once per level)."""
    if len(text) > max_bytes or len(text.encode("utf-8", "surrogatepass")) > max_bytes:
        raise JsonRefused(f"larger than {_size(max_bytes)}")
    depth = 0
    for m in _JSON_NESTING.finditer(text):
        c = m.group()
        if c in "[{":
            depth += 1
            if depth > max_depth:
                raise JsonRefused(f"nested too deeply (more than {max_depth} levels)")
        elif c in "]}":
            depth -= 1
    try:
        return json.loads(text)
    except RecursionError:  # not reached within the depth limit; kept so that nothing escapes
        raise JsonRefused(f"nested too deeply (more than {max_depth} levels)") from None
    except ValueError as e:
        raise JsonRefused(f"not valid JSON: {_short(str(e))}") from None


def read_json_bounded(
    path: str | os.PathLike[str], limit: int = DEFAULT_READ_LIMIT, *, max_depth: int = JSON_MAX_DEPTH
) -> object:
    """`read_text_bounded`, parsed by `parse_json`. Raises UnreadableFile, or JsonRefused."""
    return parse_json(read_text_bounded(path, limit), max_depth=max_depth, max_bytes=limit)


def same_file_as(path: str | os.PathLike[str], inputs: list[str]) -> str | None:
    """The first of `inputs` that `path` is: one file under any name (the same path, a hard link,
    an input that is a symlink to it). `path` itself is not followed: write_atomic replaces a
    symlink there, never its target. None where `path` does not exist or is none of them."""
    try:
        st = os.lstat(path)
    except (OSError, ValueError):
        return None
    for f in inputs:
        try:
            if os.path.samestat(st, os.stat(f)):
                return f
        except (OSError, ValueError):
            continue
    return None


class UnwritableFile(OSError):
    """A file write_atomic could not put in place (a read-only or full disk, no permission, a
    directory there). `path` is the file meant, never the temporary one; `reason` says why, in the
    OS's words; nothing of the new file is left, and the old file is as it was."""

    def __init__(self, path: str | os.PathLike[str], error: OSError):
        super().__init__(error.errno, _os_reason(error))
        self.path = os.fspath(path)
        self.reason = _os_reason(error)


def write_atomic(
    path: str | os.PathLike[str], data: str | bytes, *, mode: int | None = None, replace: bool = True
) -> None:
    """Replace `path` with `data` in one rename: readers and a kill at any point see the old file or
    the new one. The new file keeps the old one's permission bits (or `mode`, or 0o644 less the
    umask for a new file). A symlink at `path` is replaced by the file, never written through:
    callers that mean the target resolve it first. With `replace=False` the file is only created:
    FileExistsError when anything (a file, a symlink, even a dangling one) is at `path`, checked
    in the same step that puts the file there (a hard link, never a rename over). Any other
    failure is UnwritableFile, with no temporary file left."""
    write_all_atomic([(path, data, mode)], replace=replace)


def write_all_atomic(
    files: list[tuple[str | os.PathLike[str], str | bytes, int | None]], *, replace: bool = True
) -> None:
    """write_atomic for several files (path, data, mode) that are written together (a render's
    scripts): each is written in full beside its target first, and only once all are, each is put
    in place, so that a full disk or a read-only directory leaves none of them new (a rename that
    fails after others, for a reason the writes did not show, still leaves each file whole)."""
    staged: list[tuple[str, Path]] = []
    try:
        for path, data, mode in files:
            staged.append((_stage(Path(path), data, mode), Path(path)))
        while staged:
            tmp, target = staged[0]
            try:
                if replace:
                    os.replace(tmp, target)
                else:
                    os.link(tmp, target, follow_symlinks=False)
                    os.unlink(tmp)
            except FileExistsError:
                raise FileExistsError(errno.EEXIST, "file exists", os.fspath(target)) from None
            except OSError as e:
                raise UnwritableFile(target, e) from e
            staged.pop(0)
            _fsync_directory(target.parent if str(target.parent) else Path("."))
    finally:
        for tmp, _ in staged:
            with contextlib.suppress(OSError):
                os.unlink(tmp)


def _stage(target: Path, data: str | bytes, mode: int | None) -> str:
    """`data` in a temporary file beside `target`, synced, with the mode the new file gets; its path.
    UnwritableFile (naming `target`) when it cannot be, with nothing left behind."""
    payload = data.encode("utf-8") if isinstance(data, str) else data
    if mode is None:
        try:
            mode = stat.S_IMODE(os.lstat(target).st_mode) if not target.is_symlink() else None
        except FileNotFoundError:
            mode = None
        except OSError as e:
            raise UnwritableFile(target, e) from e
    if mode is None:
        umask = os.umask(0)
        os.umask(umask)
        mode = 0o644 & ~umask
    directory = target.parent if str(target.parent) else Path(".")
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name[:64]}.", suffix=".tmp", dir=directory)
    except OSError as e:
        raise UnwritableFile(target, e) from e
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(payload)
            out.flush()
            os.fsync(out.fileno())
        os.chmod(tmp, mode)
    except BaseException as e:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        if isinstance(e, OSError):
            raise UnwritableFile(target, e) from e
        raise
    return tmp


def append_line(path: str | os.PathLike[str], line: str) -> None:
    """Append one line (a newline is added) to `path`, created if missing, in one write(2) with
    O_APPEND: a kill leaves the line whole or absent, and two writers never interleave their
    lines. A symlink at `path` is refused (O_NOFOLLOW), never written through. Where the file does
    not end in a newline (a writer that ran out of disk), the same write starts with one, so that
    the cut-off line never swallows this one."""
    if "\n" in line:
        raise ValueError("append_line writes one line: the text holds a newline")
    fd = open_regular(path, os.O_RDWR | os.O_APPEND | os.O_CREAT)
    try:
        size = os.fstat(fd).st_size
        lead = b"\n" if size and os.pread(fd, 1, size - 1) != b"\n" else b""
        data = lead + line.encode("utf-8") + b"\n"
        written = os.write(fd, data)
        if written != len(data):  # a full disk: the reader skips the cut-off line
            raise OSError(f"{os.fspath(path)}: wrote {written} of {len(data)} bytes (disk full?)")
    finally:
        os.close(fd)


def open_regular(path: str | os.PathLike[str], flags: int) -> int:
    """`path` opened with `flags` (0o644 where O_CREAT makes it), as a descriptor, only where it is
    a regular file: a symlink is never followed (ELOOP), a FIFO never waited on, and anything else
    that is there (a FIFO, a device, a socket) is closed again and refused (OSError EINVAL)."""
    fd = os.open(path, flags | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0), 0o644)
    if stat.S_ISREG(os.fstat(fd).st_mode):
        return fd
    os.close(fd)
    raise OSError(errno.EINVAL, "not a regular file", os.fspath(path))


def open_beneath(directory: str | os.PathLike[str], relative: str | os.PathLike[str]) -> int:
    """A regular file at `relative` under `directory`, opened for reading (a descriptor): each
    component is opened relative to the one before it without following a symlink, so a link that
    somebody swaps in after a path was checked leads nowhere else, and a FIFO is never waited on.

    Raises UnreadableFile for a path that leaves `directory` (absolute, `..`), a symlink at any
    step, anything but a regular file at the end, or one that cannot be opened (missing=True where
    it does not exist)."""
    parts = [part for part in Path(relative).parts if part != "."]
    if not parts or Path(relative).is_absolute() or ".." in parts:
        raise UnreadableFile(relative, f"not a path inside {os.fspath(directory)}")
    nofollow = os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0)
    try:
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except FileNotFoundError:
        raise UnreadableFile(directory, "no such directory", missing=True) from None
    except (OSError, ValueError) as e:
        raise UnreadableFile(directory, _os_reason(e) if isinstance(e, OSError) else str(e)) from None
    try:
        for k, part in enumerate(parts):
            last = k == len(parts) - 1
            try:
                step = os.open(part, os.O_RDONLY | nofollow | (0 if last else os.O_DIRECTORY), dir_fd=fd)
            except FileNotFoundError:
                raise UnreadableFile(relative, "no such file", missing=True) from None
            except OSError as e:
                # O_NOFOLLOW on a symlink: ELOOP; O_DIRECTORY on one: ENOTDIR (or ELOOP)
                link = e.errno in (errno.ELOOP, errno.ENOTDIR) and _is_link(part, fd)
                raise UnreadableFile(relative, "a symlink, not followed" if link else _os_reason(e)) from None
            except ValueError as e:
                raise UnreadableFile(relative, str(e), missing=True) from None
            os.close(fd)
            fd = step
        mode = os.fstat(fd).st_mode
        if stat.S_ISDIR(mode):
            raise UnreadableFile(relative, "a directory, not a file")
        if not stat.S_ISREG(mode):
            raise UnreadableFile(relative, "not a regular file (a FIFO, socket or device)")
    except BaseException:
        os.close(fd)
        raise
    return fd


def _is_link(name: str, dir_fd: int) -> bool:
    try:
        return stat.S_ISLNK(os.lstat(name, dir_fd=dir_fd).st_mode)
    except OSError:
        return False


def _fsync_directory(directory: Path) -> None:
    # The rename is durable only once the directory entry is: without this a power cut after
    # write_atomic returned could still show the old file.
    with contextlib.suppress(OSError):
        fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _os_reason(e: OSError) -> str:
    return (e.strerror or type(e).__name__).lower()


def _short(text: str, limit: int = 80) -> str:
    return text if len(text) <= limit else text[:limit] + "..."


def _size(limit: int) -> str:
    return f"{limit // MiB} MiB" if limit >= MiB and limit % MiB == 0 else f"{limit // 1024} KiB"
