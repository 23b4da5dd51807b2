"""Runs are always stoppable: state written whole, a damaged state still stopped, exact names,
distinct run directories, orphaned group members reaped, unknown start times left alone, the
recipe's launch.run_dir honoured. Real short-lived processes (sleep), never the engine."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from recipectl.runs import processes as procs
from recipectl.runs.state import JOURNAL_FILE, STATE_FILE, ProcessState, RunState, find_run, journal, new_run_dir
from recipectl.validate import load_one

from .e2e_support import LOCAL_RECIPE


def _recipe(tmp_path: Path, name: str, run_dir: str | None = None) -> Path:
    text = LOCAL_RECIPE.read_text().replace("name: local-tiny-hybrid", f"name: {name}")
    if run_dir:
        text = text.replace("  stop_grace_s: 15", f"  stop_grace_s: 2\n  run_dir: {run_dir}")
    else:
        text = text.replace("  stop_grace_s: 15", "  stop_grace_s: 2")
    path = tmp_path / f"{name}.yaml"
    path.write_text(text)
    return path


def _run(root: Path, recipe: Path, name: str, argv: list[str] | None = None, *, record_start: bool = True):
    """A run of `name` under `root` with one real process (its own session, as launch starts them)."""
    run_id, d = new_run_dir(root, name)
    log = d / "p.log"
    p = procs.start(argv or ["sleep", "60"], {"PATH": os.environ["PATH"]}, log)
    start = procs.proc_start(p.pid) if record_start else None
    ps = ProcessState(
        name="prefill-0",
        kind="prefill",
        host="127.0.0.1",
        port=None,
        url=None,
        log=str(log),
        argv=argv or ["sleep", "60"],
        env={},
        pid=p.pid,
        start_time=start.time if start else None,
        start_ticks=start.ticks if start else None,
        boot_id=start.boot if start else None,
        started_at=time.time(),
    )
    state = RunState(
        run_id=run_id, recipe_name=name, recipe_path=str(recipe), recipe_hash="0", run_dir=str(d), processes=[ps]
    )
    state.record_start(ps)
    state.save()
    return state, p


@pytest.fixture
def cli(recipectl_cli, tmp_path, monkeypatch):
    monkeypatch.delenv("RECIPECTL_RUN_DIR", raising=False)

    def run(*args, root: Path | None = None):
        env = {"RECIPECTL_RUN_DIR": str(root)} if root else {}
        r = recipectl_cli(*args, env=env, timeout=60)
        assert "Traceback" not in r.stderr and "internal error" not in r.stderr, r.stderr
        return r

    return run


def _gone(p: subprocess.Popen, timeout: float = 10) -> bool:
    try:
        p.wait(timeout=timeout)
        return True
    except subprocess.TimeoutExpired:
        return False


def _cleanup(*popens):
    for p in popens:
        try:
            os.killpg(p.pid, 9)
        except ProcessLookupError:
            pass
        p.wait(timeout=5)


def test_a_truncated_state_is_reported_and_the_run_still_stopped(cli, tmp_path):
    root = tmp_path / "runs"
    state, p = _run(root, _recipe(tmp_path, "trunc"), "trunc")
    try:
        text = (Path(state.run_dir) / STATE_FILE).read_text()
        (Path(state.run_dir) / STATE_FILE).write_text(text[: len(text) // 2])
        status = cli("status", state.run_id, root=root)
        assert status.returncode == 2 and "unreadable" in status.stderr and "recipectl stop" in status.stderr
        r = cli("stop", state.run_id, root=root)
        assert r.returncode == 2, r.stderr
        assert "damaged" in r.stderr and "stopping what the journal recorded" in r.stderr
        assert f"pid {p.pid}" in r.stderr and JOURNAL_FILE in r.stderr
        assert _gone(p)
    finally:
        _cleanup(p)


def test_stop_name_is_exact_and_never_stops_another_recipes_run(cli, tmp_path):
    root = tmp_path / "runs"
    mine, p_mine = _run(root, _recipe(tmp_path, "svc"), "svc")
    time.sleep(0.05)
    other, p_other = _run(root, _recipe(tmp_path, "svc-canary"), "svc-canary")  # newer, and starts with "svc-"
    try:
        r = cli("stop", "svc", root=root)
        assert r.returncode == 0, r.stderr
        assert _gone(p_mine)
        assert p_other.poll() is None, "stop svc stopped svc-canary's run"
        assert find_run("svc", root).run_id == mine.run_id
        assert find_run("svc-canary", root).run_id == other.run_id
    finally:
        _cleanup(p_mine, p_other)


def test_concurrent_launches_get_distinct_run_directories(tmp_path):
    """Eight launches of one recipe in the same second: eight directories, `latest` always valid."""
    import multiprocessing

    root = tmp_path / "runs"
    ctx = multiprocessing.get_context("fork")
    with ctx.Pool(8) as pool:
        made = pool.starmap(new_run_dir, [(root, "same")] * 8)
    ids = [run_id for run_id, _ in made]
    assert len(set(ids)) == 8, ids
    latest = root / "latest"
    assert latest.is_symlink() and os.readlink(latest) in ids and latest.resolve().is_dir()
    assert not [p for p in root.iterdir() if p.name.startswith(".latest-")]  # no temporary link left


def test_members_the_launcher_recorded_are_reaped_after_their_leader_died(cli, tmp_path):
    """The launcher records what each started process leads (pid and start time each); once the
    leader has died, stop finds those members by that record, and only by it."""
    from recipectl.launch.local import Supervisor

    root = tmp_path / "runs"
    state, leader = _run(root, _recipe(tmp_path, "orphans"), "orphans", ["sh", "-c", "sleep 60 & sleep 60 & wait"])
    try:
        deadline = time.monotonic() + 10
        recorded = procs.recorded_start(state.processes[0])
        while len(procs.members_of(leader.pid, recorded)) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        sup = Supervisor(None, state, [])
        sup.popen["prefill-0"] = leader
        sup.record_members(now=True)
        members = [psutil.Process(m.pid) for m in state.processes[0].members]
        assert len(members) == 2 and all(m.name() == "sleep" for m in members)
        assert len([e for e in journal(Path(state.run_dir)) if e.group == leader.pid]) == 2
        leader.kill()
        leader.wait(timeout=10)
        r = cli("stop", "orphans", root=root)
        assert r.returncode == 0, r.stderr
        assert "prefill-0 (pid" in r.stderr and ("terminated" in r.stderr or "killed" in r.stderr)
        assert not [m for m in members if m.is_running() and m.status() != psutil.STATUS_ZOMBIE]
    finally:
        try:
            os.killpg(leader.pid, 9)
        except ProcessLookupError:
            pass


def test_a_process_without_a_recorded_start_time_is_not_ours(cli, tmp_path):
    root = tmp_path / "runs"
    state, p = _run(root, _recipe(tmp_path, "nostart"), "nostart", record_start=False)
    try:
        assert not procs.is_ours(p.pid, None)
        assert procs.find_ours(procs.Group("p", p.pid, None)).processes == []
        r = cli("stop", "nostart", root=root)
        assert r.returncode == 0 and "no start time recorded" in r.stderr
        assert p.poll() is None  # left alone: the pid may be anybody's
    finally:
        _cleanup(p)


def test_a_reused_pid_is_not_ours(tmp_path):
    p = subprocess.Popen(["sleep", "60"])
    try:
        start = procs.proc_start(p.pid)
        assert start is not None and start.ticks is not None
        earlier = procs.Start(start.time - 5, start.ticks - 500, start.boot)  # another process that had this pid
        assert procs.is_ours(p.pid, start)
        assert not procs.is_ours(p.pid, earlier)
        found = procs.find_ours(procs.Group("p", p.pid, earlier))
        assert found.processes == [] and "is no longer the process recipectl started" in found.note
    finally:
        p.kill()
        p.wait()


def test_status_stop_and_logs_honour_the_recipes_run_dir(cli, tmp_path):
    custom = tmp_path / "custom-runs"
    recipe = _recipe(tmp_path, "placed", run_dir=str(custom))
    state, p = _run(custom, recipe, "placed")
    (Path(state.run_dir) / "p.log").write_text("hello from the run\n")
    try:
        status = cli("status", str(recipe), "--format", "json")  # no RECIPECTL_RUN_DIR: the recipe's run_dir
        assert state.run_id in status.stdout, status.stderr
        logs = cli("logs", "--run", str(recipe))
        assert logs.returncode == 0 and "hello from the run" in logs.stdout, logs.stderr
        by_option = cli("status", "placed", "--run-dir", str(custom), "--format", "json")
        assert state.run_id in by_option.stdout, by_option.stderr
        r = cli("stop", str(recipe))
        assert r.returncode == 0, r.stderr
        assert _gone(p)
    finally:
        _cleanup(p)


def test_state_is_written_whole(tmp_path):
    state = RunState(run_id="r", recipe_name="x", recipe_path="x.yaml", recipe_hash="0", run_dir=str(tmp_path))
    for i in range(20):
        state.first_request_s = float(i)
        state.save()
    assert RunState.load(tmp_path / STATE_FILE).first_request_s == 19.0
    assert sorted(p.name for p in tmp_path.iterdir()) == [".state.lock", STATE_FILE]


def test_a_slow_scancel_is_a_clear_error(monkeypatch, tmp_path):
    from recipectl.errors import RecipectlError
    from recipectl.launch import slurm

    def slow(*a, **kw):
        raise subprocess.TimeoutExpired(a[0], kw.get("timeout"))

    monkeypatch.setattr(slurm.shutil, "which", lambda name: f"/usr/bin/{name}")
    monkeypatch.setattr(slurm.subprocess, "run", slow)
    state = RunState(
        run_id="r",
        recipe_name="x",
        recipe_path="x.yaml",
        recipe_hash="0",
        run_dir=str(tmp_path),
        target="slurm",
        job_id="42",
    )
    with pytest.raises(RecipectlError) as e:
        slurm.cancel_job(state)
    assert "could not cancel Slurm job 42" in e.value.message and "did not answer within 30 s" in e.value.message
    assert "scancel 42" in e.value.fix


def test_launch_slurm_reports_a_slow_scancel_after_its_own_failure(monkeypatch, tmp_path, capsys):
    """A failed start whose cancel times out: the failure and the cancel problem, exit 1, no traceback."""
    from recipectl.errors import RecipectlError
    from recipectl.launch import slurm
    from recipectl.validate import load_one

    state = RunState(
        run_id="r",
        recipe_name="x",
        recipe_path="x.yaml",
        recipe_hash="0",
        run_dir=str(tmp_path),
        target="slurm",
        job_id="42",
        processes=[
            ProcessState(
                name="router",
                kind="router",
                host="h",
                port=1,
                url=None,
                log=str(tmp_path / "router.log"),
                argv=[],
                env={},
            )
        ],
    )
    monkeypatch.setattr(slurm, "submit", lambda path, recipe: state)
    monkeypatch.setattr(slurm, "wait_ready", lambda *a: (False, "job 42 ended before the deployment was ready"))

    def cancel(s, wait_s=60):
        raise RecipectlError("could not cancel Slurm job 42: scancel did not answer within 30 s", fix="scancel 42")

    monkeypatch.setattr(slurm, "cancel_job", cancel)
    from recipectl.commands.launch import launch_target

    rc = launch_target(
        "slurm", str(LOCAL_RECIPE), load_one(str(LOCAL_RECIPE)).recipe, detach=True, timeout=1, as_json=False
    )
    err = capsys.readouterr().err
    assert rc == 1 and "launch failed" in err and "could not cancel Slurm job 42" in err


@pytest.mark.parametrize(
    "damage",
    [
        lambda d: "[]",
        lambda d: json.dumps({**d, "processes": "x"}),
        lambda d: json.dumps({**d, "processes": [{"name": "p"}]}),
        lambda d: json.dumps({**d, "processes": [{**d["processes"][0], "pid": "123"}]}),
        lambda d: json.dumps({**d, "processes": [{**d["processes"][0], "start_time": "yesterday"}]}),
        lambda d: "\x00" * 10,
    ],
)
def test_a_state_of_the_wrong_shape_is_reported_and_the_run_stopped(cli, tmp_path, damage):
    root = tmp_path / "runs"
    state, p = _run(root, _recipe(tmp_path, "shape"), "shape")
    try:
        f = Path(state.run_dir) / STATE_FILE
        f.write_text(damage(json.loads(f.read_text())))
        for command in ("status", "logs"):
            r = cli(command, *(["--run", state.run_id] if command == "logs" else [state.run_id]), root=root)
            assert r.returncode == 2 and "unreadable" in r.stderr, r.stderr
        r = cli("stop", state.run_id, root=root)
        assert r.returncode == 2 and "damaged" in r.stderr
        assert _gone(p)
    finally:
        _cleanup(p)


def _squeue_answers(monkeypatch, answers):
    """squeue answers (returncode, stdout, stderr) in turn; the calls are counted."""
    from recipectl.launch import slurm

    calls = []

    def fake(*args, timeout=30):
        calls.append(args)
        rc, out, err = answers[min(len(calls), len(answers)) - 1]
        return subprocess.CompletedProcess(list(args), rc, out, err)

    monkeypatch.setattr(slurm, "_slurm", fake)
    monkeypatch.setattr(slurm, "SQUEUE_WAIT_S", 0)
    return calls


def test_a_transient_squeue_error_is_not_a_job_that_has_gone(monkeypatch):
    from recipectl.launch import slurm

    timeout = (1, "", "slurm_load_jobs error: Socket timed out on send/recv operation")
    calls = _squeue_answers(monkeypatch, [timeout, timeout, (0, "RUNNING\n", "")])
    assert slurm.job_state("42") == "RUNNING" and len(calls) == 3
    _squeue_answers(monkeypatch, [(1, "", "slurm_load_jobs error: Invalid job id specified")])
    assert slurm.job_state("42") is None
    _squeue_answers(monkeypatch, [(0, "", "")])
    assert slurm.job_state("42") is None


def test_a_squeue_that_keeps_failing_leaves_a_healthy_job_running(monkeypatch, tmp_path):
    """The launch stops with the controller's error; the job is not cancelled."""
    from recipectl.launch import slurm

    calls = _squeue_answers(monkeypatch, [(1, "", "slurm_load_jobs error: Unable to contact slurm controller")])
    state = RunState(
        run_id="r",
        recipe_name="x",
        recipe_path="x.yaml",
        recipe_hash="0",
        run_dir=str(tmp_path),
        target="slurm",
        job_id="42",
    )
    monkeypatch.setattr(slurm, "submit", lambda path, recipe: state)
    cancelled = []
    monkeypatch.setattr(slurm, "cancel_job", lambda s, wait_s=60: cancelled.append(s.job_id))

    class Display:
        from rich.console import Console

        console = Console(file=open(os.devnull, "w"))

    with pytest.raises(slurm.SqueueFailed) as e:
        slurm.launch("x.yaml", load_one(str(LOCAL_RECIPE)).recipe, detach=True, timeout_s=5, display=Display())
    assert cancelled == [] and len(calls) == slurm.SQUEUE_ATTEMPTS
    assert "Unable to contact slurm controller" in e.value.message and "left as it is" in e.value.fix


# --- process identity and untrusted state --------------------------------------------------

_UNRELATED_GROUP = """
import subprocess, sys
kids = [subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"]) for _ in range(2)]
print(" ".join(str(k.pid) for k in kids), flush=True)
"""  # the leader starts two members in its group and exits at once, leaving them running


def _unrelated_group() -> tuple[int, list[psutil.Process]]:
    """A process group recipectl never started (setsid, as any daemon does): its id, and its members
    once its leader has exited and been reaped (so the group id is a pid nobody holds)."""
    leader = subprocess.Popen(
        [sys.executable, "-c", _UNRELATED_GROUP], stdout=subprocess.PIPE, text=True, start_new_session=True
    )
    pids = [int(x) for x in leader.stdout.readline().split()]
    leader.wait(timeout=30)
    members = [psutil.Process(pid) for pid in pids]
    assert all(os.getpgid(m.pid) == leader.pid for m in members) and not psutil.pid_exists(leader.pid)
    return leader.pid, members


def _kill(members: list[psutil.Process]) -> None:
    for m in members:
        try:
            m.kill()
        except psutil.Error:
            pass
    psutil.wait_procs(members, timeout=5)


def _stale_run(root: Path, tmp_path: Path, name: str, pid: int, start: float) -> RunState:
    """A run whose record names `pid` with start time `start` (journal and state agree)."""
    run_id, d = new_run_dir(root, name)
    ps = ProcessState(
        name="prefill-0",
        kind="prefill",
        host="127.0.0.1",
        port=None,
        url=None,
        log=str(d / "p.log"),
        argv=["sleep", "60"],
        env={},
        pid=pid,
        start_time=start,
        started_at=start,
    )
    state = RunState(
        run_id=run_id,
        recipe_name=name,
        recipe_path=str(_recipe(tmp_path, name)),
        recipe_hash="0",
        run_dir=str(d),
        processes=[ps],
    )
    state.record_start(ps)
    state.save()
    return state


def test_stop_leaves_alone_a_group_that_took_a_stale_records_pid(cli, tmp_path):
    """The recorded leader exited long ago; its pid is now the id of somebody else's group, whose
    leader has exited too and whose members all started after the recorded time. Not ours."""
    root = tmp_path / "runs"
    pgid, members = _unrelated_group()
    try:
        recorded = min(m.create_time() for m in members) - 600  # started before every member
        _stale_run(root, tmp_path, "stale", pgid, recorded)
        r = cli("stop", "stale", root=root)
        assert r.returncode == 0, r.stderr
        assert all(m.is_running() and m.status() != psutil.STATUS_ZOMBIE for m in members), r.stderr
        assert f"pid {pgid}" in r.stderr and "not ones recipectl started: not signalled" in r.stderr
    finally:
        _kill(members)


def test_stop_leaves_alone_a_live_process_that_reused_a_recorded_pid(cli, tmp_path):
    root = tmp_path / "runs"
    other = subprocess.Popen(["sleep", "60"], start_new_session=True)
    try:
        _stale_run(root, tmp_path, "reused", other.pid, procs.proc_start_time(other.pid) - 3600)
        r = cli("stop", "reused", root=root)
        assert r.returncode == 0 and other.poll() is None, r.stderr
        assert re.search(
            rf"pid {other.pid} is no longer the process recipectl started \(started \d\d:\d\d:\d\d, "
            r"recorded \d\d:\d\d:\d\d\): not signalled",
            r.stderr,
        ), r.stderr
    finally:
        _cleanup(other)


def _rerecord(state: RunState, **start) -> None:
    """The run's process recorded with other start fields, in state.json and the journal alike."""
    d = Path(state.run_dir)
    data = json.loads((d / STATE_FILE).read_text())
    data["processes"][0].update(start)
    (d / STATE_FILE).write_text(json.dumps(data))
    lines = [{**e, **start} for e in map(json.loads, (d / JOURNAL_FILE).read_text().splitlines())]
    (d / JOURNAL_FILE).write_text("".join(json.dumps(e) + "\n" for e in lines))


def test_stop_stops_a_run_after_the_wall_clock_stepped(cli, tmp_path):
    """After a clock step every live process's create_time has moved (Linux derives the boot time
    from the wall clock): the recorded start in ticks since boot, of this boot, still names it."""
    root = tmp_path / "runs"
    state, p = _run(root, _recipe(tmp_path, "stepped"), "stepped")
    try:
        _rerecord(state, start_time=state.processes[0].start_time + 17)  # as after a step of 17 s
        status = json.loads(cli("status", state.run_id, "--format", "json", root=root).stdout)
        assert status["processes"][0]["alive"] is True, status
        r = cli("stop", state.run_id, root=root)
        assert r.returncode == 0 and f"prefill-0 (pid {p.pid}): terminated" in r.stderr, r.stderr
        assert _gone(p)
    finally:
        _cleanup(p)


@pytest.mark.parametrize("field", ["start_ticks", "boot_id", "neither"])
def test_stop_knows_a_process_by_its_ticks_since_boot_of_this_boot(cli, tmp_path, field):
    """The right pid and create_time, another start in ticks or another boot: another process, not
    signalled. A record without ticks and boot id (an older recipectl) is still known by its time."""
    root = tmp_path / "runs"
    state, p = _run(root, _recipe(tmp_path, "ticks"), "ticks")
    ps = state.processes[0]
    assert ps.start_ticks is not None and ps.boot_id is not None
    other = {
        "start_ticks": {"start_ticks": ps.start_ticks + 1},
        "boot_id": {"boot_id": "00000000-0000-4000-8000-000000000000"},
        "neither": {"start_ticks": None, "boot_id": None},
    }[field]
    try:
        _rerecord(state, **other)
        r = cli("stop", state.run_id, root=root)
        assert r.returncode == 0, r.stderr
        if field == "neither":
            assert f"prefill-0 (pid {p.pid}): terminated" in r.stderr and _gone(p), r.stderr
        else:
            assert "is no longer the process recipectl started" in r.stderr, r.stderr
            assert p.poll() is None, "a process with another start was signalled"
    finally:
        _cleanup(p)


def test_the_start_in_ticks_is_read_past_a_name_with_spaces_and_parentheses(tmp_path):
    odd = tmp_path / "a) b ) c"
    odd.symlink_to(shutil.which("sleep"))
    p = subprocess.Popen([str(odd), "60"])
    try:
        assert ") " in psutil.Process(p.pid).name()
        ticks = procs.start_ticks(p.pid)
        boot = psutil.boot_time()
        clock_ticks = os.sysconf("SC_CLK_TCK")
        assert ticks is not None and abs(boot + ticks / clock_ticks - psutil.Process(p.pid).create_time()) < 0.05
    finally:
        p.kill()
        p.wait()


def _recorded(name: str, p: subprocess.Popen, **start) -> ProcessState:
    """How launch records process `p` (its start, with `start` over it)."""
    s = procs.proc_start(p.pid)
    assert s is not None
    fields = {"start_time": s.time, "start_ticks": s.ticks, "boot_id": s.boot, **start}
    return ProcessState(
        name=name,
        kind="prefill",
        host="127.0.0.1",
        port=None,
        url=None,
        log="",
        argv=[],
        env={},
        pid=p.pid,
        **fields,
    )


def _record_run(root: Path, tmp_path: Path, name: str, records: list[ProcessState]) -> RunState:
    """A run whose state and journal both hold `records` (and their members)."""
    run_id, d = new_run_dir(root, name)
    state = RunState(
        run_id=run_id, recipe_name=name, recipe_path=str(_recipe(tmp_path, name)), recipe_hash="0", run_dir=str(d)
    )
    for ps in records:
        members, ps.members, ps.log = ps.members, [], str(d / f"{ps.name}.log")
        state.processes.append(ps)
        state.record_start(ps)
        state.record_members(ps, members)
    state.save()
    return state


def test_stop_signals_no_recorded_member_that_left_for_a_group_of_its_own(cli, tmp_path):
    """prefill-0's record names a member (its pid and start exact) that now leads its own process
    group, and decode-0's record names that process as its leader with another start: stop signals
    neither of them, and says so of both, as it does."""
    from recipectl.runs.state import Member

    root = tmp_path / "runs"
    leader = procs.start(["sleep", "60"], {"PATH": os.environ["PATH"]}, tmp_path / "p.log")
    elsewhere = subprocess.Popen(["sleep", "60"], start_new_session=True)
    try:
        own = procs.proc_start(elsewhere.pid)
        assert own is not None and own.ticks is not None
        prefill = _recorded("prefill-0", leader)
        prefill.members = [Member(elsewhere.pid, own.time, own.ticks, own.boot)]
        decode = _recorded("decode-0", elsewhere, start_ticks=own.ticks + 1)
        state = _record_run(root, tmp_path, "walk", [prefill, decode])
        r = cli("stop", state.run_id, root=root)
        assert r.returncode == 0, r.stderr
        assert elsewhere.poll() is None, "a process stop says it left alone was signalled: " + r.stderr
        assert f"prefill-0 (pid {leader.pid}): terminated" in r.stderr and _gone(leader), r.stderr
        assert f"pid {elsewhere.pid}, recorded in group {leader.pid}, has left it" in r.stderr, r.stderr
        assert f"decode-0: pid {elsewhere.pid} is no longer the process recipectl started" in r.stderr, r.stderr
    finally:
        _cleanup(leader, elsewhere)


@pytest.mark.parametrize("order", ["matching-first", "matching-last"])
@pytest.mark.parametrize("source", ["state", "journal"])
def test_two_records_of_one_pid_the_matching_one_stops_it(cli, tmp_path, source, order):
    """A run that records one pid twice, once with its start and once with another (out of date):
    the process is stopped, whichever record comes first, and each line says what happened."""
    root = tmp_path / "runs"
    p = procs.start(["sleep", "60"], {"PATH": os.environ["PATH"]}, tmp_path / "p.log")
    try:
        right = _recorded("prefill-0", p)
        assert right.start_ticks is not None and right.start_time is not None
        wrong = _recorded("prefill-1", p, start_ticks=right.start_ticks - 100, start_time=right.start_time - 1)
        state = _record_run(root, tmp_path, "twice", [right, wrong] if order == "matching-first" else [wrong, right])
        if source == "journal":
            (Path(state.run_dir) / STATE_FILE).write_text("garbage")
        r = cli("stop", state.run_id, root=root)
        assert r.returncode == (0 if source == "state" else 2), r.stderr
        assert _gone(p), "a process a record matches was left running: " + r.stderr
        assert f"prefill-0 (pid {p.pid}): terminated" in r.stderr, r.stderr
        assert f"prefill-1: pid {p.pid} is not the process this record names, but is prefill-0's" in r.stderr
        assert "not signalled" not in r.stderr, r.stderr
    finally:
        _cleanup(p)


def test_ctrl_c_during_stop_says_what_was_signalled_and_what_is_left(tmp_path):
    """A process that outlives SIGTERM, and Ctrl-C while stop waits out the grace period: exit 130,
    each process's line (still running), and the run not marked stopped."""
    root = tmp_path / "runs"
    recipe = _recipe(tmp_path, "slowstop")
    recipe.write_text(recipe.read_text().replace("stop_grace_s: 2", "stop_grace_s: 60"))
    got = tmp_path / "got-term"
    state, p = _run(root, recipe, "slowstop", ["sh", "-c", f"trap 'echo > {got}' TERM; while :; do sleep 0.1; done"])
    try:
        stop = subprocess.Popen(
            [sys.executable, "-m", "recipectl", "stop", state.run_id],
            env={**os.environ, "RECIPECTL_RUN_DIR": str(root)},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        deadline = time.monotonic() + 30
        while not got.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert got.exists(), "stop sent no SIGTERM"
        stop.send_signal(signal.SIGINT)
        _, err = stop.communicate(timeout=30)
        assert stop.returncode == 130, err
        assert f"prefill-0 (pid {p.pid}): still running" in err and "interrupted" in err, err
        assert p.poll() is None
        assert json.loads((Path(state.run_dir) / STATE_FILE).read_text())["stopped_at"] is None
    finally:
        _cleanup(p)


def test_stop_never_signals_init_itself_or_what_it_runs_under(cli, tmp_path):
    """A record that names, with their exact start, init, the process looking, or the shell that
    runs stop: none of them is ever signalled, and stop says why."""
    for pid in (1, os.getpid()):
        found = procs.find_ours(procs.Group("p", pid, procs.proc_start(pid), uid=psutil.Process(pid).uids().real))
        assert found.processes == [] and f"pid {pid} is init, this recipectl" in found.note, found.note
    root = tmp_path / "runs"
    got = tmp_path / "got-term"
    shell = subprocess.Popen(
        ["sh", "-c", f"trap 'echo > {got}' TERM; read _; {sys.executable} -m recipectl stop ancestor; read _"],
        env={**os.environ, "RECIPECTL_RUN_DIR": str(root)},
        stdin=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        start = procs.proc_start(shell.pid)
        assert start is not None
        _record_run(root, tmp_path, "ancestor", [_recorded("prefill-0", shell)])
        _, err = shell.communicate("go\nend\n", timeout=60)
        assert not got.exists() and shell.returncode == 0, "stop signalled the shell it runs under: " + err
        assert f"pid {shell.pid} is init, this recipectl or one of the processes it runs under" in err, err
    finally:
        _cleanup(shell)


def _slurm_stand_ins(tmp_path: Path) -> tuple[dict[str, str], Path]:
    """Stand-ins for scancel and squeue, first on PATH: each appends its argv (one line, NUL
    separated) to a file; squeue says RUNNING once, then that the job has gone."""
    bin_dir, calls = tmp_path / "bin", tmp_path / "slurm-calls"
    bin_dir.mkdir()
    for name in ("scancel", "squeue"):
        script = bin_dir / name
        answer = 'if [ ! -e "$0.asked" ]; then : > "$0.asked"; echo RUNNING; fi' if name == "squeue" else ""
        script.write_text(f'#!/bin/sh\nprintf "%s\\0" {name} "$@" >> {calls}; echo >> {calls}\n{answer}\n')
        script.chmod(0o755)
    return {"PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}, calls


def _called(calls: Path) -> list[list[str]]:
    return [line.rstrip("\0").split("\0") for line in calls.read_text().splitlines()] if calls.exists() else []


@pytest.mark.parametrize("job_id", ["--me", 12345, "123;rm -rf ~", "123 --me", "-1", "123_", "1" * 40])
def test_a_job_id_that_is_not_one_never_reaches_slurm(recipectl_cli, tmp_path, job_id):
    root = tmp_path / "runs"
    env, calls = _slurm_stand_ins(tmp_path)
    run_id, d = new_run_dir(root, "job")
    state = RunState(
        run_id=run_id,
        recipe_name="job",
        recipe_path="job.yaml",
        recipe_hash="0",
        run_dir=str(d),
        target="slurm",
        job_id="1",
    )
    state.save()
    f = d / STATE_FILE
    f.write_text(json.dumps({**json.loads(f.read_text()), "job_id": job_id}))
    env["RECIPECTL_RUN_DIR"] = str(root)
    for command in ("stop", "status"):
        r = recipectl_cli(command, run_id, env=env, timeout=60)
        assert r.returncode == 2 and "job_id" in r.stderr and "Traceback" not in r.stderr, r.stderr
    r = recipectl_cli("stop", run_id, env=env, timeout=60)
    # a Slurm run keeps no journal here: nothing to stop from, and it says no job was cancelled
    assert "no journal" in r.stderr and "no Slurm job was cancelled" in r.stderr, r.stderr
    assert _called(calls) == []


def test_scancel_gets_a_valid_job_id_after_the_end_of_its_options(recipectl_cli, tmp_path):
    root = tmp_path / "runs"
    env, calls = _slurm_stand_ins(tmp_path)
    run_id, d = new_run_dir(root, "job")
    RunState(
        run_id=run_id,
        recipe_name="job",
        recipe_path="job.yaml",
        recipe_hash="0",
        run_dir=str(d),
        target="slurm",
        job_id="123_4",
    ).save()
    r = recipectl_cli("stop", run_id, env={**env, "RECIPECTL_RUN_DIR": str(root)}, timeout=60)
    assert r.returncode == 0 and "cancelled Slurm job 123_4" in r.stderr, r.stderr
    assert ["scancel", "--", "123_4"] in _called(calls)


def _fifo(f: Path) -> None:
    f.unlink()
    os.mkfifo(f)


def _dev_zero(f: Path) -> None:
    f.unlink()
    f.symlink_to("/dev/zero")


def _deep(f: Path) -> None:
    f.write_text("[" * 100_000)


def _edit(**fields):
    def damage(f: Path) -> None:
        f.write_text(json.dumps({**json.loads(f.read_text()), **fields}))

    return damage


@pytest.mark.parametrize(
    "damage, why",
    [
        (_fifo, "not a regular file"),
        (_dev_zero, "not a regular file"),
        (_deep, "recursion limit"),
        (_edit(processes=[]), "it does not list prefill-0"),
        (_edit(target="slurm", job_id="123"), "target is slurm"),
        (_edit(processes="x"), "processes"),
    ],
    ids=["fifo", "dev-zero", "deep-json", "no-processes", "target-slurm", "processes-not-a-list"],
)
def test_stop_falls_back_to_the_journal_on_state_it_cannot_trust(recipectl_cli, tmp_path, damage, why):
    """Exactly our live process is stopped (found by the journal's pid and start time), within a
    bounded time; an unrecorded bystander and Slurm are not touched."""
    root = tmp_path / "runs"
    env, calls = _slurm_stand_ins(tmp_path)
    state, ours = _run(root, _recipe(tmp_path, "damaged"), "damaged")
    bystander = subprocess.Popen(["sleep", "60"], start_new_session=True)
    try:
        damage(Path(state.run_dir) / STATE_FILE)
        started = time.monotonic()
        r = recipectl_cli("stop", state.run_id, env={**env, "RECIPECTL_RUN_DIR": str(root)}, timeout=60)
        assert time.monotonic() - started < 60 and "Traceback" not in r.stderr
        assert r.returncode == 2, r.stderr
        assert "state.json is damaged (" in r.stderr and why in r.stderr, r.stderr
        assert "stopping what the journal recorded" in r.stderr
        assert f"prefill-0 (pid {ours.pid}): terminated" in r.stderr
        assert _gone(ours) and bystander.poll() is None
        assert _called(calls) == []
    finally:
        _cleanup(ours, bystander)


@pytest.mark.parametrize(
    "field, value",
    [
        ("run_id", ["x"]),
        ("target", 5),
        ("job_id", 7),
        ("router_url", {"a": 1}),
        ("created_at", "soon"),
        ("processes.0.log", 5),
        ("processes.0.port", "8100"),
        ("processes.0.pid", -4),
        ("processes.0.env", ["A=b"]),
        ("processes.0.members", [{"pid": 3}]),
    ],
)
def test_status_logs_and_top_name_a_wrong_typed_field(cli, tmp_path, field, value):
    root = tmp_path / "runs"
    state, p = _run(root, _recipe(tmp_path, "typed"), "typed")
    try:
        f = Path(state.run_dir) / STATE_FILE
        data = json.loads(f.read_text())
        if field.startswith("processes.0."):
            data["processes"][0][field.split(".")[-1]] = value
        else:
            data[field] = value
        f.write_text(json.dumps(data))
        for args in (
            ["status", state.run_id],
            ["logs", "--run", state.run_id],
            ["top", "--run", state.run_id, "--once"],
        ):
            r = cli(*args, root=root)
            assert r.returncode == 2 and field in r.stderr and "unreadable" in r.stderr, (args, r.stderr)
    finally:
        _cleanup(p)


def test_the_supervisor_keeps_an_exited_leader_unreaped_until_it_has_stopped_its_group(tmp_path):
    """A leader that has exited keeps its pid (a zombie) while the supervisor stops its group: the
    group id cannot pass to another process in between."""
    from recipectl.launch import local

    root = tmp_path / "runs"
    state, leader = _run(root, _recipe(tmp_path, "held"), "held", ["sh", "-c", "exit 3"])
    sup = local.Supervisor(type("R", (), {"launch": type("L", (), {"stop_grace_s": 1})()})(), state, [])
    sup.popen["prefill-0"] = leader
    deadline = time.monotonic() + 10
    while sup.dead() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert state.processes[0].exited == 3
    assert psutil.Process(leader.pid).status() == psutil.STATUS_ZOMBIE  # exited, and its pid still held
    sup.stop()
    assert leader.returncode == 3 and not psutil.pid_exists(leader.pid)


def test_status_shows_a_name_like_markup_as_text(cli, tmp_path):
    root = tmp_path / "runs"
    state, p = _run(root, _recipe(tmp_path, "markup"), "markup")
    try:
        f = Path(state.run_dir) / STATE_FILE
        data = json.loads(f.read_text())
        data["processes"][0]["name"] = "[/x]"
        f.write_text(json.dumps(data))
        r = cli("status", state.run_id, root=root)
        assert r.returncode == 0 and "[/x]" in r.stdout, r.stdout + r.stderr
    finally:
        _cleanup(p)


@pytest.mark.parametrize("job_id", ["--me", 12345, "123;rm", None])
def test_slurm_commands_refuse_what_is_not_a_job_id(tmp_path, monkeypatch, job_id):
    """However a RunState was made, scancel, squeue and scontrol get a job id or nothing."""
    from recipectl.errors import RecipectlError
    from recipectl.launch import slurm

    env, calls = _slurm_stand_ins(tmp_path)
    monkeypatch.setenv("PATH", env["PATH"])
    state = RunState(
        run_id="r",
        recipe_name="x",
        recipe_path="x.yaml",
        recipe_hash="0",
        run_dir=str(tmp_path),
        target="slurm",
        job_id=job_id,
    )
    with pytest.raises(RecipectlError) as e:
        slurm.cancel_job(state, wait_s=0)
    assert "is not a Slurm job id" in e.value.message
    with pytest.raises(RecipectlError):
        slurm.job_state(job_id)
    assert slurm.job_info(job_id) == {}
    assert _called(calls) == []


@pytest.mark.parametrize("special", ["fifo", "/dev/zero"])
def test_logs_refuses_a_log_that_is_not_a_file_without_waiting_on_it(cli, tmp_path, special):
    root = tmp_path / "runs"
    state, p = _run(root, _recipe(tmp_path, "speciallog"), "speciallog")
    try:
        log = Path(state.run_dir) / "log-fifo"  # in the run directory: a log anywhere else is refused as such
        if special == "fifo":
            os.mkfifo(log)
        f = Path(state.run_dir) / STATE_FILE
        data = json.loads(f.read_text())
        data["processes"][0]["log"] = str(log) if special == "fifo" else special
        f.write_text(json.dumps(data))
        r = cli("logs", "--run", state.run_id, root=root)  # cli: 60 s at most, no traceback
        why = "not a regular file" if special == "fifo" else "outside the run directory"
        assert r.returncode == 2 and "processes.0.log" in r.stderr and why in r.stderr, r.stderr
        assert procs.tail(data["processes"][0]["log"]) == ""
    finally:
        _cleanup(p)


def test_a_damaged_state_with_no_journal_says_nothing_was_stopped(cli, tmp_path):
    """A Slurm run keeps no journal on the submitting host: with its state damaged, stop can trust
    no job id and has nothing recorded to stop, and says so, instead of naming a journal that is
    not there as if it had looked at what it recorded."""
    root = tmp_path / "runs"
    d = root / "slurm-run-20261205-000000"
    d.mkdir(parents=True)
    (d / STATE_FILE).write_text('{"run_id": "slurm-run", "target": "slurm", "job_id": ')
    r = cli("stop", d.name, root=root)
    assert r.returncode == 2, r.stderr
    assert "no journal" in r.stderr and "nothing was stopped" in r.stderr and "no Slurm job was cancelled" in r.stderr
    assert "squeue" in r.stderr, r.stderr
