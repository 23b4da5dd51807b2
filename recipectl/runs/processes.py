"""Process groups: start a process in its own session, check it is still ours, stop the group.

A process is identified by its pid *and* its start time (psutil's create_time): a pid the kernel
has given to another process since is not ours, and neither is one whose start time was never
recorded. Each process recipectl starts leads its own process group (pgid == its pid); the
kernel does not reuse a pid while a group of that id has members, so members of a recorded
group that started after its leader are ours even when the leader is gone."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import psutil

_SAME_START_S = 0.05  # create_time is boot time + start ticks: the same process reads the same value


def proc_start_time(pid: int) -> float | None:
    """When `pid` started (seconds since the epoch), None when there is no such process."""
    try:
        return psutil.Process(pid).create_time()
    except (psutil.Error, ValueError, TypeError):
        return None


def _live(p: psutil.Process) -> bool:
    try:
        return p.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def is_ours(pid: int | None, start_time: float | None) -> bool:
    """`pid` is alive and is the process that started at `start_time` (unknown start: not ours)."""
    if not pid or start_time is None:
        return False
    try:
        p = psutil.Process(pid)
        return abs(p.create_time() - start_time) < _SAME_START_S and _live(p)
    except (psutil.Error, ValueError, TypeError):
        return False


def group_members(pgid: int, started_after: float | None = None) -> list[psutil.Process]:
    """Live (non-zombie) members of process group `pgid`; with `started_after`, only those that
    started then or later (the leader's start: its children cannot be older)."""
    out = []
    for p in psutil.process_iter():
        try:
            if os.getpgid(p.pid) != pgid or not _live(p):
                continue
            if started_after is not None and p.create_time() < started_after - _SAME_START_S:
                continue
        except (OSError, psutil.Error):
            continue
        out.append(p)
    return out


def group_alive(pgid: int) -> bool:
    """Any live (non-zombie) member of process group `pgid`."""
    return bool(group_members(pgid))


def our_group(pid: int | None, start_time: float | None) -> list[psutil.Process]:
    """The live members of the group a recorded process leads: the leader if it is still ours, and
    the members that outlived it. Nothing when the start time is unknown, or when the pid now
    belongs to another process (then the old group is empty: its id could not have been reused)."""
    if not pid or start_time is None:
        return []
    leader = proc_start_time(pid)
    if leader is not None and abs(leader - start_time) >= _SAME_START_S:
        return []
    return group_members(pid, started_after=start_time)


def start(argv: list[str], env: dict[str, str], log_path: Path) -> subprocess.Popen:
    log = open(log_path, "ab", buffering=0)
    try:
        # start_new_session: its own process group, so the whole tree (engine cores, workers)
        # is stopped with one killpg; and Ctrl-C at the terminal reaches recipectl only.
        return subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True, close_fds=True)
    finally:
        log.close()


def _signal_group(pgid: int, sig: int) -> bool:
    try:
        os.killpg(pgid, sig)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return False


def stop_groups(pgids: list[int], grace_s: float) -> dict[int, str]:
    """SIGTERM every group, SIGKILL what is left after `grace_s`. Returns pgid -> how it ended.
    For groups whose leaders recipectl itself started (and still holds); recorded runs go
    through stop_recorded, which checks they are still ours first."""
    return _stop({g: None for g in pgids}, grace_s)


def stop_recorded(records: list[tuple[int, float | None]], grace_s: float) -> dict[int, str]:
    """Stop the groups of recorded processes, (pid, start time) each: only what our_group finds.
    Returns pgid -> terminated / killed / already gone / not ours (no start time recorded)."""
    outcome: dict[int, str] = {}
    groups: dict[int, float | None] = {}
    for pid, start_time in records:
        if not pid:
            continue
        if start_time is None:
            outcome[pid] = "not ours (no start time recorded)"
        elif our_group(pid, start_time):
            groups[pid] = start_time
        else:
            outcome[pid] = "already gone"
    outcome.update(_stop(groups, grace_s))
    return outcome


def _alive(pgid: int, start_time: float | None) -> bool:
    return bool(group_members(pgid, started_after=start_time))


def _stop(groups: dict[int, float | None], grace_s: float) -> dict[int, str]:
    outcome: dict[int, str] = {}
    for g in groups:
        outcome[g] = "terminated" if _signal_group(g, signal.SIGTERM) else "already gone"
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline and any(_alive(g, s) for g, s in groups.items()):
        time.sleep(0.2)
    for g, s in groups.items():
        if _alive(g, s) and _signal_group(g, signal.SIGKILL):
            outcome[g] = "killed"
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and any(_alive(g, s) for g, s in groups.items()):
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
