"""plan --sla's performance model: the fit, the SLA, the binding constraint, the ranking, and the
calibration a configuration is refused."""

from __future__ import annotations

import json
import math
import random
from pathlib import Path

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from recipectl.commands.calibrate import role_shapes
from recipectl.effective import resolve_role
from recipectl.errors import RecipectlError
from recipectl.plan.perf import (
    DecodeCoeffs,
    DecodePoint,
    PerfModel,
    PrefillCoeffs,
    PrefillPoint,
    PromptSplit,
    RoleShape,
    TransferCoeffs,
    TransferPoint,
    fill_schedule,
    fit_decode,
    fit_prefill,
    fit_transfer,
    predict,
    prompt_chunk,
    wave_prefill_steps,
    wave_schedule,
)
from recipectl.plan.recipe_plan import model_spec, prompt_split
from recipectl.plan.sla import Sla, SlaError, binding_constraint, parse_sla, rank
from recipectl.validate import load_variant

from .e2e_support import LOCAL_RECIPE, cli

PRE = RoleShape(endpoints=1, gpus_per_endpoint=1, kv_bytes_per_token=1024, gdn_state_bytes_per_request=1 << 20)
DEC = RoleShape(
    endpoints=1,
    gpus_per_endpoint=1,
    kv_bytes_per_token=1024,
    gdn_state_bytes_per_request=1 << 20,
    max_concurrency_per_endpoint=256,
)


def model(prefill=(0.02, 50e-6), decode=(0.01, 0.5e-3, 1e-8), transfer=(0.005, 1e9)) -> PerfModel:
    return PerfModel(
        prefill=PrefillCoeffs(overhead_s=prefill[0], per_token_s=prefill[1]),
        decode=DecodeCoeffs(step_s=decode[0], per_seq_s=decode[1], per_ctx_token_s=decode[2]),
        transfer=TransferCoeffs(latency_s=transfer[0], bytes_per_s=transfer[1]),
        calibrated=True,
    )


def test_the_fit_recovers_the_coefficients_that_made_the_points():
    rng = random.Random(1)
    noise = lambda: 1 + rng.uniform(-0.01, 0.01)  # noqa: E731 - 1% measurement noise
    pre = fit_prefill([PrefillPoint(isl=n, seconds=(0.03 + 80e-6 * n) * noise()) for n in (32, 500, 2000, 2000)])
    assert pre.overhead_s == pytest.approx(0.03, rel=0.1) and pre.per_token_s == pytest.approx(80e-6, rel=0.03)
    truth = DecodeCoeffs(step_s=0.012, per_seq_s=0.002, per_ctx_token_s=3e-6)
    pts = [
        DecodePoint(concurrency=c, context=L, itl_s=truth.itl_s(c, L) * noise())
        for c, L in ((1, 40), (1, 2000), (4, 40), (4, 500), (8, 1000))
    ]
    dec = fit_decode(pts)
    assert dec.step_s == pytest.approx(0.012, rel=0.1)
    assert dec.per_seq_s == pytest.approx(0.002, rel=0.15)
    assert dec.per_ctx_token_s == pytest.approx(3e-6, rel=0.15)
    tr = fit_transfer(
        [TransferPoint(nbytes=b, seconds=0.004 + b / 2e9) for b in (1 << 20, 1 << 26, 1 << 28)],
        TransferCoeffs(latency_s=1, bytes_per_s=1),
    )
    assert tr.latency_s == pytest.approx(0.004, rel=1e-3) and tr.bytes_per_s == pytest.approx(2e9, rel=1e-3)


def test_a_coefficient_the_points_make_negative_is_zero_and_the_rest_refit():
    """Decode at one concurrency with ITL falling with context (noise): no negative cost per token."""
    pts = [DecodePoint(concurrency=1, context=L, itl_s=t) for L, t in ((40, 0.0101), (1000, 0.0100), (2000, 0.0099))]
    dec = fit_decode(pts)
    assert min(dec.step_s, dec.per_seq_s, dec.per_ctx_token_s) >= 0
    assert dec.itl_s(1, 1000) == pytest.approx(0.01, rel=0.02)


def test_transfer_without_a_spread_of_sizes_keeps_the_default_bandwidth():
    default = TransferCoeffs(latency_s=0.0, bytes_per_s=5e8)
    tr = fit_transfer([TransferPoint(nbytes=1000, seconds=0.02), TransferPoint(nbytes=1000, seconds=0.022)], default)
    assert tr.bytes_per_s == 5e8 and tr.latency_s == pytest.approx(0.021, abs=1e-4)


def test_ttft_is_its_parts_at_one_user_and_queueing_grows_it_with_users():
    m = model()
    one = predict(m, PRE, DEC, isl=1000, osl=100, concurrency=1)
    assert one.queue_s == 0
    assert one.ttft_s == pytest.approx(one.prefill_s + one.transfer_s + one.first_step_s)
    assert one.transfer_s == pytest.approx(0.005 + (1024 * 1000 + (1 << 20)) / 1e9)
    many = predict(m, PRE, DEC, isl=1000, osl=100, concurrency=64)
    assert many.queue_s > 0 and many.ttft_s > one.ttft_s and many.itl_s > one.itl_s
    assert 0 < many.prefill_utilisation <= 1


@pytest.mark.parametrize(
    "text, ttft, itl",
    [
        ("ttft=2s,itl=50ms", 2.0, 0.05),
        ("itl=20ms", None, 0.02),
        ("TTFT=1500ms", 1.5, None),
        ("ttft=0.5s, itl=7.5ms", 0.5, 0.0075),
    ],
)
def test_an_sla_is_read_with_its_units(text, ttft, itl):
    sla = parse_sla(text)
    assert sla.ttft_s == pytest.approx(ttft) if ttft else sla.ttft_s is None
    assert sla.itl_s == pytest.approx(itl) if itl else sla.itl_s is None


@pytest.mark.parametrize(
    "text",
    ["ttft=2", "ttft=2m", "tpot=50ms", "ttft=2s,ttft=3s", "ttft=0s", "", "ttft=2s,", "ttft=-1s", "ttft=2s;itl=50ms"],
)
def test_an_sla_that_cannot_be_read_is_refused(text):
    with pytest.raises(SlaError):
        parse_sla(text)


def test_plan_refuses_a_bad_sla_with_exit_2_and_the_form():
    r = cli("plan", str(LOCAL_RECIPE), "--sla", "ttft=2", timeout=120)
    assert r.returncode == 2, r.stdout + r.stderr
    assert "ttft=2s,itl=50ms" in r.stderr and "Traceback" not in r.stderr


@pytest.mark.parametrize(
    "m, sla, cap, expected",
    [
        (model(), Sla(ttft_s=10, itl_s=10), 3, "KV capacity"),
        (model(), Sla(itl_s=0.02), None, "decode compute"),
        (model(prefill=(0.02, 1e-3)), Sla(ttft_s=1.2), None, "prefill compute"),
        (model(transfer=(0.005, 2e6)), Sla(ttft_s=1.5), None, "transfer"),
        (model(prefill=(0.05, 1e-4)), Sla(ttft_s=0.5), None, "queueing"),
    ],
)
def test_the_binding_constraint_is_what_stops_one_more_user(m, sla, cap, expected):
    from recipectl.plan.sla import best_concurrency

    dec = DEC.model_copy(update={"max_concurrency_per_endpoint": cap})
    c = best_concurrency(m, sla, PRE, dec, isl=1000, osl=100, limit=cap or 4096)
    assert c is not None
    assert binding_constraint(m, sla, PRE, dec, isl=1000, osl=100, concurrency=c, capacity=cap) == expected


def test_ranking_puts_the_best_throughput_per_gpu_that_meets_the_sla_first():
    """Prefill-heavy work (long prompts, short outputs): more prefill endpoints per decode wins;
    a split that meets the SLA at no concurrency is last."""
    m = model(prefill=(0.02, 2e-4))
    ranked = rank(m, Sla(ttft_s=2.0, itl_s=0.05), PRE, DEC, isl=4000, osl=50, gpus=6)
    met = [c for c in ranked if c.concurrency]
    assert met and ranked[0].prefill_endpoints > ranked[0].decode_endpoints
    tps = [c.prediction.tps_per_gpu for c in met]
    assert tps == sorted(tps, reverse=True)
    strict = rank(m, Sla(ttft_s=0.5), PRE, DEC, isl=4000, osl=50, gpus=3)
    assert all(c.concurrency is None for c in strict) and strict[0].binding == "prefill compute"


def calibration_points() -> list[dict]:
    """A calibration's points as calibrate records them: prefill alone and through the router at
    one user, and two points of four users whose decodes overlap in part (decode_residents 2.6)."""
    staggered = [0.1, 0.5, 0.9, 1.3]  # four users' first tokens
    points = [
        {"kind": "prefill", "isl": n, "osl": 1, "concurrency": 1, "seconds": [0.02 + 1e-4 * n] * 5}
        for n in (32, 128, 512)
    ]
    points += [
        {"kind": "routed", "isl": n, "osl": 32, "concurrency": 1, "ttft_s": [0.05 + 1e-4 * n] * 5, "itl_s": [0.030] * 5}
        for n in (32, 128, 512)
    ]
    points += [
        {
            "kind": "routed",
            "isl": n,
            "osl": 32,
            "concurrency": 4,
            "ttft_s": staggered,
            "itl_s": [itl] * 4,
            "decode_residents": 2.6,
        }
        for n, itl in ((32, 0.040), (128, 0.042))
    ]
    return points


def _calibration(tmp_path, recipe_path):
    from recipectl.commands.calibrate import CALIBRATION_VERSION, describe
    from recipectl.validate import load_variant

    ident = describe(load_variant(str(recipe_path), None), str(recipe_path))
    doc = {"calibration_version": CALIBRATION_VERSION, **ident, "model": model().model_dump(mode="json")}
    out = tmp_path / "cal.json"
    out.write_text(json.dumps(doc))
    return out


def test_a_calibration_is_refused_for_a_configuration_it_does_not_describe(tmp_path):
    from recipectl.commands.calibrate import describe, read_calibration
    from recipectl.validate import load_variant

    cal = _calibration(tmp_path, LOCAL_RECIPE)
    other = tmp_path / "other.yaml"
    other.write_text(LOCAL_RECIPE.read_text().replace("max_num_batched_tokens: 4096", "max_num_batched_tokens: 2048"))
    moved = tmp_path / "moved.yaml"  # other ports: the same configuration
    moved.write_text(LOCAL_RECIPE.read_text().replace("port: 8100", "port: 8101"))
    shapes = (PRE, DEC)
    assert read_calibration(str(cal), describe(load_variant(str(moved), None), str(moved)), shapes).calibrated
    with pytest.raises(RecipectlError) as e:
        read_calibration(str(cal), describe(load_variant(str(other), None), str(other)), shapes)
    assert "max_num_batched_tokens" in e.value.message and e.value.exit_code == 2
    cache = tmp_path / "cache.yaml"  # an engine setting that lives in the environment
    cache.write_text(LOCAL_RECIPE.read_text().replace('VLLM_CPU_KVCACHE_SPACE: "1"', 'VLLM_CPU_KVCACHE_SPACE: "2"'))
    with pytest.raises(RecipectlError, match="VLLM_CPU_KVCACHE_SPACE"):
        read_calibration(str(cal), describe(load_variant(str(cache), None), str(cache)), shapes)
    r = cli("plan", str(other), "--sla", "ttft=2s", "--calibration", str(cal), timeout=120)
    assert r.returncode == 2 and "describes another configuration" in r.stderr, r.stdout + r.stderr


def test_a_calibration_of_an_older_version_is_fitted_again_from_its_points(tmp_path):
    """Version 1's coefficients may come from a fit that took prefill's overhead per prompt (this
    model counts it per step): read_calibration fits its points again instead of reading them."""
    from recipectl.commands.calibrate import describe, fit_calibration, read_calibration
    from recipectl.validate import load_variant

    cal = _calibration(tmp_path, LOCAL_RECIPE)
    doc = json.loads(cal.read_text())
    stale = {**doc["model"], "prefill": {"overhead_s": 9.0, "per_token_s": 1.0}}
    cal.write_text(json.dumps({**doc, "calibration_version": 1, "model": stale, "points": calibration_points()}))
    current = describe(load_variant(str(LOCAL_RECIPE), None), str(LOCAL_RECIPE))
    got = read_calibration(str(cal), current, (PRE, DEC))
    assert got == fit_calibration(calibration_points(), prefill_shape=PRE, decode_shape=DEC, device="CPU")[0]
    assert got.calibrated and got.prefill.overhead_s != 9.0
    r = cli("plan", str(LOCAL_RECIPE), "--sla", "ttft=2s", "--calibration", str(cal), "--format", "json", timeout=120)
    assert r.returncode == 0 and json.loads(r.stdout)["calibrated"], r.stderr


def test_a_stored_calibration_is_fitted_again_on_the_layout_it_measured():
    """refit_on_layout (a benchmark run scored again): the recipe's shapes with the endpoint counts
    the calibration recorded. Decode's points are per decode endpoint, so a calibration of two
    decode endpoints fits other coefficients than the recipe's one would; one that recorded none
    is fitted on the recipe's."""
    from recipectl.commands.calibrate import fit_calibration, refit_on_layout

    recorded = {"points": calibration_points(), "device": "CPU"}
    shapes = {"prefill": PRE, "decode": DEC}
    two = DEC.model_copy(update={"endpoints": 2})
    as_run = fit_calibration(calibration_points(), prefill_shape=PRE, decode_shape=two, device="CPU")[0]
    assert refit_on_layout(recorded, shapes, {"prefill": 1, "decode": 2}) == as_run
    as_recipe = fit_calibration(calibration_points(), prefill_shape=PRE, decode_shape=DEC, device="CPU")[0]
    assert refit_on_layout(recorded, shapes) == refit_on_layout(recorded, shapes, {"decode": 1}) == as_recipe
    assert as_run.decode != as_recipe.decode


def test_a_plan_past_the_users_the_calibration_measured_says_so(tmp_path):
    """A calibration measures a decode endpoint at up to four users; a plan that picks hundreds
    carries the fit past its points (on the CPU engine a plan of 206 users measured an ITL half the
    predicted one): the configuration is marked, in the table and in --format json. A calibration
    written before it recorded the count is read from its fitted decode points."""
    from recipectl.commands.calibrate import fit_calibration

    fitted, fit_points = fit_calibration(calibration_points(), prefill_shape=PRE, decode_shape=DEC, device="CPU")
    assert fitted.measured_users == 4
    cal = _calibration(tmp_path, LOCAL_RECIPE)  # the model without measured_users, as written before
    doc = json.loads(cal.read_text())
    assert "measured_users" not in json.dumps(doc["model"]) or doc["model"]["measured_users"] is None
    cal.write_text(json.dumps({**doc, "fit_points": fit_points}))
    args = ("plan", str(LOCAL_RECIPE), "--sla", "ttft=30s,itl=500ms", "--calibration", str(cal))
    j = json.loads(cli(*args, "--format", "json", timeout=120).stdout)
    assert j["measured_users"] == 4
    chosen = j["configurations"][0]
    per_decode = -(-chosen["concurrency"] // chosen["decode_endpoints"])
    assert per_decode > 4 and chosen["beyond_calibration"]
    assert all(
        c["beyond_calibration"] == (-(-(c["concurrency"] or 0) // c["decode_endpoints"]) > 4)
        for c in j["configurations"]
    )
    text = " ".join(cli(*args, timeout=120).stdout.split())
    assert f"{chosen['concurrency']} ^" in text
    assert "^ more users a decode endpoint than the calibration measured (up to 4)" in text


@pytest.mark.parametrize(
    "version, said",
    [
        (1, "fitted again from its points"),  # and none to fit
        (3, "written by a newer recipectl"),
        (0, "not a recipectl calibration"),
        ("2", "not a recipectl calibration"),
        (True, "not a recipectl calibration"),
    ],
)
def test_a_calibration_that_cannot_be_read_is_refused_with_what_to_run(tmp_path, version, said):
    cal = _calibration(tmp_path, LOCAL_RECIPE)
    cal.write_text(json.dumps({**json.loads(cal.read_text()), "calibration_version": version}))
    r = cli("plan", str(LOCAL_RECIPE), "--sla", "ttft=2s", "--calibration", str(cal), timeout=120)
    assert r.returncode == 2, r.stdout + r.stderr
    assert said in r.stderr and "recipectl calibrate RECIPE -o" in r.stderr and "--force" in r.stderr
    assert "Traceback" not in r.stderr


def test_a_request_longer_than_max_model_len_is_refused_not_planned():
    """vLLM refuses a request whose prompt and output pass max_model_len: plan says so, with the
    longest prompt that fits, instead of ranking configurations that serve no one."""
    r = cli("plan", str(LOCAL_RECIPE), "--sla", "ttft=2s", "--isl", "100000", timeout=120)
    assert r.returncode == 2 and "max_model_len (4,096)" in r.stderr and "--isl 4080" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr
    fits = cli("plan", str(LOCAL_RECIPE), "--sla", "ttft=2s", "--isl", "4000", "--osl", "96", timeout=120)
    assert fits.returncode == 0, fits.stderr


def test_plan_sla_json_says_whether_it_is_calibrated(tmp_path):
    cal = _calibration(tmp_path, LOCAL_RECIPE)
    for extra, calibrated in (([], False), (["--calibration", str(cal)], True)):
        r = cli("plan", str(LOCAL_RECIPE), "--sla", "ttft=2s,itl=50ms", "--format", "json", *extra, timeout=120)
        assert r.returncode == 0, r.stderr
        body = json.loads(r.stdout)
        assert body["calibrated"] is calibrated
        best = body["configurations"][0]
        assert best["concurrency"] >= 1 and best["binding"] in (
            "prefill compute",
            "decode compute",
            "KV capacity",
            "transfer",
            "queueing",
        )
        assert best["prediction"]["ttft_s"] <= 2 and best["prediction"]["itl_s"] <= 0.05


def test_calibration_prompts_span_a_prefill_step_and_stay_short_on_cpu():
    from recipectl.commands.calibrate import calibration_lengths

    assert calibration_lengths(32768, 8192, 32, cpu=False) == [256, 1024, 4096]
    assert calibration_lengths(4096, 4096, 32, cpu=True) == [32, 128, 512]
    with pytest.raises(RecipectlError):  # no room for three lengths a prompt may have
        calibration_lengths(100, None, 8, cpu=False)


def test_decode_residents_count_the_requests_decoding_together_not_the_users():
    """Four users behind one prefill: while one decodes the others may still wait for their
    prompt, and decode's step time saw fewer than four."""
    from recipectl.bench.probe import PointResult, Sample

    together = PointResult(
        isl=1,
        osl=9,
        concurrency=2,
        samples=[
            Sample(ttft_s=1, itl_s=0.1, output_tokens=9, e2e_s=2, start_s=0),
            Sample(ttft_s=1, itl_s=0.1, output_tokens=9, e2e_s=2, start_s=0),
        ],
    )
    assert together.decode_residents == pytest.approx(2)
    queued = PointResult(
        isl=1,
        osl=9,
        concurrency=2,
        samples=[  # the second decodes after the first
            Sample(ttft_s=1, itl_s=0.1, output_tokens=9, e2e_s=2, start_s=0),
            Sample(ttft_s=2, itl_s=0.1, output_tokens=9, e2e_s=3, start_s=0),
        ],
    )
    assert queued.decode_residents == pytest.approx(1)
    half = PointResult(
        isl=1,
        osl=9,
        concurrency=2,
        samples=[
            Sample(ttft_s=1, itl_s=0.1, output_tokens=9, e2e_s=3, start_s=0),
            Sample(ttft_s=2, itl_s=0.1, output_tokens=9, e2e_s=4, start_s=0),
        ],
    )
    assert half.decode_residents == pytest.approx(1.5)


def test_a_wave_decodes_together_so_itl_is_that_of_the_waves_requests_per_decode_endpoint():
    m = model(prefill=(0.5, 0.0), decode=(0.01, 0.01, 0.0))
    p = predict(m, PRE, DEC, isl=100, osl=10, concurrency=8)
    assert p.decode_residents == 8 and p.itl_s == pytest.approx(m.decode.itl_s(8, 105))
    two = predict(m, PRE, DEC.model_copy(update={"endpoints": 2}), isl=100, osl=10, concurrency=7)
    assert two.decode_residents == 4  # the router spreads 7 over 2: the fuller endpoint sets the pace


def test_a_wave_batches_its_prompts_at_prefill_a_steps_overhead_each():
    """Four prompts of 1,000 tokens in one prefill endpoint's steps of 2,000 tokens: two steps,
    each with its overhead, and a request waits for the wave's other prompts."""
    m = model(prefill=(0.02, 50e-6))
    pre = PRE.model_copy(update={"tokens_per_step": 2000})
    four = predict(m, pre, DEC, isl=1000, osl=8, concurrency=4)
    assert four.prefill_s == pytest.approx(0.02 + 0.05)
    assert four.queue_s + four.prefill_s == pytest.approx(2 * 0.02 + 4000 * 50e-6)
    unbounded = predict(m, PRE, DEC, isl=1000, osl=8, concurrency=4)
    assert unbounded.queue_s + unbounded.prefill_s == pytest.approx(0.02 + 4000 * 50e-6)
    halves = predict(m, pre.model_copy(update={"endpoints": 2}), DEC, isl=1000, osl=8, concurrency=4)
    assert halves.queue_s == pytest.approx(0.05)  # two prompts per endpoint, in one step


def measure_against_fakes(calibrate, progress=lambda _: None) -> dict:
    """calibrate.measure on the local recipe's three lengths, 1 + 1, against the router "R" and the
    prefill endpoint "P" of whatever fake run_point the test put in its place."""
    return calibrate.measure(
        "R",
        "P",
        "m",
        vocab_size=100,
        lengths=[32, 128, 512],
        prefill_shape=PRE,
        decode_shape=DEC,
        device="CPU",
        progress=progress,
    )


def test_calibrations_decode_points_have_enough_gaps_and_five_waves(monkeypatch):
    """calibrate's routed points stream 32 tokens (31 gaps a request: with 7 the CPU engine's
    single-user ITL ranged 12-22 ms from one request to the next) and its concurrency-4 points
    send 20 requests (five waves), each after a warm-up at the point's concurrency: one wave at one
    user, two at four."""
    import recipectl.commands.calibrate as calibrate
    from recipectl.bench.probe import PointResult, Sample

    calls = []

    def fake_run_point(url, model, *, isl, osl, concurrency, num_requests, vocab_size, seed=0, stream=True):
        calls.append((url, isl, osl, concurrency, num_requests))
        samples = [
            Sample(
                ttft_s=0.01 + 1e-5 * isl, itl_s=0.005 if osl > 1 else None, output_tokens=osl, e2e_s=0.01 + 0.005 * osl
            )
            for _ in range(num_requests)
        ]
        return PointResult(isl=isl, osl=osl, concurrency=concurrency, samples=samples, duration_s=1.0)

    monkeypatch.setattr(calibrate, "run_point", fake_run_point)
    measure_against_fakes(calibrate)
    measured = calls[1::2]  # each point's warm-up comes first
    routed = [c for c in measured if c[0] == "R"]
    assert [c[2] for c in routed] == [32] * 5
    assert [(c[3], c[4]) for c in routed] == [(1, 5)] * 3 + [(4, 20)] * 2
    assert all(w[3] == m[3] and w[4] >= m[3] for w, m in zip(calls[0::2], measured, strict=True))
    assert [w[4] for w in calls[0::2] if w[0] == "R" and w[3] == 4] == [8, 8]


def test_one_disturbed_wave_does_not_move_a_concurrency_point(monkeypatch):
    """A wave's requests decode together, so a disturbance on the host (seen on the CPU: 83 ms
    at 2.8 users where the held-out points measured 40-47 ms) slows all four: the point's ITL is
    still the undisturbed waves'."""
    import recipectl.commands.calibrate as calibrate
    from recipectl.bench.probe import PointResult, Sample

    def fake_run_point(url, model, *, isl, osl, concurrency, num_requests, vocab_size, seed=0, stream=True):
        itls = [0.04] * num_requests
        if concurrency == 4:
            itls[:4] = [0.083] * 4  # the first wave, disturbed
        samples = [
            Sample(ttft_s=0.01, itl_s=itl if osl > 1 else None, output_tokens=osl, e2e_s=0.01 + itl * osl)
            for itl in itls
        ]
        return PointResult(isl=isl, osl=osl, concurrency=concurrency, samples=samples, duration_s=1.0)

    monkeypatch.setattr(calibrate, "run_point", fake_run_point)
    got = measure_against_fakes(calibrate)
    assert [p["itl_s"] for p in got["fit_points"]["decode"]] == [0.04] * 5


def fake_with_disturbed_points(calibrate, monkeypatch, measured: dict[tuple[int, int], list[dict]]) -> list[tuple]:
    """run_point replaced: every point steady (TTFT 0.2 s, ITL 24 ms) but those of ``measured``,
    (isl, concurrency) -> each measurement's "ttft" or "itl" lists (requests in the order they
    finished). Returns the calls, (url, isl, concurrency, requests, seed); a warm-up's seed is 10,000
    up."""
    from recipectl.bench.probe import PointResult, Sample

    calls: list[tuple] = []
    left = {at: iter(ms) for at, ms in measured.items()}

    def fake_run_point(url, model, *, isl, osl, concurrency, num_requests, vocab_size, seed=0, stream=True):
        calls.append((url, isl, concurrency, num_requests, seed))
        m = next(left[(isl, concurrency)]) if (isl, concurrency) in left and url == "R" and seed < 10_000 else {}
        ttfts, itls = m.get("ttft", [0.2] * num_requests), m.get("itl", [0.024] * num_requests)
        samples = [
            Sample(ttft_s=t, itl_s=itl if osl > 1 else None, output_tokens=osl, e2e_s=t + itl * osl)
            for t, itl in zip(ttfts, itls, strict=True)
        ]
        return PointResult(isl=isl, osl=osl, concurrency=concurrency, samples=samples, duration_s=1.0)

    monkeypatch.setattr(calibrate, "run_point", fake_run_point)
    return calls


def measurements(calls: list[tuple], isl: int, concurrency: int) -> int:
    """How many times the router was measured at (isl, concurrency), warm-ups not counted."""
    return len([c for c in calls if c[:3] == ("R", isl, concurrency) and c[4] < 10_000])


def test_a_concurrency_point_the_host_slowed_halfway_is_measured_again_and_the_steady_one_fitted(monkeypatch):
    """The CPU host's run j (docs/sla-planner.md): the four-user point at 128 tokens measured
    30 ms in its first half and 38 ms in its second, and the fit put decode's cost per resident token
    at 10x the next calibration's: ITLs predicted 20-31% long."""
    import recipectl.commands.calibrate as calibrate

    unsteady = [0.030] * 10 + [0.038] * 10
    calls = fake_with_disturbed_points(calibrate, monkeypatch, {(128, 4): [{"itl": unsteady}, {"itl": [0.024] * 20}]})
    got = measure_against_fakes(calibrate)
    assert measurements(calls, 128, 4) == 2
    assert [p["itl_s"] for p in got["fit_points"]["decode"]] == [0.024] * 5
    set_aside = [p for p in got["points"] if p["kind"] == "set_aside"]
    assert [p["itl_s"] for p in set_aside] == [unsteady]  # kept in the file, not fitted


def test_a_single_user_point_with_stalled_first_tokens_is_measured_again(monkeypatch):
    """Run k: three of the 32-token point's five first tokens stalled (0.38-0.77 s against 0.14 s),
    the transfer's latency was fitted at 113 ms and every held-out TTFT predicted 14-76% long."""
    import recipectl.commands.calibrate as calibrate

    stalled = [0.382, 0.768, 0.148, 0.669, 0.140]
    calls = fake_with_disturbed_points(calibrate, monkeypatch, {(32, 1): [{"ttft": stalled}, {"ttft": [0.2] * 5}]})
    got = measure_against_fakes(calibrate)
    assert measurements(calls, 32, 1) == 2
    assert measurements(calls, 128, 1) == 1
    assert [p["ttft_s"] for p in got["points"] if p["kind"] == "set_aside"] == [stalled]
    # the transfer is fitted from the steady measurement: each point's leftover alike
    leftovers = [p["seconds"] for p in got["fit_points"]["transfer"]]
    assert max(leftovers) - min(leftovers) < 0.05


def test_a_single_user_point_with_two_slow_first_tokens_of_five_is_measured_again(monkeypatch):
    """Run d of the CPU's 256-token prefill steps: two of the 128-token point's five first tokens
    at 180 and 323 ms against 85-121; its median 43% above the fastest fitted the link at 3.3 MB/s
    (every held-out TTFT 37-56% long). A point within 30% of its fastest is fitted as it is."""
    import recipectl.commands.calibrate as calibrate

    slow = [0.323, 0.086, 0.180, 0.085, 0.121]
    again = [0.09, 0.085, 0.088, 0.087, 0.095]
    calls = fake_with_disturbed_points(calibrate, monkeypatch, {(128, 1): [{"ttft": slow}, {"ttft": again}]})
    got = measure_against_fakes(calibrate)
    assert measurements(calls, 128, 1) == 2
    assert [p["ttft_s"] for p in got["points"] if p["kind"] == "set_aside"] == [slow]
    assert [
        p["ttft_s"] for p in got["points"] if p["kind"] == "routed" and p["isl"] == 128 and p["concurrency"] == 1
    ] == [again]
    steady = [0.110, 0.086, 0.100, 0.085, 0.121]  # the median 18% above the fastest
    calls = fake_with_disturbed_points(calibrate, monkeypatch, {(128, 1): [{"ttft": steady}]})
    got = measure_against_fakes(calibrate)
    assert measurements(calls, 128, 1) == 1 and not [p for p in got["points"] if p["kind"] == "set_aside"]


def test_a_steady_point_is_measured_once_and_the_faster_of_two_disturbed_kept(monkeypatch):
    import recipectl.commands.calibrate as calibrate

    calls = fake_with_disturbed_points(calibrate, monkeypatch, {(128, 4): [{"itl": [0.024] * 10 + [0.026] * 10}]})
    measure_against_fakes(calibrate)
    assert measurements(calls, 128, 4) == 1  # 8% apart: steady
    assert measurements(calls, 32, 1) == 1

    slower, faster = [0.020] * 10 + [0.040] * 10, [0.024] * 10 + [0.030] * 10
    fake_with_disturbed_points(calibrate, monkeypatch, {(128, 4): [{"itl": slower}, {"itl": faster}]})
    got = measure_against_fakes(calibrate)
    assert got["fit_points"]["decode"][-1]["itl_s"] == pytest.approx(0.027)  # the median of the faster
    assert calibrate.halves_apart([0.03] * 3) == 0  # too few requests to halve: steady


def test_a_steady_measurement_a_little_slower_than_a_disturbed_one_is_fitted(monkeypatch):
    """Run m's four-user point at 128 tokens: disturbed at a median of 25.2 ms, then steady at
    25.4: the steady one, not the disturbed one 1% faster."""
    import recipectl.commands.calibrate as calibrate

    disturbed, steady = [0.020] * 10 + [0.030] * 10, [0.0254] * 20
    fake_with_disturbed_points(calibrate, monkeypatch, {(128, 4): [{"itl": disturbed}, {"itl": steady}]})
    got = measure_against_fakes(calibrate)
    assert got["fit_points"]["decode"][-1]["itl_s"] == pytest.approx(0.0254)
    assert not any("disturbed" in p for p in got["points"])


def test_a_host_that_slowed_and_stayed_slow_is_not_fitted_and_a_disturbed_fit_is_marked(monkeypatch):
    """The first measurement slowed halfway; the second, as even as it is slow, is steadier by its
    spread but no truer: the faster one is fitted, marked disturbed, and calibrate warns."""
    import recipectl.commands.calibrate as calibrate

    halfway = [0.14, 0.14, 0.30, 0.30, 0.30]
    fake_with_disturbed_points(calibrate, monkeypatch, {(32, 1): [{"ttft": halfway}, {"ttft": [0.41] * 5}]})
    said: list[str] = []
    got = measure_against_fakes(calibrate, progress=said.append)
    [fitted] = [p for p in got["points"] if p["kind"] == "routed" and p["isl"] == 32 and p["concurrency"] == 1]
    assert fitted["ttft_s"] == halfway
    assert "above its fastest" in fitted["disturbed"]
    assert [p["ttft_s"] for p in got["points"] if p["kind"] == "set_aside"] == [[0.41] * 5]
    assert any(line.startswith("warning: through the router, 32 tokens") for line in said)


def test_decode_is_fitted_at_the_users_per_decode_endpoint_the_prediction_uses():
    """On the CPU engine a concurrency-4 point's requests overlapped 2.4-3.8 at a time; fitted at
    that count and predicted at 4, each request's cost was multiplied past what was measured (ITL
    22-70% long at four users in every CPU run). The fit takes the point's users per decode
    endpoint, so the prediction at the calibration's own point is what it measured."""
    from recipectl.commands.calibrate import fit_calibration

    fitted, fit_points = fit_calibration(calibration_points(), prefill_shape=PRE, decode_shape=DEC, device="CPU")
    assert [p["concurrency"] for p in fit_points["decode"]] == [1, 1, 1, 4, 4]
    assert fitted.decode.itl_s(4, 32 + 16) == pytest.approx(0.040, rel=0.03)
    # two decode endpoints: four users are two per endpoint
    _, two = fit_calibration(
        calibration_points(), prefill_shape=PRE, decode_shape=DEC.model_copy(update={"endpoints": 2}), device="CPU"
    )
    assert [p["concurrency"] for p in two["decode"]] == [1, 1, 1, 2, 2]


def test_four_users_on_h200_wait_for_their_wave_as_the_calibration_measured():
    """The H200 calibration's own four-user points (docs/sla-accuracy/h200-9b-1p1d.json): four
    requests sent together got their first tokens within 1 ms of each other, 0.55 s (512 tokens)
    and 0.97 s (2,048) after they were sent, against 0.15 s and 0.29 s for one user."""
    path = Path(__file__).resolve().parent.parent / "recipes/h200/qwen3.5-9b-pd-1gpu.yaml"
    shapes, _, _ = role_shapes(load_variant(str(path), None).recipe, str(path))
    run = json.loads((path.parent.parent.parent / "docs/sla-accuracy/h200-9b-1p1d.json").read_text())
    m = PerfModel.model_validate(run["calibration"]["model"])
    four = [p for p in run["calibration"]["points"] if p["kind"] == "routed" and p["concurrency"] == 4]
    assert len(four) == 2
    for point in four:
        ttfts = point["ttft_s"]
        assert max(ttfts) - min(ttfts) < 0.002  # one wave
        p = predict(m, shapes["prefill"], shapes["decode"], isl=point["isl"], osl=point["osl"], concurrency=4)
        assert p.ttft_s == pytest.approx(sum(ttfts) / len(ttfts), rel=0.10)


def test_the_transfer_is_a_queue_so_users_wait_for_each_others_kv():
    """Decode pulls one request's KV and GDN state after another: with a slow link, four users
    wait four transfers for a first token (H200: 0.97 s against 0.29 s of parts at 2,048 tokens),
    where a latency alone would have kept TTFT at the parts."""
    m = model(prefill=(0.01, 0.0), decode=(0.005, 0.0, 0.0), transfer=(0.0, 5e6))
    one = predict(m, PRE, DEC, isl=1000, osl=32, concurrency=1)
    four = predict(m, PRE, DEC, isl=1000, osl=32, concurrency=4)
    assert one.transfer_s == pytest.approx(four.transfer_s) and one.transfer_s > 0.2
    assert one.transfer_wait_s == 0
    assert four.transfer_wait_s > 2 * one.transfer_s > four.queue_s  # waiting at the link, not at prefill
    assert four.ttft_s > 3 * one.ttft_s
    assert four.ttft_s == pytest.approx(
        four.queue_s + four.prefill_s + four.transfer_wait_s + four.transfer_s + four.first_step_s
    )
    # a second decode endpoint pulls in parallel
    two = predict(m, PRE, DEC.model_copy(update={"endpoints": 2}), isl=1000, osl=32, concurrency=4)
    assert two.transfer_wait_s < four.transfer_wait_s
    sla = Sla(ttft_s=four.ttft_s * 0.9)
    assert binding_constraint(m, sla, PRE, DEC, isl=1000, osl=32, concurrency=3, capacity=None) == "transfer"


def test_several_prefill_endpoints_feeding_one_decode_endpoint_give_a_range_and_its_midpoint():
    """Two prefill endpoints into one decode endpoint: the wave's transfers lie between one after
    another and both sources at once (on one H200: 62-96% of serial), so TTFT is their midpoint
    and the range is reported; one prefill endpoint has no range."""
    m = model(prefill=(0.01, 0.0), decode=(0.005, 0.0, 0.0), transfer=(0.0, 5e6))
    one_source = predict(m, PRE, DEC, isl=1000, osl=32, concurrency=4)
    assert one_source.transfer_sources == 1
    assert one_source.ttft_low_s == one_source.ttft_s == one_source.ttft_high_s
    two = predict(m, PRE.model_copy(update={"endpoints": 2}), DEC, isl=1000, osl=32, concurrency=4)
    t = two.transfer_s
    assert two.transfer_sources == 2
    assert two.ttft_high_s - two.ttft_low_s == pytest.approx(2 * t)  # 4 transfers one after another, or 2
    assert two.ttft_s == pytest.approx((two.ttft_low_s + two.ttft_high_s) / 2)
    assert two.ttft_s == pytest.approx(two.queue_s + two.prefill_s + two.transfer_wait_s + t + two.first_step_s)
    # one user comes from one source whatever the prefill endpoints
    alone = predict(m, PRE.model_copy(update={"endpoints": 2}), DEC, isl=1000, osl=32, concurrency=1)
    assert alone.transfer_sources == 1 and alone.ttft_low_s == alone.ttft_high_s


def test_servers_sharing_a_gpu_are_ranked_as_laid_out_and_counted_once():
    """rank(laid_out=...): the recipe's own endpoints only, on the devices it lays them on: the
    same prediction as on GPUs of their own, its throughput over the devices it uses."""
    m = model()
    sla = Sla(ttft_s=2.0, itl_s=0.05)
    (shared,) = rank(m, sla, PRE, DEC, isl=4000, osl=50, gpus=1, laid_out=(1, 1))
    own = next(c for c in rank(m, sla, PRE, DEC, isl=4000, osl=50, gpus=2) if c.prefill_endpoints == 1)
    assert (shared.prefill_endpoints, shared.decode_endpoints, shared.gpus) == (1, 1, 1)
    assert shared.concurrency == own.concurrency and shared.prediction.ttft_s == own.prediction.ttft_s
    assert shared.prediction.tps_per_gpu == pytest.approx(2 * own.prediction.tps_per_gpu)


def test_plan_sla_on_a_recipe_whose_roles_share_a_gpu_plans_it_as_laid_out():
    """recipes/h200/qwen3.5-9b-pd-1gpu.yaml puts both servers on GPU 0: planned as it is (what a
    calibration of it measured), where plan used to refuse it ("--gpus 1: ... need 2"); --gpus
    ranks layouts on GPUs of their own."""
    r = cli("plan", "recipes/h200/qwen3.5-9b-pd-1gpu.yaml", "--sla", "ttft=2s,itl=50ms")
    assert r.returncode == 0, r.stdout + r.stderr
    text = " ".join(r.stdout.split())
    assert "planned as the recipe lays its servers out, sharing GPUs (GPU 0: prefill-0 0.45 + decode-0 0.45)" in text
    assert "--gpus N ranks layouts on GPUs of their own" in text
    # what the prediction is of: users who start together; out of step, on a GPU both roles share,
    # one H200 measured another TTFT and ITL (docs/sla-planner.md)
    assert "predicted for users who start together" in text and '"Users out of step"' in text
    # uncalibrated: the measured bounds are of calibrated predictions, so only that they differ,
    # and how to measure the user's own deployment
    assert "were measured at another TTFT and ITL than users together" in text
    assert "calibrate, then recipectl plan recipes/h200/qwen3.5-9b-pd-1gpu.yaml --sla ... --check --out-of-step" in text
    j = json.loads(cli("plan", "recipes/h200/qwen3.5-9b-pd-1gpu.yaml", "--sla", "ttft=2s", "--format", "json").stdout)
    assert j["gpus"] == 1 and j["shared_gpus"] == ["GPU 0: prefill-0 0.45 + decode-0 0.45"]
    assert (j["users_start"], j["regime"]) == ("together", "waves")
    assert [(c["prefill_endpoints"], c["decode_endpoints"], c["gpus"]) for c in j["configurations"]] == [(1, 1, 1)]
    two = json.loads(
        cli(
            "plan", "recipes/h200/qwen3.5-9b-pd-1gpu.yaml", "--sla", "ttft=2s", "--gpus", "2", "--format", "json"
        ).stdout
    )
    assert two["shared_gpus"] == [] and two["configurations"][0]["gpus"] == 2
    assert two["regime"] == "pipeline"
    own = cli("plan", "recipes/h200/qwen3.5-9b-pd-1gpu.yaml", "--sla", "ttft=2s,itl=50ms", "--gpus", "2")
    assert "users who start together" not in " ".join(own.stdout.split())


def test_plan_sla_on_the_cpu_says_its_prediction_is_of_users_who_start_together():
    """The CPU platform is predicted in waves, of users who start together (docs/sla-planner.md,
    "Users out of step")."""
    r = cli("plan", str(LOCAL_RECIPE), "--sla", "ttft=30s,itl=1s", "--format", "json", timeout=120)
    j = json.loads(r.stdout)
    assert (j["users_start"], j["regime"], j["platform"]) == ("together", "waves", "cpu")
    text = " ".join(cli("plan", str(LOCAL_RECIPE), "--sla", "ttft=30s,itl=1s", timeout=120).stdout.split())
    assert "predicted for users who start together" in text
    # the GPU's measured bounds are not this platform's
    assert "on the CPU platform, users out of step were measured within the spread of users together" in text
    assert "H200" not in text


def test_the_out_of_step_line_gives_the_measured_bounds_only_for_a_calibrated_plan_on_shared_gpus():
    from recipectl.commands.plan import _out_of_step_line

    calibrated = {"platform": "gpu", "calibrated": True}
    line = _out_of_step_line(calibrated, "r.yaml")
    assert "a TTFT at most 12% above the prediction and down to 24% of it, and an ITL up to 1.66x" in line
    assert "two prefill endpoints beside decode: down to 32%, up to 2.62x" in line
    assert "recipectl plan r.yaml --sla ... --check --out-of-step measures yours" in line
    assert "%" not in _out_of_step_line({"platform": "gpu", "calibrated": False}, "r.yaml")
    assert "H200" not in _out_of_step_line({"platform": "cpu", "calibrated": True}, "r.yaml")


def test_the_picture_of_servers_sharing_a_gpu_counts_it_once(tmp_path):
    """The chosen configuration's star lies on its line: the curve's throughput per device is
    over the one GPU too."""
    png = tmp_path / "p.png"
    r = cli("plan", "recipes/h200/qwen3.5-9b-pd-1gpu.yaml", "--sla", "ttft=2s", "--plot", str(png), "--format", "json")
    assert r.returncode == 0, r.stderr
    j = json.loads(r.stdout)
    (chosen,) = j["configurations"]
    (line,) = j["curves"]
    at = next(p for p in line["points"] if p["concurrency"] == chosen["concurrency"])
    assert at["tps_per_gpu"] == pytest.approx(chosen["prediction"]["tps_per_gpu"])


def test_the_plan_table_marks_a_ttft_from_several_sources():
    """Where the roles share a device (the CPU platform, a GPU both use), a wave's transfers from
    several prefill endpoints lie between all at once and one after another: the table marks it."""
    r = cli("plan", "recipes/local/tiny-hybrid-cpu.yaml", "--sla", "ttft=2s,itl=50ms", "--gpus", "3")
    assert r.returncode == 0, r.stdout + r.stderr
    assert " ~" in r.stdout and "midway between all in" in r.stdout.replace("\n", " ")
    j = json.loads(
        cli("plan", "recipes/local/tiny-hybrid-cpu.yaml", "--sla", "ttft=2s", "--gpus", "3", "--format", "json").stdout
    )
    several = [c["prediction"] for c in j["configurations"] if c["prediction"]["transfer_sources"] > 1]
    assert several and all(p["ttft_low_s"] < p["ttft_s"] < p["ttft_high_s"] for p in several)


def test_the_plan_table_marks_a_ttft_whose_wave_takes_several_prefill_steps_on_cores_of_their_own():
    """On the CPU, two prompts of 3,000 tokens take two steps of 4,096: how much of the wave's steps
    after its own a prompt waits for is by host, so TTFT is a range and the table says why."""
    args = ("plan", "recipes/local/tiny-hybrid-cpu.yaml", "--sla", "ttft=2s,itl=50ms", "--isl", "3000", "--osl", "16")
    r = cli(*args)
    assert r.returncode == 0, r.stdout + r.stderr
    assert " ~" in r.stdout and "midway between its own last step and the wave's" in r.stdout.replace("\n", " ")
    p = json.loads(cli(*args, "--format", "json").stdout)["configurations"][0]["prediction"]
    assert p["transfer_sources"] == 1 and p["wave_after_own_s"] > 0
    assert p["ttft_low_s"] < p["ttft_s"] < p["ttft_high_s"]


def test_on_gpus_of_their_own_the_transfers_latency_is_paid_at_once_and_no_range_is_shown():
    """--gpus ranks endpoints on GPUs of their own: the pipeline (perf._pipelined), whose wave pays a
    transfer's latency once whatever the sources (two H200s, 2 + 1: TTFT -21% to +14%)."""
    j = json.loads(
        cli(
            "plan", "recipes/h200/qwen3.5-9b-pd-1gpu.yaml", "--sla", "ttft=2s", "--gpus", "3", "--format", "json"
        ).stdout
    )
    twos = [c for c in j["configurations"] if c["prefill_endpoints"] == 2]
    assert twos and all(c["prediction"]["transfer_sources"] == 1 for c in twos)
    assert all(c["prediction"]["ttft_low_s"] == c["prediction"]["ttft_s"] for c in twos)


@pytest.mark.parametrize(
    "recipe, tokens",
    [("recipes/h200/qwen3.5-9b-pd-1gpu.yaml", 16384), ("recipes/local/tiny-hybrid-cpu.yaml", 4096)],
)
def test_prefills_step_is_the_recipes_token_budget(recipe, tokens):
    path = str(Path(__file__).resolve().parent.parent / recipe)
    shapes, _, _ = role_shapes(load_variant(path, None).recipe, path)
    assert shapes["prefill"].tokens_per_step == tokens


# ----- the prefill steps of a hybrid model with prefix caching (engine fact hybrid-prefill-split-at-last-block)
SPLIT = PRE.model_copy(update={"tokens_per_step": 4096, "split": PromptSplit(block=128)})


def variant(shape: RoleShape, **flags) -> RoleShape:
    """``shape`` with its prompt split's flags changed (a release's variant of the split)."""
    return shape.model_copy(update={"split": shape.split.model_copy(update=flags)})


@pytest.mark.parametrize(
    "isl, whole_blocks, steps",
    [
        (96, True, 1),  # within a block: one step
        (160, True, 2),  # 128, then 32 (the CPU engine's measured case)
        (320, True, 2),  # to the last boundary in one step (256), then 64: not a step per block
        (128, True, 1),  # one block: no boundary before its last token
        (256, True, 2),  # whole blocks, vLLM 0.32+: split before the last token's block (128 + 128)
        (256, False, 1),  # before 0.32 a prompt of whole blocks is prefilled in one step
    ],
)
def test_a_hybrid_prompt_is_prefilled_to_its_last_block_boundary_then_the_rest(isl, whole_blocks, steps):
    assert wave_prefill_steps(1, isl, variant(SPLIT, whole_blocks=whole_blocks)) == steps
    assert wave_prefill_steps(1, isl, SPLIT.model_copy(update={"split": None})) == 1


def test_prompts_sent_together_share_both_steps_and_a_budget_cut_ends_on_a_block():
    assert wave_prefill_steps(2, 160, SPLIT) == 2  # 128 + 128, then 32 + 32
    small = SPLIT.model_copy(update={"tokens_per_step": 200})
    assert wave_prefill_steps(1, 320, small) == 3  # 128 (200 cut back to the block), 128 (to 256), 64
    assert wave_prefill_steps(1, 320, small.model_copy(update={"split": None})) == 2  # 200 + 120
    narrow = SPLIT.model_copy(update={"tokens_per_step": 100})
    assert wave_prefill_steps(1, 160, narrow) == 3  # a block wider than a step: 100, 28 (to 128), 32
    assert prompt_chunk(0, 320, 200, small) == 128  # the budget's cut moved back to a block boundary
    assert prompt_chunk(0, 320, 44, small) == 0  # less than a block left in a step that holds one: next step
    assert prompt_chunk(0, 160, 100, narrow) == 100  # a step narrower than a block: sub-block chunks


@settings(deadline=None)  # the reference, prompt by prompt, takes a while on the longest waves
@given(
    block=st.sampled_from([16, 64, 100, 128, 1088]),
    budget=st.sampled_from([7, 64, 100, 128, 200, 1000, 2048, 16384]),
    isl=st.integers(1, 3000),
    requests=st.integers(1, 120),
    whole_blocks=st.booleans(),
    cuts_aligned_to_end=st.booleans(),
    last_chunk_whole=st.booleans(),
)
def test_a_waves_steps_worked_out_by_runs_of_prompts_are_the_steps_one_prompt_at_a_time(
    block, budget, isl, requests, whole_blocks, cuts_aligned_to_end, last_chunk_whole
):
    """plan --sla counts waves of thousands of prompts by runs of alike prompts, skipping repeats;
    prompt by prompt (fill_steps, what scripts/check-prefill-split.py holds to each vLLM release's
    own function) is the reference."""
    assume(requests * isl / budget <= 2000)
    split = PromptSplit(
        block=block,
        whole_blocks=whole_blocks,
        cuts_aligned_to_end=cuts_aligned_to_end,
        last_chunk_whole=last_chunk_whole,
    )
    shape = SPLIT.model_copy(update={"tokens_per_step": budget, "split": split})
    one_at_a_time = fill_schedule(requests, isl, budget, lambda done, left: prompt_chunk(done, isl, left, shape))
    assert one_at_a_time is not None
    assert wave_prefill_steps(requests, isl, shape) == one_at_a_time.steps
    # and where each prompt's last step ends: what a prompt waits for where decode runs beside prefill
    assert wave_schedule(requests, isl, shape) == one_at_a_time
    unsplit = shape.model_copy(update={"split": None})
    by_budget = fill_schedule(requests, isl, budget, lambda done, left: min(isl - done, left))
    assert wave_schedule(requests, isl, unsplit) == by_budget


def test_the_prefill_fit_and_the_prediction_count_the_split_steps():
    """A calibration's 512-token prompt took two steps, each with the step's overhead: the fit
    must not read that overhead as cost per token, and a prediction for 160 tokens pays it twice."""
    truth = PrefillCoeffs(overhead_s=0.04, per_token_s=1.7e-3)
    pts = [
        PrefillPoint(
            isl=n, seconds=truth.time_s(n, wave_prefill_steps(1, n, SPLIT)), steps=wave_prefill_steps(1, n, SPLIT)
        )
        for n in (32, 128, 512)
    ]
    fitted = fit_prefill(pts)
    assert fitted.overhead_s == pytest.approx(0.04) and fitted.per_token_s == pytest.approx(1.7e-3)
    m = model(prefill=(0.04, 1.7e-3))
    one = predict(m, SPLIT, DEC, isl=160, osl=8, concurrency=1)
    assert one.prefill_s == pytest.approx(2 * 0.04 + 160 * 1.7e-3)
    two = predict(m, SPLIT, DEC, isl=160, osl=8, concurrency=2)
    assert two.prefill_s + two.queue_s == pytest.approx(2 * 0.04 + 320 * 1.7e-3)


@pytest.mark.parametrize(
    "recipe, split_block",
    [
        ("recipes/local/tiny-hybrid-cpu.yaml", 128),  # prefix caching on by default at 0.32: align mode
        ("recipes/h200/qwen3.5-9b-pd-1gpu.yaml", None),  # the recipe turns prefix caching off
    ],
)
def test_a_recipes_prefill_splits_where_its_prefix_caching_makes_vllm_split(recipe, split_block):
    path = str(Path(__file__).resolve().parent.parent / recipe)
    shapes, _, _ = role_shapes(load_variant(path, None).recipe, path)
    split = shapes["prefill"].split
    assert (split.block if split else None) == split_block


def test_flashinfer_gdn_prefill_on_033_writes_the_state_mid_step_so_nothing_is_split():
    """vLLM 0.33 with FlashInfer's GDN prefill (auto on Hopper) exports the boundary's state from
    the step (engine fact hybrid-prefill-no-split-flashinfer-gdn); Triton still splits."""
    path = str(Path(__file__).resolve().parent.parent / "recipes/h200/qwen3.5-9b-pd-1gpu.yaml")
    base = load_variant(path, None).recipe
    spec = model_spec(base, Path(path).parent)

    def split(version: str, backend: str, prefix_caching: bool = True) -> PromptSplit | None:
        raw = base.model_dump(mode="json", exclude_none=True)
        raw["engine"]["vllm_version"] = version
        raw["prefill"]["enable_prefix_caching"] = prefix_caching
        raw["prefill"]["gdn_prefill_backend"] = backend
        recipe = type(base).model_validate(raw)
        return prompt_split(recipe, resolve_role(recipe, "prefill", None), spec, 1088)

    assert split("0.33.0", "flashinfer") == PromptSplit(block=1088, last_chunk_whole=True, checkpoint_alignment=64)
    assert split("0.33.0", "triton") == PromptSplit(block=1088)
    assert split("0.32.0", "flashinfer") == PromptSplit(block=1088)
    assert split("0.31.0", "flashinfer") == PromptSplit(block=1088, whole_blocks=False)
    assert split("0.26.0", "triton") == PromptSplit(block=1088, whole_blocks=False, cuts_aligned_to_end=False)
    assert split("0.32.0", "triton", prefix_caching=False) is None


def test_flashinfer_gdn_prefill_on_033_still_aligns_a_chunk_the_budget_cuts():
    """0.33's FlashInfer GDN prefill lifts the stop at the last boundary only for a prompt's last
    chunk that starts on a block: four 150-token prompts in 256-token steps take four steps (the
    second's 106 tokens wait for a block), not the three the budget alone would give."""
    fi = variant(SPLIT.model_copy(update={"tokens_per_step": 256}), last_chunk_whole=True)
    assert wave_prefill_steps(1, 160, fi) == 1  # not split at 128
    assert wave_prefill_steps(4, 150, fi) == 4
    assert wave_prefill_steps(4, 150, fi.model_copy(update={"split": None})) == 3
    narrow = variant(SPLIT.model_copy(update={"tokens_per_step": 100}), last_chunk_whole=True)
    assert prompt_chunk(228, 300, 100, narrow) == 28  # a last chunk starting mid-block: still to 256
    # the kernel writes the state only at a boundary a whole number of its alignment past the
    # chunk's start (block 96, alignment 64): 192 past it is, 96 is not
    odd = SPLIT.model_copy(
        update={"split": PromptSplit(block=96, last_chunk_whole=True, checkpoint_alignment=64), "tokens_per_step": 4096}
    )
    assert prompt_chunk(0, 200, 4096, odd) == 200  # boundary 192, 192 % 64 == 0: not split
    assert prompt_chunk(96, 300, 4096, odd) == 204  # boundary 288, 192 past the start: not split either
    assert prompt_chunk(96, 250, 4096, odd) == 96  # boundary 192, 96 past the start: split there
    assert prompt_chunk(0, 100, 4096, odd) == 96  # boundary 96, 96 % 64 != 0: split there


def test_before_027_a_budget_cut_past_the_last_boundary_is_not_moved_back_to_a_block():
    """vLLM 0.26 and older align a cut chunk only before the prompt's last boundary (engine fact
    hybrid-prefill-cuts-aligned-to-prompt-end): five 95-token prompts in 256-token steps take two
    steps there (95, 95, 66; 29, 95, 95) and three from 0.27 (the third prompt waits for a block)."""
    now = SPLIT.model_copy(update={"tokens_per_step": 256})
    before = variant(now, cuts_aligned_to_end=False, whole_blocks=False)
    assert wave_prefill_steps(5, 95, now) == 3
    assert wave_prefill_steps(5, 95, before) == 2
    assert prompt_chunk(0, 300, 200, before) == 128  # before the last boundary (256) a cut is aligned still


# ----- each role on GPUs of its own: the pipeline (perf._pipelined) ---------------------------------
OWN_PRE = PRE.model_copy(update={"tokens_per_step": 4096, "own_gpus": True})
OWN_DEC = DEC.model_copy(update={"own_gpus": True})


def test_a_wave_in_one_step_on_gpus_of_their_own_pays_the_transfer_latency_once():
    """Four prompts of 1,000 tokens fit the 4,096-token step: they end together and stay a wave; the
    four transfers' latency is paid at once, their bytes one after another (two H200s over NVLink:
    16 users at 512 tokens waited 223 ms where their prefill step took 216)."""
    m = model(transfer=(0.010, 1e9))
    p = predict(m, OWN_PRE, OWN_DEC, isl=1000, osl=8, concurrency=4)
    nbytes = 1000 * 1024 + (1 << 20)
    batch = 0.02 + 4000 * 50e-6
    assert p.ttft_s == pytest.approx(batch + 0.010 + 4 * nbytes / 1e9 + p.first_step_s)
    assert p.transfer_sources == 1 and p.ttft_low_s == p.ttft_high_s == p.ttft_s
    assert p.transfer_wait_s == pytest.approx(3 * nbytes / 1e9)  # the other three's bytes, one after another
    assert p.queue_s == pytest.approx(batch - p.prefill_s)
    # the same GPUs shared by both roles: the wave's transfers whole, one after another
    shared = predict(m, OWN_PRE.model_copy(update={"own_gpus": False}), DEC, isl=1000, osl=8, concurrency=4)
    assert shared.ttft_s == pytest.approx(batch + 4 * (0.010 + nbytes / 1e9) + shared.first_step_s)


def test_a_wave_of_several_steps_on_gpus_of_their_own_drifts_into_a_pipeline():
    """Eight prompts of 2,000 tokens take four steps of 4,096: the users drift apart, each prompt
    prefilled as it comes, waiting for the others' where they meet (a closed loop's queue, while
    the endpoint keeps up), and bound by the endpoint's batches where it does not (a short
    decode): two H200s, 3,072 tokens x 24 users measured 1,411 ms."""
    from recipectl.plan.perf import _queued

    m = model(transfer=(0.010, 1e9))
    alone = predict(m, OWN_PRE, OWN_DEC, isl=2000, osl=512, concurrency=1)
    kept_up = predict(m, OWN_PRE, OWN_DEC, isl=2000, osl=512, concurrency=8)
    away = kept_up.transfer_s + kept_up.first_step_s + 511 * kept_up.itl_s
    waited = _queued(8, kept_up.prefill_s, away)
    assert kept_up.ttft_s == pytest.approx(waited + kept_up.transfer_s + kept_up.first_step_s)
    assert alone.prefill_s < waited < 2 * alone.prefill_s
    bound = predict(m, OWN_PRE, OWN_DEC, isl=2000, osl=2, concurrency=8)
    batch = 4 * 0.02 + 16000 * 50e-6
    transfers = 0.010 + 8 * (2000 * 1024 + (1 << 20)) / 1e9
    assert bound.ttft_s == pytest.approx(batch + transfers + bound.first_step_s - bound.itl_s)
    # the wave model would have every user wait for all four steps
    wave = predict(m, PRE.model_copy(update={"tokens_per_step": 4096}), DEC, isl=2000, osl=512, concurrency=8)
    assert wave.ttft_s > 2 * kept_up.ttft_s


def test_on_cores_of_their_own_a_prompt_waits_for_half_the_steps_after_its_own_and_the_wave_for_its_last():
    """Two prompts of 384 tokens, steps of 256 and blocks of 128: the first ends in step 2 (256, then
    128 beside the second's first 128), the second in step 4. On the CPU, each role on cores of its
    own, the first user's first token comes after step 2 or later, by host: the wave's whole prefill
    predicted such waves 9-35% long on one host and within 8% on another. The prediction is the
    midpoint between each prompt's own last step and the wave's, the two its range. The next wave
    starts once the second has finished, so the throughput is the wave's."""
    from recipectl.plan.perf import OWN_CORES_WAVE_WAIT

    m = model(prefill=(0.07, 1.66e-3), transfer=(0.015, 1e9))
    pre = PRE.model_copy(update={"tokens_per_step": 256, "split": PromptSplit(block=128)})
    own = {"own_cores": True}
    assert wave_schedule(2, 384, pre) == (4, 2, 2 + 4, 512 + 768)
    shared = predict(m, pre, DEC, isl=384, osl=16, concurrency=2)
    apart = predict(m, pre.model_copy(update=own), DEC.model_copy(update=own), isl=384, osl=16, concurrency=2)
    first, second = 2 * 0.07 + 512 * 1.66e-3, 4 * 0.07 + 768 * 1.66e-3
    after_own = second - (first + second) / 2
    assert OWN_CORES_WAVE_WAIT == 0.5
    assert apart.wave_after_own_s == pytest.approx(after_own) and shared.wave_after_own_s == 0
    assert shared.ttft_s - apart.ttft_s == pytest.approx(0.5 * after_own)
    assert apart.ttft_high_s == pytest.approx(shared.ttft_s)
    assert apart.ttft_low_s == pytest.approx(shared.ttft_s - after_own)
    assert apart.total_tps == pytest.approx(shared.total_tps)
    # a prompt alone, or a wave that ends together: nothing after a prompt's own step, no range
    for c, isl in ((1, 640), (2, 160)):
        alone = predict(m, pre.model_copy(update=own), DEC.model_copy(update=own), isl=isl, osl=16, concurrency=c)
        assert alone.wave_after_own_s == pytest.approx(0, abs=1e-12)
        assert alone.ttft_s == pytest.approx(predict(m, pre, DEC, isl=isl, osl=16, concurrency=c).ttft_s)


def test_a_waves_schedule_of_thousands_of_prompts_skips_its_repeats_and_keeps_their_sums():
    """plan --sla asks for waves of thousands: the repeats skipped are summed as the steps between
    them were (prompt by prompt is the reference)."""
    pre = PRE.model_copy(update={"tokens_per_step": 256, "split": PromptSplit(block=128)})
    for requests, isl in ((3000, 160), (2500, 384), (4000, 100)):
        reference = fill_schedule(requests, isl, 256, lambda done, left, isl=isl: prompt_chunk(done, isl, left, pre))
        assert wave_schedule(requests, isl, pre) == reference


@pytest.mark.parametrize(
    "cores, own",
    [
        (("0", "1"), True),
        (("0-1", "2-3"), True),
        (("0-1", "1"), False),  # core 1 both roles'
        ((None, "1"), False),  # prefill's left to the engine, which may pick core 1
    ],
)
def test_cpu_roles_have_cores_of_their_own_where_none_is_the_other_roles(tmp_path, cores, own):
    text = Path(LOCAL_RECIPE).read_text()
    for was, core in zip(("  cpu_cores: ['0']", "  cpu_cores: ['1']"), cores, strict=True):
        assert was in text
        text = text.replace(was, "" if core is None else f"  cpu_cores: ['{core}']")
    path = tmp_path / "recipe.yaml"
    path.write_text(text)
    shapes, _, _ = role_shapes(load_variant(str(path), None).recipe, str(path))
    assert shapes["prefill"].own_cores is own and shapes["decode"].own_cores is own
    assert not shapes["prefill"].own_gpus


@pytest.mark.parametrize(
    "recipe, own",
    [
        ("recipes/h200/qwen3.5-9b-pd-2gpu.yaml", True),  # prefill GPU 0, decode GPU 1
        ("recipes/h200/qwen3.5-9b-pd-1gpu.yaml", False),  # both on GPU 0
        ("recipes/h200/qwen3.5-35b-a3b-pd.yaml", True),
        ("recipes/local/tiny-hybrid-cpu.yaml", False),  # the CPU platform: the wave, as measured
    ],
)
def test_a_role_has_gpus_of_its_own_where_no_server_of_the_other_role_uses_them(recipe, own):
    path = str(Path(__file__).resolve().parent.parent / recipe)
    shapes, _, _ = role_shapes(load_variant(path, None).recipe, path)
    assert shapes["prefill"].own_gpus is own and shapes["decode"].own_gpus is own


def test_a_calibration_whose_transfers_do_not_grow_with_their_bytes_keeps_the_devices_link():
    """Two H200s over NVLink: the routed points' transfers took 21, 11 and 14 ms for 43, 93 and 295
    MB, so the points do not pin the bandwidth; the CPU's 1 GB/s stood in and put 43-295 ms on each
    request (every TTFT predicted 2-3x long). The H200's own link stands in now."""
    from recipectl.commands.calibrate import fit_calibration

    run = json.loads((Path(__file__).resolve().parent.parent / X2_ONE).read_text())
    path = str(Path(__file__).resolve().parent.parent / "recipes/h200/qwen3.5-9b-pd-2gpu.yaml")
    shapes, _, _ = role_shapes(load_variant(path, None).recipe, path)
    points = run["calibration"]["points"]
    fitted, _ = fit_calibration(points, prefill_shape=shapes["prefill"], decode_shape=shapes["decode"], device="H200")
    assert fitted.transfer.bytes_per_s == 50e9 and 0.005 < fitted.transfer.latency_s < 0.02
    cpu, _ = fit_calibration(points, prefill_shape=shapes["prefill"], decode_shape=shapes["decode"], device="CPU")
    assert cpu.transfer.bytes_per_s == 1e9


X2_ONE = "docs/sla-accuracy/h200x2-9b-1p1d-2026-12-04.json"


def test_the_closed_loops_wait_is_none_alone_and_reaches_the_bottleneck_bound():
    from recipectl.plan.perf import _queued

    assert _queued(1, 0.2, 1.0) == 0.2
    waits = [_queued(n, 0.2, 1.0) for n in (2, 4, 8, 16, 32)]
    assert waits == sorted(waits) and waits[0] > 0.2
    # past saturation the halved wait falls short of the bound (64 users' prompts take 12.8 s, a
    # user is away 1 s): predict takes the bound there (the test above, its short decode)
    assert _queued(64, 0.2, 1.0) < 64 * 0.2 - 1.0


def test_the_pipelines_parts_add_up_to_its_ttft():
    """TTFT = prefill + queue + transfer + waiting for the link + decode's first step, in both of the
    pipeline's cases (binding_constraint names the largest part: a drifted wave's TTFT counted the
    whole wave's transfers as waiting it did not do, and "transfer" bound where queueing did)."""
    m = model(transfer=(0.010, 1e9))
    for isl, osl, c in [(1000, 8, 4), (2000, 512, 8), (2000, 2, 8), (3000, 64, 24), (500, 256, 1)]:
        p = predict(m, OWN_PRE, OWN_DEC, isl=isl, osl=osl, concurrency=c)
        parts = p.prefill_s + p.queue_s + p.transfer_s + p.transfer_wait_s + p.first_step_s
        assert parts == pytest.approx(p.ttft_s), (isl, osl, c)


def test_the_closed_loops_wait_is_the_fixed_point_of_its_mean_value_analysis():
    from recipectl.plan.perf import _queued

    for users, service, away in [(2, 0.2, 1.0), (8, 0.2, 1.0), (37, 0.05, 0.3), (500, 0.01, 2.0)]:
        a = 0.5 * (users - 1) / users
        queue = users / 2
        for _ in range(20000):
            response = service * (1 + a * queue)
            queue = 0.5 * queue + 0.5 * users * response / (response + away)
        assert _queued(users, service, away) == pytest.approx(service * (1 + a * queue), rel=1e-6)


def test_the_search_finds_the_users_past_the_drop_where_a_wave_splits():
    """On GPUs of each role's own one more user splits a wave that fit one prefill step, and the
    predicted TTFT drops (the users drift apart): the bisection alone stopped below the drop
    (9B on two H200s at 512 tokens, ttft=60ms: 1 user where 34 meet it)."""
    r = cli(
        "plan",
        "recipes/h200/qwen3.5-9b-pd-2gpu.yaml",
        "--sla",
        "ttft=60ms,itl=11.5ms",
        "--isl",
        "512",
        "--format",
        "json",
    )
    best = json.loads(r.stdout)["configurations"][0]
    assert best["concurrency"] == 34 and best["prediction"]["ttft_s"] <= 0.060, best


# ----- a calibration file's numbers: checked where it is read ------------------------------------
CALIBRATION_VALUES = [None, True, -1, 0, 0.5, 1e308, -1e308, float("inf"), float("-inf"), float("nan"), "x", [], {}]
CALIBRATION_FIELDS = [  # (path in the file, the versions that read it)
    ("model.prefill.overhead_s", None),
    ("model.decode.per_ctx_token_s", None),
    ("model.transfer.bytes_per_s", None),
    ("model.measured_users", None),
    ("fit_points.decode.0.concurrency", None),
    ("points.0.isl", 1),
    ("points.0.seconds.0", 1),
    ("points.3.concurrency", 1),
    ("points.3.itl_s.0", 1),
    ("points.6.concurrency", 1),
]


def _put(doc, path: str, value) -> None:
    *parents, last = [int(p) if p.isdigit() else p for p in path.split(".")]
    for p in parents:
        doc = doc[p]
    doc[last] = value


def test_an_infinite_users_count_in_a_calibration_is_refused_naming_the_field(tmp_path):
    """A calibration without measured_users is read from its fitted decode points: `.inf` there had
    overflowed (OverflowError, exit 3)."""
    cal = _calibration(tmp_path, LOCAL_RECIPE)
    doc = json.loads(cal.read_text())
    doc["model"].pop("measured_users", None)
    doc["fit_points"] = {"decode": [{"concurrency": float("inf"), "context": 40, "itl_s": 0.01}]}
    cal.write_text(json.dumps(doc))  # Python writes Infinity, as a hand edit to 1e999 reads
    r = cli("plan", str(LOCAL_RECIPE), "--sla", "ttft=2s", "--calibration", str(cal), timeout=120)
    assert r.returncode == 2, r.stderr
    assert f"{cal}: fit_points.decode.0.concurrency: input should be a finite number" in r.stderr, r.stderr
    assert "recipectl calibrate RECIPE -o" in r.stderr and "Traceback" not in r.stderr


@settings(max_examples=60, deadline=None)
@given(field=st.sampled_from(CALIBRATION_FIELDS), value=st.sampled_from(CALIBRATION_VALUES))
def test_no_value_in_a_calibration_field_is_an_internal_error(tmp_path_factory, field, value):
    """Each number read from a calibration file, given every kind of value: it is read, or refused
    (RecipectlError, exit 2) naming the file; never another exception."""
    from recipectl.commands.calibrate import CALIBRATION_VERSION, describe, read_calibration

    path, version = field
    cal = _calibration(tmp_path_factory.mktemp("cal"), LOCAL_RECIPE)
    doc = json.loads(cal.read_text())
    doc["points"] = calibration_points()
    doc["fit_points"] = {"decode": [{"concurrency": 4.0, "context": 48, "itl_s": 0.04}]}
    doc["calibration_version"] = version or CALIBRATION_VERSION
    _put(doc, path, value)
    cal.write_text(json.dumps(doc))
    current = describe(load_variant(str(LOCAL_RECIPE), None), str(LOCAL_RECIPE))
    try:
        got = read_calibration(str(cal), current, (PRE, DEC))
    except RecipectlError as e:
        assert e.exit_code == 2 and str(cal) in e.message
        return
    for coeffs in (got.prefill, got.decode, got.transfer):
        assert all(math.isfinite(v) and v >= 0 for v in coeffs.model_dump().values()), got
    assert got.measured_users is None or got.measured_users >= 1
