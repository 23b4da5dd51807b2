"""Process groups: start a process in its own session, know exactly which processes are ours,
stop them.

A process is identified by its pid *and* its start (Start): a pid the kernel has given to
another process since is not ours, and neither is one whose start was never recorded. Each
process recipectl starts leads its own session and process group (pgid == its pid). The
processes of such a group that are ours are: the leader, while its pid and start time still
match the record; the members the launcher recorded (pid and start time each); and the live
descendants of either that are still in the group. Never "whatever is in the group now", nor
"whatever started later": once a recorded leader has exited, its pid -- and so the group id --
can belong to anybody's process group.

A record is data that whoever can write the run directory can edit, with the pid and start time
of any process. So a recorded group is only ever looked for among the processes of one user: the
one who owns the record (stop passes the owner of state.json or of the journal). Its author can
then make stop signal nothing they could not signal themselves, and nothing of anybody else's
when stop runs as root."""

from __future__ import annotations

import os
import signal
import socket
import stat
import subprocess
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Protocol

import psutil

from ..errors import RecipectlError

# A record without ticks (an older recipectl) is compared by create_time: the same process reads
# the same value, as long as the wall clock has not been stepped since
_SAME_START_S = 0.05
_STAT_STARTTIME = 19  # field 22 of /proc/PID/stat, counted from field 3 (the first after the name)


@dataclass(frozen=True)
class Start:
    """When a process started, as recorded to know it again: `time`, seconds since the epoch
    (psutil's create_time), and, where /proc has them, `ticks`, clock ticks since boot (field 22 of
    /proc/PID/stat), with `boot`, the kernel's boot id. create_time is the boot time plus those
    ticks, and Linux derives the boot time from the wall clock: after a clock step (NTP, a VM that
    was paused) every live process's create_time moves, its ticks do not. So ticks and boot id
    decide where both sides have them, a different boot is another process, and create_time
    within _SAME_START_S is the comparison only for a record that has no ticks."""

    time: float
    ticks: int | None = None
    boot: str | None = None


class Recorded(Protocol):
    """A record of a started process (ProcessState, Member, JournalEntry): what its start was."""

    @property
    def start_time(self) -> float | None: ...

    @property
    def start_ticks(self) -> int | None: ...

    @property
    def boot_id(self) -> str | None: ...


def recorded_start(record: Recorded) -> Start | None:
    """The start a record names; None when it names no start time (never ours)."""
    if record.start_time is None:
        return None
    return Start(record.start_time, record.start_ticks, record.boot_id)


@cache
def boot_id() -> str | None:
    """This boot's id (a new one at every boot), None where the kernel does not say."""
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip() or None
    except OSError:
        return None


def start_ticks(pid: int) -> int | None:
    """When `pid` started, in clock ticks since boot; None where /proc does not say. The fields are
    counted after the last ')': the command name before it may hold spaces and parentheses."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat_line = f.read()
    except OSError:
        return None
    _, paren, rest = stat_line.rpartition(b")")
    fields = rest.split()
    if not paren or len(fields) <= _STAT_STARTTIME:
        return None
    try:
        return int(fields[_STAT_STARTTIME])
    except ValueError:
        return None


def proc_start_time(pid: int) -> float | None:
    """When `pid` started (seconds since the epoch), None when there is no such process."""
    try:
        return psutil.Process(pid).create_time()
    except (psutil.Error, ValueError, TypeError, OverflowError):
        return None


def proc_start(pid: int) -> Start | None:
    """When `pid` started (Start), None when there is no such process."""
    ticks = start_ticks(pid)
    time_ = proc_start_time(pid)
    if time_ is None:
        return None
    return Start(time_, ticks, boot_id() if ticks is not None else None)


def _live(p: psutil.Process) -> bool:
    try:
        return p.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def same_start(a: Start | None, b: Start | None) -> bool:
    """`a` and `b` are the start of one process (see Start)."""
    if a is None or b is None:
        return False
    if a.ticks is not None and b.ticks is not None and a.boot and b.boot:
        return a.ticks == b.ticks and a.boot == b.boot
    return abs(a.time - b.time) < _SAME_START_S


def _not_older(child: Start, parent: Start) -> bool:
    """`child` started no earlier than `parent` (two live processes, read at one time)."""
    if child.ticks is not None and parent.ticks is not None:
        return child.ticks >= parent.ticks
    return child.time >= parent.time - _SAME_START_S


def is_ours(pid: int | None, start: Start | None) -> bool:
    """`pid` is alive and is the process that started at `start` (unknown start: not ours)."""
    if not pid or start is None:
        return False
    try:
        p = psutil.Process(pid)
        return same_start(proc_start(pid), start) and _live(p)
    except (psutil.Error, ValueError, TypeError, OverflowError):
        return False


def group_members(pgid: int) -> list[psutil.Process]:
    """Live (non-zombie) members of process group `pgid`, whoever started them. Only for a group
    whose leader the caller holds (its own unreaped child): any other group id may be reused."""
    out = []
    for p in psutil.process_iter():
        try:
            if os.getpgid(p.pid) == pgid and _live(p):
                out.append(p)
        except (OSError, psutil.Error):
            continue
    return out


def group_alive(pgid: int) -> bool:
    """Any live (non-zombie) member of process group `pgid`."""
    return bool(group_members(pgid))


@dataclass
class Group:
    """A recorded process group: its leader (pid and start time, as the launcher recorded them)
    and the members the launcher saw it lead, (pid, start time) each."""

    name: str
    pid: int
    start: Start | None
    members: list[tuple[int, Start | None]] = field(default_factory=list)
    uid: int | None = None  # whose processes it may be (the record's owner); None: this process's user


@dataclass
class Found:
    """What of a recorded group is ours now, and why anything else was left alone (in words)."""

    processes: list[psutil.Process]
    note: str = ""
    mismatched: int | None = None  # the recorded leader's pid, where a live process with another start holds it


@dataclass
class _Row:
    proc: psutil.Process
    ppid: int
    pgid: int
    start: Start
    uid: int


def process_table() -> dict[int, _Row]:
    """Every live process: its parent, group and start time (one pass over /proc)."""
    rows: dict[int, _Row] = {}
    boot = boot_id()
    for p in psutil.process_iter(["ppid", "create_time", "status", "uids"]):
        try:
            if p.info["status"] == psutil.STATUS_ZOMBIE or p.info["create_time"] is None or p.info["uids"] is None:
                continue
            ticks = start_ticks(p.pid)
            start = Start(p.info["create_time"], ticks, boot if ticks is not None else None)
            rows[p.pid] = _Row(p, p.info["ppid"], os.getpgid(p.pid), start, p.info["uids"].real)
        except (OSError, psutil.Error):
            continue
    return rows


def _clock(t: float) -> str:
    return time.strftime("%H:%M:%S", time.localtime(t))


def find_ours(group: Group, table: dict[int, _Row] | None = None) -> Found:
    """The live processes of `group` that are ours (see the module's docstring); `table`: a
    process_table() to look in (one pass for many groups)."""
    every = process_table() if table is None else table
    uid = os.geteuid() if group.uid is None else group.uid
    rows = {pid: row for pid, row in every.items() if row.uid == uid}
    anchors: list[int] = []
    note = ""
    mismatched = None
    leader = rows.get(group.pid)
    others = [pid for pid in (group.pid, *(m for m, _ in group.members)) if pid in every and pid not in rows]
    if others:
        note = (
            f"pid {', '.join(map(str, others[:5]))}{' ...' if len(others) > 5 else ''} belongs to another user "
            f"than the run's record (uid {uid}), so it is not one recipectl started for it: not signalled"
        )
    if group.start is None:
        note = f"pid {group.pid}: no start time recorded, so it may be another process: not signalled"
    elif leader is not None and same_start(leader.start, group.start):
        anchors.append(group.pid)
    elif leader is not None:
        mismatched = group.pid
        note = note or (
            f"pid {group.pid} is no longer the process recipectl started (started {_clock(leader.start.time)}, "
            f"recorded {_clock(group.start.time)}): not signalled"
        )
    # A recorded member is one of the group's processes while it is in the group: one that has
    # since left it (setsid) leads a group of its own, which no record of this group vouches for.
    left_group: list[int] = []
    for pid, start in group.members:
        row = rows.get(pid)
        if row is not None and same_start(row.start, start):
            (anchors if row.pgid == group.pid else left_group).append(pid)
    if left_group:
        moved = (
            f"pid {', '.join(map(str, left_group[:5]))}{' ...' if len(left_group) > 5 else ''}, recorded in group "
            f"{group.pid}, has left it for a process group of its own: not signalled"
        )
        note = f"{note}; {moved}" if note else moved
    if group.start is not None and leader is None and not anchors:
        strangers = [pid for pid, row in rows.items() if row.pgid == group.pid]
        if strangers:
            note = (
                f"pid {group.pid} (recorded start {_clock(group.start.time)}) has exited; the "
                f"{len(strangers)} process{'es' if len(strangers) != 1 else ''} now in group {group.pid} "
                "are not ones recipectl started: not signalled"
            )
    children: dict[int, list[int]] = {}
    for pid, row in rows.items():
        children.setdefault(row.ppid, []).append(pid)
    ours: dict[int, psutil.Process] = {}
    never = _never_signalled()
    refused: set[int] = set()
    todo = list(anchors)
    while todo:
        pid = todo.pop()
        if pid in ours or pid in refused:
            continue
        if pid in never or pid <= 0:  # whatever a record says: neither it nor what it leads
            refused.add(pid)
            continue
        ours[pid] = rows[pid].proc
        # a descendant in the group: a child is never older than its parent
        todo.extend(
            c for c in children.get(pid, ()) if rows[c].pgid == group.pid and _not_older(rows[c].start, rows[pid].start)
        )
    if refused:
        why = (
            f"pid {', '.join(map(str, sorted(refused)))} is init, this recipectl or one of the processes it "
            "runs under: never signalled"
        )
        note = f"{note}; {why}" if note else why
    return Found(list(ours.values()), note, mismatched)


def _never_signalled() -> set[int]:
    """What stop never signals, whichever record names it: init (pid 1), this process and every
    process it runs under (the shell, a launch that runs stop, a terminal)."""
    never = {1, os.getpid()}
    try:
        never |= {p.pid for p in psutil.Process().parents()}
    except psutil.Error:
        pass
    return never


def members_of(pid: int, start: Start | None) -> list[tuple[int, Start]]:
    """(pid, start) of each live process that the recorded process leads (its descendants in its
    group): what a launcher records, so that stop finds them after the leader has exited."""
    rows = process_table()
    found = find_ours(Group("", pid, start), rows)
    return [(p.pid, rows[p.pid].start) for p in found.processes if p.pid != pid]


def start(argv: list[str], env: dict[str, str], log_path: Path) -> subprocess.Popen:
    """Start one process of a run, its output to `log_path`; a program that is missing or not
    executable is the user's to fix (RecipectlError naming it), not an internal error."""
    log = open(log_path, "ab", buffering=0)
    try:
        # start_new_session: its own process group, so the whole tree (engine cores, workers)
        # is stopped with one killpg; and Ctrl-C at the terminal reaches recipectl only.
        return subprocess.Popen(
            argv,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            close_fds=True,
        )
    except (FileNotFoundError, PermissionError, NotADirectoryError) as e:
        what = "not found" if isinstance(e, FileNotFoundError) else "not executable"
        raise RecipectlError(
            f"cannot start {argv[0]}: {what}",
            fix="install it in the engine venv (bash scripts/install-engine.sh), or point engine.venv "
            "(or engine.router_command) at the environment that has it",
        ) from None
    finally:
        log.close()


def _signal_group(pgid: int, sig: int) -> bool:
    try:
        os.killpg(pgid, sig)
        return True
    except (ProcessLookupError, PermissionError):
        return False


def _wait_gone(ps: list[psutil.Process], timeout: float) -> list[psutil.Process]:
    """psutil.wait_procs until every process has exited or `timeout`; a zombie (exited, its parent
    has not reaped it yet) counts as gone. Returns what is still alive.

    One wait_procs call for the whole `timeout` is not enough: a zombie that is not our child
    (a supervising `launch` holds its exited leaders unreaped until it has stopped their groups)
    stays "alive" to psutil until its pid disappears, so stop would wait out the grace period for
    a process that has already exited and then report it killed. Hence slices of 0.25 s, with the
    zombies dropped between them."""
    deadline = time.monotonic() + timeout
    alive = [p for p in ps if _live(p)]
    while alive:
        left = deadline - time.monotonic()
        if left <= 0:
            break
        _, alive = psutil.wait_procs(alive, timeout=min(0.25, left))
        alive = [p for p in alive if _live(p)]
    return alive


def _signal(ps: Iterable[psutil.Process], sig: int) -> None:
    for p in ps:
        try:
            p.send_signal(sig)  # psutil checks the pid still names this process (its start time)
        except psutil.Error:
            continue


def stop_groups(pgids: list[int], grace_s: float) -> dict[int, str]:
    """SIGTERM every group, SIGKILL what is left after `grace_s`. Returns pgid -> how it ended.
    Only for groups whose leaders the caller started and still holds, unreaped (a zombie keeps
    its pid, so the group id cannot have been reused); recorded runs go through stop_recorded."""
    outcome = {g: "terminated" if _signal_group(g, signal.SIGTERM) else "already gone" for g in pgids}
    left = _wait_gone([p for g in pgids for p in group_members(g)], grace_s)
    for g in pgids:
        if group_members(g) and _signal_group(g, signal.SIGKILL):
            outcome[g] = "killed"
    _wait_gone([p for g in pgids for p in group_members(g)] + left, 10)
    return outcome


class StopInterrupted(KeyboardInterrupt):
    """Ctrl-C while stop_recorded waited: `outcome` says, for each group, how far it got."""

    def __init__(self, outcome: list[tuple[str, str]]):
        super().__init__()
        self.outcome = outcome


def stop_recorded(groups: list[Group], grace_s: float) -> list[tuple[str, str]]:
    """Stop what find_ours finds of each recorded group: SIGTERM, psutil.wait_procs for `grace_s`,
    then SIGKILL to what is left (and to descendants started meanwhile). Returns, for each group in
    turn (two records may name one pid), (outcome, note): terminated / killed / still running /
    already gone / not signalled. Ctrl-C meanwhile: StopInterrupted, with the same for what had
    been done (what was signalled and is still alive: still running)."""
    table = process_table()
    found = _truthful([find_ours(g, table) for g in groups], groups)
    mine = [list(f.processes) for f in found]
    killed: set[int] = set()
    try:
        _signal(_each_once(mine), signal.SIGTERM)
        left = {p.pid for p in _wait_gone(_each_once(mine), grace_s)}
        if left:
            table = process_table()  # and what the survivors started meanwhile: still ours, by ancestry
            for i, g in enumerate(groups):
                seen = {p.pid for p in mine[i]}
                mine[i] = [p for p in mine[i] if p.pid in left] + [
                    p for p in find_ours(g, table).processes if p.pid not in seen
                ]
                killed |= {i} if mine[i] else set()
            _signal(_each_once(mine), signal.SIGKILL)
            left = {p.pid for p in _wait_gone(_each_once(mine), 10)}
    except KeyboardInterrupt:
        left = {p.pid for p in _each_once(mine) if _live(p)}
        raise StopInterrupted(_outcome(found, mine, killed, left)) from None
    return _outcome(found, mine, killed, left)


def _outcome(
    found: list[Found], mine: list[list[psutil.Process]], killed: set[int], left: set[int]
) -> list[tuple[str, str]]:
    outcome: list[tuple[str, str]] = []
    for i, f in enumerate(found):
        if not f.processes:
            outcome.append(("not signalled" if f.note else "already gone", f.note))
        elif any(p.pid in left for p in mine[i]):
            outcome.append(("still running", f.note))
        else:
            outcome.append(("killed" if i in killed else "terminated", f.note))
    return outcome


def _truthful(found: list[Found], groups: list[Group]) -> list[Found]:
    """Two records may name one pid (a state that lists a process twice, one record of it out of
    date): the one that matches the live process stops it, and the other's note then says so
    instead of that it was left alone."""
    taken: dict[int, str] = {}
    for g, f in zip(groups, found, strict=True):
        for p in f.processes:
            taken.setdefault(p.pid, g.name)
    out = []
    for f in found:
        pid = f.mismatched
        if pid is not None and pid in taken:
            # only the part that said the pid was left alone is untrue now; the rest stands
            signalled = (
                f"pid {pid} is not the process this record names, but is {taken[pid]}'s: signalled as {taken[pid]}'s"
            )
            parts = [part for part in f.note.split("; ") if part and not part.startswith(f"pid {pid} is no longer")]
            f = Found(f.processes, "; ".join([signalled, *parts]))
        out.append(f)
    return out


def _each_once(groups: list[list[psutil.Process]]) -> list[psutil.Process]:
    """The processes of every group, one of each pid (two records may name one process)."""
    return list({p.pid: p for ps in groups for p in ps}.values())


def port_in_use(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host if host not in ("0.0.0.0", "") else "0.0.0.0", port))
        except OSError:
            return True
    return False


def tail(path: str | Path, n: int = 30) -> str:
    """The last `n` lines of a log (of its last 64 KiB; none for n <= 0); "" for one that is missing
    or is not a regular file (a FIFO is never waited on, /dev/zero never read)."""
    if n <= 0:  # [-0:] is every line
        return ""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0))
    except (OSError, ValueError):
        return ""
    try:
        return tail_of(fd, n)
    finally:
        os.close(fd)


def tail_of(fd: int, n: int) -> str:
    """tail() of a log already open (`fd`; left open, at the end of what was read)."""
    if n <= 0:
        return ""
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return ""
        os.lseek(fd, max(0, st.st_size - 64 * 1024), os.SEEK_SET)
        data = os.read(fd, 64 * 1024).decode("utf-8", errors="replace")
    except OSError:
        return ""
    return "\n".join(data.splitlines()[-n:])


def last_line(path: str | Path) -> str:
    t = tail(path, 5).strip().splitlines()
    return t[-1] if t else ""
