"""A run's state.json and journal are data that anybody who can write the run directory can edit:
what they say may choose no file outside the run directory to print or write, and no process that
their author could not signal alone. Real short-lived processes (sleep), never the engine."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import psutil
import pytest

from recipectl.errors import RecipectlError
from recipectl.runs import processes as procs
from recipectl.runs.state import (
    JOURNAL_FILE,
    LOCK_FILE,
    STATE_FILE,
    ProcessState,
    RunState,
    find_run_dir,
    new_run_dir,
)

NOBODY = 65534
as_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs a process of another user (root only)")


def _run(root: Path, name: str) -> tuple[Path, subprocess.Popen]:
    """A run of one real process (its own session, as launch starts it), state and journal written."""
    run_id, d = new_run_dir(root, name)
    log = d / "prefill-0.log"
    log.write_text("engine started\n")
    p = procs.start(["sleep", "60"], {"PATH": os.environ["PATH"]}, log)
    ps = ProcessState(
        name="prefill-0",
        kind="prefill",
        host="127.0.0.1",
        port=None,
        url=None,
        log=str(log),
        argv=["sleep", "60"],
        env={},
        pid=p.pid,
        start_time=procs.proc_start_time(p.pid),
        started_at=time.time(),
    )
    state = RunState(
        run_id=run_id,
        recipe_name=name,
        recipe_path=str(d / "none.yaml"),
        recipe_hash="0",
        run_dir=str(d),
        processes=[ps],
    )
    state.record_start(ps)
    state.save()
    return d, p


def _edit(d: Path, edit) -> None:
    data = json.loads((d / STATE_FILE).read_text())
    edit(data)
    (d / STATE_FILE).write_text(json.dumps(data))


def _stranger(user: int | None = None) -> subprocess.Popen:
    """A process this test started that no run recorded, in a session of its own."""
    return subprocess.Popen(["sleep", "60"], start_new_session=True, user=user)


def _reap(*ps: subprocess.Popen) -> None:
    for p in ps:
        try:
            os.killpg(p.pid, 9)
        except ProcessLookupError:
            pass
        p.wait(timeout=5)


@pytest.fixture
def cli(recipectl_cli, tmp_path):
    def run(*args):
        r = recipectl_cli(*args, env={"RECIPECTL_RUN_DIR": str(tmp_path / "runs")}, timeout=60)
        assert "Traceback" not in r.stderr and "internal error" not in r.stderr, r.stderr
        return r

    return run


@pytest.mark.parametrize("where", ["absolute", "dotdot", "symlink"])
def test_logs_prints_no_file_outside_the_run_directory(cli, tmp_path, where):
    secret = tmp_path / "secret.txt"
    secret.write_text("password=hunter2\n")
    d, p = _run(tmp_path / "runs", "hostile-logs")
    try:
        if where == "absolute":
            _edit(d, lambda s: s["processes"][0].update(log=str(secret)))
        elif where == "dotdot":
            _edit(d, lambda s: s["processes"][0].update(log=str(d / ".." / ".." / "secret.txt")))
        else:
            (d / "prefill-0.log").unlink()
            (d / "prefill-0.log").symlink_to(secret)
        for args in (["logs", "--run", str(d)], ["status", str(d)], ["status", str(d), "--format", "json"]):
            r = cli(*args)
            assert "hunter2" not in r.stdout + r.stderr, args
        r = cli("logs", "--run", str(d))
        assert r.returncode == 2, r.stderr
        assert "processes.0.log" in r.stderr and "outside the run directory" in r.stderr, r.stderr
    finally:
        _reap(p)


@pytest.mark.parametrize("swap", ["log", "directory"])
def test_logs_reads_no_file_a_symlink_swapped_in_after_the_check_points_at(monkeypatch, capsys, tmp_path, swap):
    """The state is checked (each log inside the run directory), then a log, or a directory on its
    path, becomes a symlink to a file of the user's: logs opens what is in the run directory, never
    through the link, and names the log (exit 2)."""
    from recipectl.commands import launch as commands
    from recipectl.errors import RecipectlError

    secret_dir = tmp_path / "secrets"
    secret_dir.mkdir()
    (secret_dir / "prefill-0.log").write_text("password=hunter2\n")
    d, p = _run(tmp_path / "runs", "hostile-race")
    _reap(p)
    (d / "logs").mkdir()
    (d / "logs" / "prefill-0.log").write_text("engine started\n")
    _edit(d, lambda s: s["processes"][0].update(log=str(d / "logs" / "prefill-0.log")))
    checked = commands.find_run

    def swapped_after_the_check(*args, **kwargs):
        state = checked(*args, **kwargs)
        if swap == "log":
            (d / "logs" / "prefill-0.log").unlink()
            (d / "logs" / "prefill-0.log").symlink_to(secret_dir / "prefill-0.log")
        else:
            (d / "logs").rename(d / "logs-old")
            (d / "logs").symlink_to(secret_dir)
        return state

    monkeypatch.setattr(commands, "find_run", swapped_after_the_check)
    with pytest.raises(RecipectlError) as e:
        commands.show_logs(str(d), None, follow=False, lines=40)
    assert "hunter2" not in capsys.readouterr().out
    assert "processes.0.log" in e.value.message and "a symlink, not followed" in e.value.message, e.value.message


def test_logs_still_reads_a_run_directory_that_was_moved(cli, tmp_path):
    d, p = _run(tmp_path / "runs", "moved")
    _reap(p)
    moved = tmp_path / "runs" / (d.name + "-moved")
    d.rename(moved)
    r = cli("logs", "--run", str(moved))
    assert r.returncode == 0 and "engine started" in r.stdout, r.stderr


def test_stop_writes_nothing_where_the_states_run_dir_points(cli, tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    d, p = _run(tmp_path / "runs", "hostile-run-dir")
    try:
        _edit(d, lambda s: s.update(run_dir=str(elsewhere)))
        r = cli("stop", str(d))
        assert r.returncode == 0, r.stderr
        assert list(elsewhere.iterdir()) == []
        assert json.loads((d / STATE_FILE).read_text())["stopped_at"]
    finally:
        _reap(p)


@pytest.mark.parametrize("url", ["http://[::1", "http://127.0.0.1:1\x00", "http://127.0.0.1:99999"])
def test_status_of_a_url_that_is_not_one_is_not_an_internal_error(cli, tmp_path, url):
    d, p = _run(tmp_path / "runs", "hostile-url")
    try:
        _edit(d, lambda s: s["processes"][0].update(url=url))
        for fmt in ("text", "json"):
            r = cli("status", str(d), "--format", fmt)
            assert r.returncode == 1, r.stderr  # up, not healthy
    finally:
        _reap(p)


def _forge_member(d: Path, pid: int) -> None:
    """state.json and the journal both say the run's process leads `pid` (its real start time)."""
    start = procs.proc_start_time(pid)
    _edit(d, lambda s: s["processes"][0]["members"].append({"pid": pid, "start_time": start}))
    leader = json.loads((d / STATE_FILE).read_text())["processes"][0]["pid"]
    with open(d / JOURNAL_FILE, "a") as f:
        f.write(json.dumps({"name": "prefill-0", "pid": pid, "start_time": start, "group": leader}) + "\n")


@as_root
def test_stop_never_signals_another_users_process_that_the_state_names(cli, tmp_path):
    d, p = _run(tmp_path / "runs", "hostile-member")
    other = _stranger(user=NOBODY)
    try:
        _forge_member(d, other.pid)
        r = cli("stop", str(d))
        assert r.returncode == 0, r.stderr
        assert other.poll() is None, "a process of another user was signalled"
        assert p.wait(timeout=10) is not None  # the run's own process was stopped
    finally:
        _reap(p, other)


@as_root
def test_a_state_written_by_another_user_signals_none_of_our_processes(cli, tmp_path):
    d, p = _run(tmp_path / "runs", "hostile-owner")
    ours = _stranger()
    try:
        _forge_member(d, ours.pid)
        for f in (STATE_FILE, JOURNAL_FILE):
            os.chown(d / f, NOBODY, NOBODY)
        r = cli("stop", str(d))
        assert ours.poll() is None, "a state file of another user chose one of our processes"
        assert p.poll() is None, "a state file of another user chose one of our processes"
        assert "not signalled" in r.stderr, r.stderr
    finally:
        _reap(p, ours)


@as_root
@pytest.mark.parametrize("record", [STATE_FILE, JOURNAL_FILE])
def test_a_record_that_is_a_symlink_to_our_run_stops_none_of_its_processes(cli, tmp_path, record):
    """Another user's run directory whose state (or journal, the state damaged) is a symlink to
    one of our runs' records: the link is theirs, what it names is not."""
    ours, p = _run(tmp_path / "runs", "ours")
    theirs = tmp_path / "runs" / "theirs-20260101-000000"
    theirs.mkdir()
    if record == JOURNAL_FILE:
        (theirs / STATE_FILE).write_text("garbage")
    (theirs / record).symlink_to(ours / record)
    os.lchown(theirs / record, NOBODY, NOBODY)
    os.chown(theirs, NOBODY, NOBODY)
    try:
        cli("stop", str(theirs))
        assert p.poll() is None, "a symlinked record in another user's run stopped our process"
    finally:
        _reap(p)


@as_root
def test_a_state_a_stop_by_root_rewrote_in_another_users_run_is_still_not_roots(cli, tmp_path):
    """A run directory of another user whose state.json a stop by root rewrote (root's file now,
    its content still theirs), naming a root process: a second stop does not read that state as
    root's and signal what it names."""
    d, theirs = _run(tmp_path / "runs", "theirs")
    ours = _stranger()
    try:
        _forge_member(d, ours.pid)
        os.chown(d, NOBODY, NOBODY)  # the state stays root's, as state.save() as root leaves it
        os.chown(d / JOURNAL_FILE, NOBODY, NOBODY)
        r = cli("stop", str(d))
        assert ours.poll() is None, "a root-owned state in another user's run signalled a root process"
        assert theirs.poll() is None and "not signalled" in r.stderr, r.stderr
    finally:
        _reap(theirs, ours)


@pytest.mark.parametrize("lock", ["symlink", "fifo"])
def test_stop_never_follows_or_waits_on_a_lock_that_is_not_a_file(cli, tmp_path, lock):
    """A .state.lock that is a symlink (a stop by root would create its target) or a FIFO (stop
    would wait for a writer): the run is still stopped, and the lock refused by name, exit 2."""
    target = tmp_path / "made-by-stop"
    d, p = _run(tmp_path / "runs", "hostile-lock")
    try:
        (d / LOCK_FILE).unlink()
        if lock == "symlink":
            (d / LOCK_FILE).symlink_to(target)
        else:
            os.mkfifo(d / LOCK_FILE)
        r = cli("stop", str(d))
        assert r.returncode == 2 and f"prefill-0 (pid {p.pid}): terminated" in r.stderr, r.stderr
        why = "is a symlink" if lock == "symlink" else "is not a regular file"
        assert f"{LOCK_FILE} {why}" in r.stderr, r.stderr
        assert not target.exists()
    finally:
        _reap(p)


def test_status_and_stop_show_control_characters_of_a_record_escaped(cli, tmp_path):
    """A process name and run id holding terminal escapes (retitle the window, clear the screen)
    reach the terminal as text: \\x1b, never the escape itself."""
    d, p = _run(tmp_path / "runs", "hostile-escapes")
    try:
        _edit(d, lambda s: s.update(run_id="run\x1b[2J") or s["processes"][0].update(name="evil\x1b]0;pwned\x07"))
        status = cli("status", str(d))
        assert status.returncode == 0, status.stderr
        stop = cli("stop", str(d))
        assert stop.returncode == 0 and p.wait(timeout=10) is not None, stop.stderr
        for out in (status.stdout, stop.stderr):
            assert "\x1b" not in out and "\x07" not in out, out
        assert "evil\\x1b]0;pwned\\x07" in status.stdout and "run\\x1b[2J" in status.stdout, status.stdout
        assert f"evil\\x1b]0;pwned\\x07 (pid {p.pid}): terminated" in stop.stderr, stop.stderr
    finally:
        _reap(p)


def test_latest_pointing_outside_the_runs_root_is_no_run(cli, tmp_path):
    outside = tmp_path / "outside"
    d, p = _run(outside, "decoy")
    _reap(p)
    root = tmp_path / "runs"
    root.mkdir()
    (root / "latest").symlink_to(d)
    r = cli("logs")
    assert r.returncode == 2 and "engine started" not in r.stdout, r.stdout + r.stderr


@pytest.mark.parametrize("node", ["--help", "-M", "n1,--all", "n1 n2", "n[1-1000000]", ""])
def test_a_node_that_is_not_a_node_name_never_reaches_scontrol(recipectl_cli, tmp_path, node):
    bin_dir, calls = tmp_path / "bin", tmp_path / "calls"
    bin_dir.mkdir()
    for name in ("squeue", "scontrol"):
        (bin_dir / name).write_text(
            f'#!/bin/sh\nprintf "%s\\0" {name} "$@" >> {calls}; echo >> {calls}\n'
            + ("echo RUNNING\n" if name == "squeue" else "")
        )
        (bin_dir / name).chmod(0o755)
    root = tmp_path / "runs"
    run_id, d = new_run_dir(root, "job")
    ps = ProcessState(
        name="prefill-0",
        kind="prefill",
        host="n1",
        port=None,
        url=None,
        log=str(d / "p.log"),
        argv=[],
        env={},
        node="n1",
    )
    RunState(
        run_id=run_id,
        recipe_name="job",
        recipe_path="job.yaml",
        recipe_hash="0",
        run_dir=str(d),
        target="slurm",
        job_id="1",
        processes=[ps],
    ).save()
    _edit(d, lambda s: s["processes"][0].update(node=node))
    r = recipectl_cli(
        "status",
        run_id,
        env={"PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "RECIPECTL_RUN_DIR": str(root)},
        timeout=60,
    )
    assert r.returncode == 2 and "processes.0.node" in r.stderr and "Traceback" not in r.stderr, r.stderr
    assert not calls.exists() or node not in calls.read_text().split("\0")


def test_logs_lines_zero_prints_none_and_a_negative_count_is_an_error(cli, tmp_path):
    d, p = _run(tmp_path / "runs", "lines")
    _reap(p)
    (d / "prefill-0.log").write_text("".join(f"line {i}\n" for i in range(10)))
    r = cli("logs", "--run", str(d), "-n", "0")
    assert r.returncode == 0 and r.stdout == "", r.stdout
    r = cli("logs", "--run", str(d), "-n", "2")
    assert r.stdout.splitlines() == ["line 8", "line 9"]
    r = cli("logs", "--run", str(d), "-n", "-3")
    assert r.returncode == 2 and "--lines" in r.stderr and "line 3" not in r.stdout, r.stdout + r.stderr


def test_logs_reads_a_moved_run_that_was_recorded_under_a_relative_run_dir(cli, tmp_path):
    d, p = _run(tmp_path / "runs", "moved-relative")
    _reap(p)
    _edit(d, lambda s: s.update(run_dir=os.path.join(".recipectl", "runs", d.name)))
    moved = tmp_path / "runs" / (d.name + "-moved")
    d.rename(moved)
    r = cli("logs", "--run", str(moved))
    assert r.returncode == 0 and "engine started" in r.stdout, r.stderr


@pytest.mark.parametrize("ref", ["..", "."])
def test_a_run_id_of_dots_names_no_directory_above_or_at_the_runs_root(cli, tmp_path, ref):
    """`recipectl status ..` with a state file in the directory that holds the runs root (".") or
    in the runs root itself ("."): neither is a run launch made there."""
    d, p = _run(tmp_path / "elsewhere", "decoy")
    try:
        root = tmp_path / "runs"
        root.mkdir()
        holder = tmp_path if ref == ".." else root
        (holder / STATE_FILE).write_text((d / STATE_FILE).read_text())
        for args in (["status", ref], ["stop", ref]):
            r = cli(*args)
            assert r.returncode == 2 and "no run found" in r.stderr, (args, r.stdout, r.stderr)
        assert p.poll() is None, "a run id of dots stopped a process of a run elsewhere"
    finally:
        _reap(p)


def test_a_run_id_that_is_a_symlink_is_not_followed(cli, tmp_path):
    d, p = _run(tmp_path / "elsewhere", "decoy")
    try:
        root = tmp_path / "runs"
        root.mkdir()
        (root / "decoy-alias").symlink_to(d)
        r = cli("stop", "decoy-alias")
        assert r.returncode == 2 and "is a symlink" in r.stderr and "not followed" in r.stderr, r.stderr
        assert p.poll() is None, "stop followed a symlinked run id to another run"
    finally:
        _reap(p)


def test_the_journal_is_never_written_through_a_symlink(tmp_path):
    """A run directory's journal that is a symlink (to a file of the user's): launch's record of a
    started process is refused there, and the file it points at is left as it was."""
    d, p = _run(tmp_path / "runs", "journal-link")
    try:
        target = tmp_path / "precious.txt"
        target.write_text("keep\n")
        (d / JOURNAL_FILE).unlink()
        (d / JOURNAL_FILE).symlink_to(target)
        state = RunState.load(d / STATE_FILE)
        with pytest.raises(RecipectlError) as e:
            state.record_start(state.processes[0])
        assert str(d / JOURNAL_FILE) in e.value.message and "symlink" in e.value.fix
        assert target.read_text() == "keep\n"
    finally:
        _reap(p)


def test_a_symlinked_run_id_is_not_followed_from_inside_the_runs_root(tmp_path, monkeypatch):
    """From inside the runs root a bare run id is also a path relative to the working directory:
    a symlink there is refused the same way."""
    d, p = _run(tmp_path / "elsewhere", "decoy")
    _reap(p)
    root = tmp_path / "runs"
    root.mkdir()
    (root / "decoy-alias").symlink_to(d)
    monkeypatch.chdir(root)
    with pytest.raises(RecipectlError) as e:
        find_run_dir("decoy-alias", root)
    assert "is a symlink" in e.value.message and "not followed" in e.value.message


def test_a_duplicate_records_note_keeps_what_else_it_left_alone():
    """Two records of one pid, the first out of date: its line says the pid was stopped as the
    other's, and still names the member it left alone (that part had been dropped)."""
    me = subprocess.Popen(["sleep", "60"])
    try:
        live = psutil.Process(me.pid)
        left = "pid 4242, recorded in group 77, has left it for a process group of its own: not signalled"
        stale = procs.Found(
            [], f"pid {me.pid} is no longer the process recipectl started (...): not signalled; {left}", me.pid
        )
        ours = procs.Found([live], "")
        groups = [procs.Group("prefill-0", me.pid, None), procs.Group("decode-0", me.pid, None)]
        first, second = procs._truthful([stale, ours], groups)
        assert first.note.startswith(f"pid {me.pid} is not the process this record names, but is decode-0's")
        assert left in first.note and "no longer" not in first.note
        assert second.note == ""
    finally:
        me.kill()
        me.wait()


def test_logs_shows_each_record_of_one_name_and_escapes_the_names_it_prints(cli, tmp_path):
    """An edited state may record two processes of one name, and names holding control characters:
    each record's log is printed under it (keyed by name, the first had been lost and its file left
    open), and the prefix is the name escaped, never an escape sequence sent to the terminal."""
    d, p = _run(tmp_path / "runs", "two-names")
    _reap(p)
    (d / "prefill-0.log").write_text("first log\n")
    (d / "other.log").write_text("second log\n")

    def edit(s):
        s["processes"].append({**s["processes"][0], "log": str(d / "other.log")})
        s["processes"][1]["name"] = "prefill-0"
        s["processes"][0]["name"] = "prefill-\x1b[2J0"

    _edit(d, edit)
    r = cli("logs", "--run", str(d))
    assert r.returncode == 0, r.stderr
    assert "first log" in r.stdout and "second log" in r.stdout
    assert "\x1b" not in r.stdout and "prefill-\\x1b[2J0 | first log" in r.stdout, r.stdout
    _edit(d, lambda s: s["processes"][1].update(name="prefill-0"))
    _edit(d, lambda s: s["processes"][0].update(name="prefill-0"))
    r = cli("logs", "--run", str(d))
    assert r.stdout.splitlines() == ["prefill-0 | first log", "prefill-0 | second log"], r.stdout
    r = cli("logs", "nobody\x1b[31m", "--run", str(d))
    assert r.returncode == 2 and "\x1b" not in r.stderr, r.stderr
