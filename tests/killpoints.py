"""Run Python code in a subprocess that SIGKILLs itself at its k-th os-level write step.

The steps are what a file write is made of: each write to a file opened with os.fdopen (how
fileio.write_atomic writes), each os.fsync (the file's, the directory's) and the os.replace that
puts the new file in place. `count_steps` runs the code to its end and says how many it took;
`run_killed_at(k)` runs it again, killed just before step k. A test then checks what the kill left.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

_PREAMBLE = textwrap.dedent("""
    import atexit, io, os, signal
    _kill_at = int(os.environ["KILLPOINT_AT"])
    _steps = 0
    def _step():
        global _steps
        if _steps == _kill_at:
            os.kill(os.getpid(), signal.SIGKILL)
        _steps += 1
    def _count():
        with open(os.environ["KILLPOINT_COUNT"], "w") as f:
            f.write(str(_steps))
    atexit.register(_count)
    _fsync, _replace, _fdopen = os.fsync, os.replace, os.fdopen
    def _fsync_step(fd):
        _step(); return _fsync(fd)
    def _replace_step(a, b, **kw):
        _step(); return _replace(a, b, **kw)
    class _Out(io.FileIO):
        def write(self, b):
            _step(); return super().write(b)
    def _fdopen_step(fd, mode="r", *args, **kwargs):
        if "w" in mode and "b" in mode:
            return _Out(fd, "wb")
        return _fdopen(fd, mode, *args, **kwargs)
    os.fsync, os.replace, os.fdopen = _fsync_step, _replace_step, _fdopen_step
""")


def _run(code: str, kill_at: int, workdir: Path, cwd: Path | None) -> tuple[subprocess.CompletedProcess, int]:
    count = workdir / ".killpoint-count"
    count.unlink(missing_ok=True)
    env = {**os.environ, "KILLPOINT_AT": str(kill_at), "KILLPOINT_COUNT": str(count)}
    proc = subprocess.run(
        [sys.executable, "-c", _PREAMBLE + textwrap.dedent(code)],
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd,
        timeout=120,
    )
    steps = int(count.read_text()) if count.exists() else -1
    count.unlink(missing_ok=True)
    return proc, steps


def count_steps(code: str, workdir: Path, cwd: Path | None = None) -> tuple[subprocess.CompletedProcess, int]:
    """Run `code` without a kill: its result and the number of write steps it took."""
    return _run(code, -1, workdir, cwd)


def run_killed_at(k: int, code: str, workdir: Path, cwd: Path | None = None) -> subprocess.CompletedProcess:
    """Run `code`, SIGKILLed just before its write step `k` (0-based)."""
    return _run(code, k, workdir, cwd)[0]


def recipectl_code(*args: str) -> str:
    """Code that runs `recipectl ARGS` as the console script does."""
    return f"import sys\nsys.argv = ['recipectl', *{list(args)!r}]\nfrom recipectl.entry import main\nmain()\n"
