"""Runs are always stoppable: state written whole, a damaged state still stopped, exact names,
distinct run directories, orphaned group members reaped, unknown start times left alone, the
recipe's launch.run_dir honoured. Real short-lived processes (sleep), never the engine."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest

from recipectl.runs import processes as procs
from recipectl.runs.state import JOURNAL_FILE, STATE_FILE, ProcessState, RunState, find_run, new_run_dir
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
    start = procs.proc_start_time(p.pid) if record_start else None
    ps = ProcessState(name="prefill-0", kind="prefill", host="127.0.0.1", port=None, url=None, log=str(log),
                      argv=argv or ["sleep", "60"], env={}, pid=p.pid, start_time=start, started_at=time.time())
    state = RunState(run_id=run_id, recipe_name=name, recipe_path=str(recipe), recipe_hash="0", run_dir=str(d),
                     processes=[ps])
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
        assert "unreadable" in r.stderr and f"pid {p.pid}" in r.stderr and JOURNAL_FILE in r.stderr
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


def test_members_of_a_group_whose_leader_died_are_reaped(cli, tmp_path):
    root = tmp_path / "runs"
    # the leader starts two sleeps in its group and exits at once
    state, leader = _run(root, _recipe(tmp_path, "orphans"), "orphans",
                         ["sh", "-c", "sleep 60 & sleep 60 & echo started; exit 0"])
    try:
        leader.wait(timeout=10)
        deadline = time.monotonic() + 10
        while len(procs.group_members(leader.pid)) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        members = procs.group_members(leader.pid)
        assert len(members) == 2 and not procs.is_ours(leader.pid, state.processes[0].start_time)
        r = cli("stop", "orphans", root=root)
        assert r.returncode == 0, r.stderr
        assert "terminated" in r.stderr or "killed" in r.stderr
        assert procs.group_members(leader.pid) == []
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
        assert procs.our_group(p.pid, None) == []
        r = cli("stop", "nostart", root=root)
        assert r.returncode == 0 and "no start time recorded" in r.stderr
        assert p.poll() is None  # left alone: the pid may be anybody's
    finally:
        _cleanup(p)


def test_a_reused_pid_is_not_ours(tmp_path):
    p = subprocess.Popen(["sleep", "60"])
    try:
        start = procs.proc_start_time(p.pid)
        assert procs.is_ours(p.pid, start)
        assert not procs.is_ours(p.pid, start - 5)  # another process that had this pid earlier
        assert procs.our_group(p.pid, start - 5) == []
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
    state = RunState(run_id="r", recipe_name="x", recipe_path="x.yaml", recipe_hash="0", run_dir=str(tmp_path),
                     target="slurm", job_id="42")
    with pytest.raises(RecipectlError) as e:
        slurm.cancel_job(state)
    assert "could not cancel Slurm job 42" in e.value.message and "did not answer within 30 s" in e.value.message
    assert "scancel 42" in e.value.fix


def test_launch_slurm_reports_a_slow_scancel_after_its_own_failure(monkeypatch, tmp_path, capsys):
    """A failed start whose cancel times out: the failure and the cancel problem, exit 1, no traceback."""
    from recipectl.errors import RecipectlError
    from recipectl.launch import slurm
    from recipectl.validate import load_one

    state = RunState(run_id="r", recipe_name="x", recipe_path="x.yaml", recipe_hash="0", run_dir=str(tmp_path),
                     target="slurm", job_id="42",
                     processes=[ProcessState(name="router", kind="router", host="h", port=1, url=None,
                                             log=str(tmp_path / "router.log"), argv=[], env={})])
    monkeypatch.setattr(slurm, "submit", lambda path, recipe: state)
    monkeypatch.setattr(slurm, "wait_ready", lambda *a: (False, "job 42 ended before the deployment was ready"))

    def cancel(s, wait_s=60):
        raise RecipectlError("could not cancel Slurm job 42: scancel did not answer within 30 s", fix="scancel 42")

    monkeypatch.setattr(slurm, "cancel_job", cancel)
    from recipectl.commands.launch import launch_target

    rc = launch_target("slurm", str(LOCAL_RECIPE), load_one(str(LOCAL_RECIPE)).recipe, detach=True, timeout=1,
                       as_json=False)
    err = capsys.readouterr().err
    assert rc == 1 and "launch failed" in err and "could not cancel Slurm job 42" in err


@pytest.mark.parametrize("damage", [
    lambda d: "[]",
    lambda d: json.dumps({**d, "processes": "x"}),
    lambda d: json.dumps({**d, "processes": [{"name": "p"}]}),
    lambda d: json.dumps({**d, "processes": [{**d["processes"][0], "pid": "123"}]}),
    lambda d: json.dumps({**d, "processes": [{**d["processes"][0], "start_time": "yesterday"}]}),
    lambda d: "\x00" * 10,
])
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
        assert r.returncode == 2 and "unreadable" in r.stderr
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
    state = RunState(run_id="r", recipe_name="x", recipe_path="x.yaml", recipe_hash="0", run_dir=str(tmp_path),
                     target="slurm", job_id="42")
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
