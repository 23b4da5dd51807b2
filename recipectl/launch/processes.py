"""Process groups: start a process in its own session, check it is still ours, stop the group."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path


def proc_start_ticks(pid: int) -> int | None:
    """Start time of `pid` in clock ticks since boot (field 22 of /proc/PID/stat)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat.rsplit(")", 1)[1].split()[19])


def is_ours(pid: int | None, start_ticks: int | None) -> bool:
    if not pid:
        return False
    ticks = proc_start_ticks(pid)
    if ticks is None:
        return False
    state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    if state == "Z":
        return False
    return start_ticks is None or ticks == start_ticks


def group_alive(pgid: int) -> bool:
    """Any live (non-zombie) member of process group `pgid`."""
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            fields = (d / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            return True
    return False


def start(argv: list[str], env: dict[str, str], log_path: Path) -> subprocess.Popen:
    log = open(log_path, "ab", buffering=0)
    try:
        # start_new_session: its own process group, so the whole tree (engine cores, workers)
        # is stopped with one killpg; and Ctrl-C at the terminal reaches recipectl only.
        return subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True, close_fds=True)
    finally:
        log.close()


def stop_groups(pgids: list[int], grace_s: float) -> dict[int, str]:
    """SIGTERM every group, SIGKILL what is left after `grace_s`. Returns pgid -> how it ended."""
    outcome: dict[int, str] = {}
    for g in pgids:
        try:
            os.killpg(g, signal.SIGTERM)
            outcome[g] = "terminated"
        except ProcessLookupError:
            outcome[g] = "already gone"
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline and any(group_alive(g) for g in pgids):
        time.sleep(0.2)
    for g in pgids:
        if group_alive(g):
            try:
                os.killpg(g, signal.SIGKILL)
                outcome[g] = "killed"
            except ProcessLookupError:
                pass
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and any(group_alive(g) for g in pgids):
        time.sleep(0.1)
    return outcome


def port_in_use(host: str, port: int) -> bool:
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host if host not in ("0.0.0.0", "") else "0.0.0.0", port))
        except OSError:
            return True
    return False


def tail(path: str | Path, n: int = 30) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - 64 * 1024))
            data = f.read().decode("utf-8", errors="replace")
    except OSError:
        return ""
    return "\n".join(data.splitlines()[-n:])


def last_line(path: str | Path) -> str:
    t = tail(path, 5).strip().splitlines()
    return t[-1] if t else ""
