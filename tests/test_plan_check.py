"""plan --check (predict, then measure one point) and the plan ledger (what plan --check and bench
file, and plan --ledger prints).

The router these tests measure is a mock: tests/fakeserver.py streaming completions at a TTFT and
an inter-token latency the test sets. The real engine cannot run in unit tests; the real
deployment's check is the engine tests' and the lead's end-to-end run (docs/sla-planner.md).
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from recipectl.bench.sweep import Level
from recipectl.commands.calibrate import CALIBRATION_VERSION
from recipectl.fileio import append_line
from recipectl.launch.result import LaunchResult
from recipectl.plan.ledger import (
    LEDGER_FILE,
    Metrics,
    Point,
    append_entries,
    error_pct,
    make_entry,
    median_abs_errors,
    read_entries,
)
from recipectl.runs.state import RunState

from .e2e_support import LOCAL_RECIPE

RECIPE_NAME = "local-tiny-hybrid"


# ----- a mock router ----------------------------------------------------------------------------
def streaming_router(ttft_s: float, itl_s: float):
    """A handler for FakeServer: /v1/completions streamed as vLLM does (server-sent events, one
    token a chunk, the usage last), the first token after ``ttft_s``, each next ``itl_s`` later."""

    def handler(req):
        body = req.body or {}
        if req.path != "/v1/completions" or not body.get("stream"):
            return 404, {"error": "not here"}
        h = req.raw
        h.send_response(200)
        h.send_header("Content-Type", "text/event-stream")
        h.send_header("Connection", "close")
        h.end_headers()
        n = int(body["max_tokens"])
        time.sleep(ttft_s)
        for i in range(n):
            if i:
                time.sleep(itl_s)
            h.wfile.write(b"data: " + json.dumps({"choices": [{"index": 0, "text": "x"}]}).encode() + b"\n\n")
            h.wfile.flush()
        usage = {"choices": [], "usage": {"prompt_tokens": len(body["prompt"]), "completion_tokens": n}}
        h.wfile.write(b"data: " + json.dumps(usage).encode() + b"\n\ndata: [DONE]\n\n")
        h.wfile.flush()
        h.close_connection = True
        return 0, None

    return handler


def running_deployment(root: Path, router_url: str, recipe_text: str | None = None, name: str = RECIPE_NAME) -> str:
    """A run directory as launch leaves one (state.json, the recipe's copy), its router the mock."""
    d = root / f"{name}-20261202-063000"
    d.mkdir(parents=True)
    (d / "recipe.yaml").write_text(recipe_text if recipe_text is not None else LOCAL_RECIPE.read_text())
    RunState(
        run_id=d.name,
        recipe_name=name,
        recipe_path=str(LOCAL_RECIPE),
        recipe_hash="0",
        run_dir=str(d),
        router_url=router_url,
        served_model_name="tiny",
    ).save()
    return d.name


@pytest.fixture
def runs(tmp_path, monkeypatch) -> Path:
    root = tmp_path / "runs"
    monkeypatch.setenv("RECIPECTL_RUN_DIR", str(root))
    return root


def check(run_cli, *args: str) -> tuple[int, dict | None, str]:
    code, out, err = run_cli("plan", str(LOCAL_RECIPE), "--check", "--format", "json", *args)
    return code, (json.loads(out) if out.strip() else None), err


# ----- the arithmetic ---------------------------------------------------------------------------
def test_the_error_is_the_prediction_relative_to_the_measurement():
    assert error_pct(150, 100) == pytest.approx(50)
    assert error_pct(50, 100) == pytest.approx(-50)
    assert error_pct(1, 0) is None and error_pct(None, 1) is None and error_pct(1, None) is None
    e = make_entry(
        at="t",
        source="bench",
        recipe="r",
        fingerprint="f",
        calibration=None,
        point=Point(isl=64, osl=16, concurrency=2),
        predicted=Metrics(ttft_s=0.3, itl_s=0.01, total_tps=float("inf")),
        measured=Metrics(ttft_s=0.2, itl_s=0.02, total_tps=100.0),
    )
    assert e.calibration == "uncalibrated"
    assert e.error_pct.ttft_s == pytest.approx(50) and e.error_pct.itl_s == pytest.approx(-50)
    assert e.predicted.total_tps is None and e.error_pct.total_tps is None  # JSON has no Infinity


def _entry(recipe="r", calibration=None, ttft=(0.2, 0.1), itl=(0.01, 0.01), tps=(10.0, 10.0), c=1):
    return make_entry(
        at="2026-12-02T06:30:00Z",
        source="bench",
        recipe=recipe,
        fingerprint="f",
        calibration=calibration,
        point=Point(isl=64, osl=16, concurrency=c),
        predicted=Metrics(ttft_s=ttft[0], itl_s=itl[0], total_tps=tps[0]),
        measured=Metrics(ttft_s=ttft[1], itl_s=itl[1], total_tps=tps[1]),
    )


def test_the_median_error_is_of_magnitudes_whatever_the_sign():
    ttfts = [(1.5, 1.0), (0.7, 1.0), (0.6, 1.0)]
    entries = [*(_entry(ttft=t) for t in ttfts), _entry(ttft=(0.6, 1.0), itl=(None, 1.0))]
    med = median_abs_errors(entries)
    assert med["ttft_s"] == pytest.approx(40)  # |+50|, |-30|, |-40|, |-40| (signed, the median is -35)
    assert med["itl_s"] == pytest.approx(0)  # the entry without a predicted ITL counts for none
    assert median_abs_errors([]) == {"ttft_s": None, "itl_s": None, "total_tps": None}


# ----- the ledger file --------------------------------------------------------------------------
def test_a_ledger_line_is_one_write_and_a_cut_off_line_loses_only_itself(tmp_path, monkeypatch):
    path = tmp_path / LEDGER_FILE
    path.write_bytes(b'{"ledger_version": 1, "recipe": "r", "at"')  # a writer killed mid-line
    writes = []
    real = os.write
    monkeypatch.setattr("recipectl.fileio.os.write", lambda fd, data: writes.append(data) or real(fd, data))
    append_entries(path, [_entry(c=1), _entry(c=2), _entry(recipe="other")])
    assert len(writes) == 3 and all(w.endswith(b"\n") and w.count(b"\n") <= 2 for w in writes)
    assert writes[0].startswith(b"\n")  # the cut-off line ends before this one starts
    entries, skipped = read_entries(path, "r")
    assert [e.point.concurrency for e in entries] == [1, 2] and skipped == 1
    path.open("a").write("not json\n[1, 2]\n")
    assert read_entries(path)[1] == 3 and len(read_entries(path)[0]) == 3


def test_a_ledger_is_never_written_through_a_symlink(tmp_path):
    target = tmp_path / "elsewhere"
    target.write_text("")
    (tmp_path / LEDGER_FILE).symlink_to(target)
    with pytest.raises(OSError):
        append_line(tmp_path / LEDGER_FILE, "{}")
    assert target.read_text() == ""


def test_plan_ledger_prints_the_recipes_points_and_the_median_error_per_model(runs, recipectl_in_process):
    append_entries(
        runs / LEDGER_FILE,
        [
            _entry(recipe=RECIPE_NAME, ttft=(0.2, 0.1), c=1),
            _entry(recipe=RECIPE_NAME, ttft=(0.1, 0.2), c=2),
            _entry(recipe=RECIPE_NAME, calibration="tiny.calibration.json", ttft=(0.11, 0.1), c=4),
            _entry(recipe="another-recipe", ttft=(9.0, 0.1)),
        ],
    )
    code, out, err = recipectl_in_process("plan", str(LOCAL_RECIPE), "--ledger", "--format", "json")
    assert code == 0, err
    body = json.loads(out)
    assert [e["point"]["concurrency"] for e in body["entries"]] == [1, 2, 4]
    meds = {m["calibration"]: m for m in body["median_abs_error_pct"]}
    assert meds["uncalibrated"]["points"] == 2 and meds["uncalibrated"]["ttft_s"] == pytest.approx(75)  # 100, 50
    assert meds["tiny.calibration.json"]["ttft_s"] == pytest.approx(10)
    code, out, err = recipectl_in_process("plan", str(LOCAL_RECIPE), "--ledger")
    assert code == 0 and "+100%" in out and "-50%" in out
    assert "median |error|, uncalibrated, 2 point(s): TTFT 75%" in out


# ----- plan --check on a running deployment (--run) ---------------------------------------------
def test_check_compares_prediction_and_measurement_and_exits_by_the_measurement(
    runs, fake_server, recipectl_in_process
):
    """The mock streams at TTFT 300 ms, ITL 10 ms. At 30 s / 5 s the measurement meets the SLA
    (exit 0); at 100 ms TTFT it does not (exit 1), though the analytic plan predicts it does."""
    router = fake_server(streaming_router(0.3, 0.01))
    run_id = running_deployment(runs, router.url)
    code, body, err = check(recipectl_in_process, "--sla", "ttft=30s,itl=5s", "--run", run_id, "--concurrency", "2")
    assert code == 0, err
    assert body["meets_sla"] is True and body["launched"] is False and body["run_id"] == run_id
    assert body["point"] == {
        "isl": 64,
        "osl": 16,
        "concurrency": 2,
        "requests": 4,
        "chosen_by": "given by --concurrency",
        "users": "together",
    }
    cmp = body["comparison"]
    assert 0.3 <= cmp["ttft_s"]["measured"] < 1.3 and 0.009 <= cmp["itl_s"]["measured"] < 0.2
    for m in ("ttft_s", "itl_s", "total_tps"):
        pred, meas = cmp[m]["predicted"], cmp[m]["measured"]
        assert cmp[m]["error_pct"] == pytest.approx((pred - meas) / meas * 100)
    assert cmp["ttft_s"]["predicted"] == pytest.approx(body["prediction"]["ttft_s"])
    assert cmp["total_tps"]["predicted"] == pytest.approx(body["prediction"]["total_tps"])
    # throughput: the prompts' and the outputs' tokens of the 4 requests over the point's duration
    assert cmp["total_tps"]["measured"] == pytest.approx(4 * (64 + 16) / body["measured"]["duration_s"])
    assert body["prediction"]["concurrency"] == 2 and body["calibrated"] is False

    code, body, err = check(recipectl_in_process, "--sla", "ttft=100ms", "--run", run_id, "--concurrency", "2")
    assert code == 1, err
    assert body["meets_sla"] is False and body["predicted_meets_sla"] is True

    entries, skipped = read_entries(runs / LEDGER_FILE, RECIPE_NAME)
    assert len(entries) == 2 and skipped == 0
    first = entries[0]
    assert first.source == "plan --check" and first.calibration == "uncalibrated" and first.run_id == run_id
    assert first.point == Point(isl=64, osl=16, concurrency=2) and len(first.fingerprint) == 64
    assert first.model_extra["meets_sla"] is True and entries[1].model_extra["meets_sla"] is False
    assert first.model_extra["configuration"] == {
        "prefill_endpoints": 1,
        "decode_endpoints": 1,
        "prefill_tp": 1,
        "decode_tp": 1,
    }


def test_check_out_of_step_starts_the_users_apart_and_files_the_point_as_such(
    runs, fake_server, recipectl_in_process, monkeypatch
):
    """--out-of-step: the users start spread over the warm-up round's duration, each sends 5, and
    the point is measured while all of them are sending; the ledger keeps such points apart from
    those of users who started together (the model predicts the latter)."""
    from recipectl.commands import check as check_module

    real = check_module.run_point
    rounds = []

    def recording(*a, **kw):
        r = real(*a, **kw)
        rounds.append((kw.get("stagger_s", 0.0), r.duration_s))
        return r

    # the warm-up's rounds run in probe.warm_up, the measured one in check
    monkeypatch.setattr("recipectl.commands.check.run_point", recording)
    monkeypatch.setattr("recipectl.bench.probe.run_point", recording)
    router = fake_server(streaming_router(0.2, 0.01))
    run_id = running_deployment(runs, router.url)
    args = ("--sla", "ttft=30s,itl=5s", "--run", run_id, "--concurrency", "2")
    code, body, err = check(recipectl_in_process, *args, "--out-of-step")
    assert code == 0, err
    (_, set_up), (_, cycle), (stagger, _) = rounds
    assert stagger == cycle > 0  # the users spread over one cycle of theirs: the second warm-up round's
    assert (
        body["measured"]["window_requests"] >= 2 and 0 < body["measured"]["window_s"] < body["measured"]["duration_s"]
    )
    assert body["point"]["users"] == "out of step" and body["point"]["requests"] == 10
    cmp = body["comparison"]
    assert 0.2 <= cmp["ttft_s"]["measured"] < 1.2 and 0.009 <= cmp["itl_s"]["measured"] < 0.2
    # the window's throughput: two users, each a request of 80 tokens every ~0.35 s; over the whole
    # run, which starts with one user alone for a cycle, it is lower
    assert 150 < cmp["total_tps"]["measured"] < 600
    assert cmp["total_tps"]["measured"] > 1.1 * 10 * (64 + 16) / body["measured"]["duration_s"]
    code, _, err = check(recipectl_in_process, *args)
    assert code == 0, err
    entries, _ = read_entries(runs / LEDGER_FILE, RECIPE_NAME)
    assert [e.users for e in entries] == ["out of step", "together"]
    code, out, err = recipectl_in_process("plan", str(LOCAL_RECIPE), "--ledger", "--format", "json")
    meds = {(m["calibration"], m["users"]): m["points"] for m in json.loads(out)["median_abs_error_pct"]}
    assert meds == {("uncalibrated", "out of step"): 1, ("uncalibrated", "together"): 1}
    code, out, err = recipectl_in_process("plan", str(LOCAL_RECIPE), "--ledger")
    assert "median |error|, uncalibrated, users out of step, 1 point(s)" in " ".join(out.split())
    code, _, err = recipectl_in_process("plan", str(LOCAL_RECIPE), "--sla", "ttft=2s", "--out-of-step")
    assert code == 2 and "--out-of-step go with --check" in err


def test_a_slow_first_round_does_not_spread_the_users_out_of_step_past_their_requests(
    runs, fake_server, recipectl_in_process
):
    """The first round pays a batch shape's set-up (1.7-3.6 s TTFTs on the CPU platform, where the
    rest took a fraction of it): spread over it, four users each sending five would never all be
    sending at once. The spread is a second round's."""
    served = []
    fast = streaming_router(0.02, 0.001)

    def handler(req):
        served.append(1)
        if len(served) <= 4:
            time.sleep(2.0)
        return fast(req)

    router = fake_server(handler)
    run_id = running_deployment(runs, router.url)
    code, body, err = check(
        recipectl_in_process, "--sla", "ttft=30s", "--run", run_id, "--concurrency", "4", "--out-of-step"
    )
    assert code == 0, err
    assert body["point"]["users"] == "out of step" and body["measured"]["window_requests"] >= 4


def test_a_ledger_line_written_before_users_were_recorded_reads_as_users_together(runs):
    line = _entry(recipe=RECIPE_NAME, ttft=(0.2, 0.1)).model_dump(mode="json")
    del line["users"]
    runs.mkdir(parents=True)
    append_line(runs / LEDGER_FILE, json.dumps(line))
    (entry,), skipped = read_entries(runs / LEDGER_FILE, RECIPE_NAME)
    assert skipped == 0 and entry.users == "together"


def test_a_measurement_that_meets_the_sla_exits_0_where_the_plan_said_it_would_not(
    runs, fake_server, recipectl_in_process
):
    """The analytic model predicts 60 ms TTFT at one user; the mock answers in 5 ms."""
    router = fake_server(streaming_router(0.005, 0.001))
    run_id = running_deployment(runs, router.url)
    code, body, err = check(recipectl_in_process, "--sla", "ttft=40ms", "--run", run_id)
    assert code == 0, err
    assert body["predicted_meets_sla"] is False and body["meets_sla"] is True
    # none predicted to meet it: the point is the workload's highest concurrency
    assert body["point"]["concurrency"] == 4 and "workload" in body["point"]["chosen_by"]
    code, out, err = recipectl_in_process("plan", str(LOCAL_RECIPE), "--sla", "ttft=40ms", "--check", "--run", run_id)
    assert code == 0 and "measured: meets the SLA (the plan predicted it misses it)" in out, out + err


def test_check_refuses_a_run_of_another_configuration(runs, fake_server, recipectl_in_process):
    router = fake_server(streaming_router(0.01, 0.001))
    text = LOCAL_RECIPE.read_text()
    for edited, says in (
        (text.replace("max_num_batched_tokens: 4096", "max_num_batched_tokens: 2048"), "max_num_batched_tokens"),
        (text.replace("  cpu_cores: ['1']", "  endpoints: 2\n  cpu_cores: ['1', '1']"), "decode: 2 running"),
    ):
        assert edited != text
        run_id = running_deployment(runs, router.url, edited)
        code, body, err = check(recipectl_in_process, "--sla", "ttft=30s", "--run", run_id)
        assert code == 2 and body is not None and body["error"]["exit_code"] == 2, err  # the error, as JSON
        assert says in err and says in body["error"]["message"] and "Traceback" not in err
        (runs / run_id / "state.json").unlink()
        for f in (runs / run_id).iterdir():
            f.unlink()
        (runs / run_id).rmdir()
    assert not router.requests  # refused before a request was sent
    assert not (runs / LEDGER_FILE).exists()


def test_check_refuses_a_stopped_run_and_bad_input_with_exit_2(runs, fake_server, recipectl_in_process):
    router = fake_server(streaming_router(0.01, 0.001))
    run_id = running_deployment(runs, router.url)
    state = RunState.load(runs / run_id / "state.json")
    state.stopped_at = time.time()
    state.save()
    assert check(recipectl_in_process, "--sla", "ttft=30s", "--run", run_id)[0] == 2
    for args in (
        ["--run", run_id],  # --check without --sla
        ["--sla", "ttft=2", "--run", run_id],  # an SLA without its unit
        ["--sla", "ttft=2s", "--gpus", "4"],  # --check measures the recipe's own configuration
        ["--sla", "ttft=2s", "--ledger"],
    ):
        code, body, err = check(recipectl_in_process, *args)
        assert code == 2 and "Traceback" not in err, (args, err)
        assert body is not None and body["error"]["message"] in err, (args, body)  # the error, as JSON
    code, _, err = recipectl_in_process("plan", str(LOCAL_RECIPE), "--run", run_id)  # --run without --check
    assert code == 2 and "--check" in err
    assert not router.requests


# ----- plan --check launching the recipe ---------------------------------------------------------
@pytest.fixture
def launched(monkeypatch, runs, fake_server):
    """The launcher and stop of commands/measuring.py replaced by a mock deployment: what launch
    was asked to start and what stop was asked to stop."""
    router = fake_server(streaming_router(0.01, 0.001))
    calls: dict[str, list] = {"launch": [], "stop": []}
    d = runs / f"{RECIPE_NAME}-20261202-070000"
    d.mkdir(parents=True)
    state = RunState(
        run_id=d.name,
        recipe_name=RECIPE_NAME,
        recipe_path=str(LOCAL_RECIPE),
        recipe_hash="0",
        run_dir=str(d),
        router_url=router.url,
    )

    def launch(recipe_path, recipe, **kw):
        calls["launch"].append(recipe_path)
        return LaunchResult(state, True, "ready")

    monkeypatch.setattr("recipectl.commands.measuring.launch", launch)
    monkeypatch.setattr("recipectl.commands.measuring.stop_run", lambda run_dir: calls["stop"].append(run_dir))
    return calls


def test_check_stops_what_it_launched_after_measuring(launched, recipectl_in_process):
    code, body, err = check(recipectl_in_process, "--sla", "ttft=30s", "--concurrency", "1")
    assert code == 0, err
    assert body["launched"] is True and launched["launch"] == [str(LOCAL_RECIPE)] and len(launched["stop"]) == 1


def test_ctrl_c_during_the_check_stops_what_it_launched(launched, recipectl_in_process, monkeypatch):
    def interrupted(*a, **kw):
        raise KeyboardInterrupt

    monkeypatch.setattr("recipectl.commands.check.run_point", interrupted)
    code, body, err = check(recipectl_in_process, "--sla", "ttft=30s", "--concurrency", "1")
    assert code == 130 and body is None
    assert len(launched["stop"]) == 1 and "interrupted" in err


def test_the_warm_up_runs_at_the_points_concurrency(launched, recipectl_in_process, monkeypatch):
    """The first batch of a new shape pays its kernels' set-up on the CPU platform (1.7-3.6 s TTFTs
    at concurrency 4 after a one-request warm-up): the measured requests come after a round at the
    point's own concurrency."""
    from recipectl.commands import check as check_module

    real = check_module.run_point
    calls = []

    def recording(*a, **kw):
        calls.append((kw["concurrency"], kw["num_requests"]))
        return real(*a, **kw)

    # the warm-up's rounds run in probe.warm_up, the measured one in check
    monkeypatch.setattr("recipectl.commands.check.run_point", recording)
    monkeypatch.setattr("recipectl.bench.probe.run_point", recording)
    code, body, err = check(recipectl_in_process, "--sla", "ttft=30s", "--concurrency", "3")
    assert code in (0, 1), err
    assert calls[0] == (3, 3) and calls[1][0] == 3


def test_a_kill_during_the_check_stops_what_it_launched(launched, recipectl_in_process, monkeypatch):
    """SIGTERM (a scheduler's or a timeout's kill) mid-measurement: the deployment is stopped as on
    Ctrl-C, not left running."""
    import os
    import signal

    def killed(*a, **kw):
        os.kill(os.getpid(), signal.SIGTERM)
        raise AssertionError("SIGTERM did not end the measurement")

    monkeypatch.setattr("recipectl.commands.check.run_point", killed)
    before = signal.getsignal(signal.SIGTERM)
    code, body, err = check(recipectl_in_process, "--sla", "ttft=30s", "--concurrency", "1")
    assert code == 130 and body is None
    assert len(launched["stop"]) == 1
    assert signal.getsignal(signal.SIGTERM) == before  # the handler is the caller's again


def test_a_failed_point_exits_1_stops_the_deployment_and_files_nothing(
    launched, recipectl_in_process, monkeypatch, runs
):
    from recipectl.bench.probe import PointResult

    monkeypatch.setattr(
        "recipectl.commands.check.run_point",
        lambda *a, **kw: PointResult(isl=64, osl=16, concurrency=1, errors=["HTTPStatusError: 503"]),
    )
    code, body, err = check(recipectl_in_process, "--sla", "ttft=30s", "--concurrency", "1")
    assert code == 1 and "503" in err and len(launched["stop"]) == 1
    assert not (runs / LEDGER_FILE).exists()


# ----- bench files its levels -------------------------------------------------------------------
def _level(c: int, valid: bool = True) -> Level:
    return Level(
        concurrency=c,
        num_prompts=2 * c,
        result_file=f"level-c{c}.json",
        completed=2 * c,
        total_tps=100.0 * c,
        ttft_median_ms=200.0,
        tpot_median_ms=50.0,
        valid=valid,
        problems=[] if valid else ["zero output tokens"],
    )


def test_bench_files_each_valid_level_against_the_plan(runs, recipectl_in_process, monkeypatch, tmp_path):
    def sweep(recipe, router, out_dir, **kw):
        out_dir.mkdir(parents=True)
        return [_level(1), _level(2), _level(4, False)]

    monkeypatch.setattr("recipectl.commands.bench.run_sweep", sweep)
    monkeypatch.setattr("recipectl.bench.sweep.plot", lambda *a, **kw: None)
    args = ("bench", str(LOCAL_RECIPE), "--router", "http://127.0.0.1:9", "--out", str(tmp_path / "b"), "-f", "json")
    code, out, err = recipectl_in_process(*args)
    assert code == 1, err  # the invalid level makes the run invalid; the valid ones are filed all the same
    assert json.loads(out)["ledger"] == str(runs / LEDGER_FILE)
    entries, _ = read_entries(runs / LEDGER_FILE, RECIPE_NAME)
    assert [e.point.concurrency for e in entries] == [1, 2]
    e = entries[1]
    assert e.source == "bench" and e.run_id is None and e.calibration == "uncalibrated"
    assert e.measured == Metrics(ttft_s=0.2, itl_s=0.05, total_tps=200.0)  # ITL: the level's median TPOT
    assert e.point.isl == 64 and e.point.osl == 16
    assert e.error_pct.ttft_s == pytest.approx((e.predicted.ttft_s - 0.2) / 0.2 * 100)


def test_bench_refuses_a_calibration_of_another_configuration_before_the_sweep(
    runs, recipectl_in_process, monkeypatch, tmp_path
):
    swept = []
    monkeypatch.setattr("recipectl.commands.bench.run_sweep", lambda *a, **kw: swept.append(1) or [])
    cal = tmp_path / "cal.json"
    cal.write_text(
        json.dumps(
            {"calibration_version": CALIBRATION_VERSION, "fingerprint": "0" * 64, "configuration": {}, "model": {}}
        )
    )
    args = ("bench", str(LOCAL_RECIPE), "--router", "http://127.0.0.1:9", "--calibration", str(cal))
    code, out, err = recipectl_in_process(*args)
    assert code == 2 and "describes another configuration" in err and not swept


def test_calibrate_refuses_a_run_of_another_configuration_too(runs, fake_server, recipectl_in_process, tmp_path):
    """What calibrate measures is filed under the recipe's fingerprint: a run of other settings is refused."""
    router = fake_server(streaming_router(0.01, 0.001))
    edited = LOCAL_RECIPE.read_text().replace('VLLM_CPU_KVCACHE_SPACE: "1"', 'VLLM_CPU_KVCACHE_SPACE: "2"')
    run_id = running_deployment(runs, router.url, edited)
    out = tmp_path / "cal.json"
    code, _, err = recipectl_in_process("calibrate", str(LOCAL_RECIPE), "-o", str(out), "--run", run_id)
    assert code == 2 and "VLLM_CPU_KVCACHE_SPACE: running '2', now '1'" in err, err
    assert not out.exists() and not router.requests
