"""Users out of step (probe.run_point's stagger_s) and what they saw while all of them were
sending (PointResult.steady): the steady state a planner predicts, without the wave a closed loop
starts with when its users all send at once."""

from __future__ import annotations

import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from recipectl.bench.probe import PointResult, Sample, run_point


def sample(user: int, start: float, ttft: float, e2e: float, tokens: int = 11, itl: float = 0.1) -> Sample:
    return Sample(ttft_s=ttft, itl_s=itl, output_tokens=tokens, e2e_s=e2e, start_s=start, user=user)


def test_the_window_runs_from_the_last_users_first_send_to_the_first_users_last_answer():
    r = PointResult(isl=100, osl=11, concurrency=2)
    r.samples = [
        # user 0: three requests of 2 s from t=0; user 1: from t=1, two of 2 s and a slow third
        sample(0, 0.0, 1.5, 2.0),
        sample(0, 2.0, 0.5, 2.0),
        sample(0, 4.0, 0.5, 2.0),
        sample(1, 1.0, 0.9, 2.0),
        sample(1, 3.0, 0.7, 2.0),
        sample(1, 5.0, 0.6, 4.0),
    ]
    steady = r.steady()
    assert steady is not None
    assert steady.window_s == pytest.approx(5.0)  # from 1.0 (user 1's first) to 6.0 (user 0's last end)
    # the requests sent inside it: user 0's second and third, user 1's three (the first wave's
    # 1.5 s TTFT, sent at 0, is outside)
    assert steady.requests == 5
    assert steady.ttft_s == pytest.approx(0.6)
    # tokens: each request's 111 over its time, the part of it inside [1, 6]
    inside = 111 * (1.0 / 2 + 1 + 1 + 1 + 1) + 111 * (1.0 / 4)
    assert steady.total_tps == pytest.approx(inside / 5.0)


def test_no_window_where_a_user_sent_nothing_or_all_were_never_sending_together():
    r = PointResult(isl=10, osl=2, concurrency=2, samples=[sample(0, 0.0, 0.1, 1.0)])
    assert r.steady() is None  # the second user sent nothing
    r = PointResult(isl=10, osl=2, concurrency=2, samples=[sample(0, 0.0, 0.1, 1.0), sample(1, 2.0, 0.1, 1.0)])
    assert r.steady() is None  # user 0 was done before user 1 started
    # all sending from 0.5 to 1.0, but user 0 sent nothing in it: too short to say what both saw
    r = PointResult(isl=10, osl=2, concurrency=2, samples=[sample(0, 0.0, 0.1, 1.0), sample(1, 0.5, 0.1, 1.0)])
    assert r.steady() is None
    assert PointResult(isl=10, osl=2, concurrency=0, samples=[sample(0, 0.0, 0.1, 1.0)]).steady() is None
    r = PointResult(isl=10, osl=2, concurrency=1, samples=[sample(0, 0.0, 0.1, float("inf"))])
    assert r.steady() is None


@settings(max_examples=300, deadline=None)
@given(
    users=st.integers(min_value=1, max_value=6),
    per_user=st.integers(min_value=1, max_value=6),
    cycle=st.floats(min_value=0.01, max_value=10),
    ttft_share=st.floats(min_value=0.0, max_value=1.0),
)
def test_a_periodic_closed_loop_measures_its_own_rate(users, per_user, cycle, ttft_share):
    """Users out of step by a cycle / users each, back to back: the window's throughput is
    users x tokens / cycle and its TTFT each request's, whatever the numbers."""
    r = PointResult(isl=100, osl=10, concurrency=users)
    r.samples = [
        sample(k, k * cycle / users + n * cycle, ttft_share * cycle, cycle, tokens=10)
        for k in range(users)
        for n in range(per_user)
    ]
    steady = r.steady()
    if per_user == 1 and users > 1:  # the first user's one request began before the last user's
        assert steady is None
        return
    assert steady is not None
    assert steady.total_tps == pytest.approx(users * 110 / cycle, rel=1e-6)
    assert steady.ttft_s == pytest.approx(ttft_share * cycle)


def test_staggered_users_start_apart_and_each_request_says_whose_it_is(fake_server):
    def handler(req):
        time.sleep(0.2)
        return (200, {"choices": [{"text": "x"}], "usage": {"completion_tokens": 1}})

    server = fake_server(handler)
    r = run_point(
        server.url, "m", isl=4, osl=1, concurrency=4, num_requests=12, vocab_size=512, stream=False, stagger_s=0.4
    )
    assert r.errors == []
    firsts = sorted(min(s.start_s for s in r.samples if s.user == k) for k in range(4))
    gaps = [b - a for a, b in zip(firsts, firsts[1:], strict=False)]
    # user k starts k / 4 of 0.4 s after user 0: 0.1 s apart (all at once, they were within ms)
    assert all(0.07 < g < 0.2 for g in gaps), gaps
    # each user sends its share, however late it starts (a shared queue: the first users took more)
    assert sorted(sum(1 for s in r.samples if s.user == k) for k in range(4)) == [3, 3, 3, 3]
    assert r.steady() is not None


def test_users_sent_at_once_start_together(fake_server):
    server = fake_server(lambda req: (200, {"choices": [{"text": "x"}], "usage": {"completion_tokens": 1}}))
    r = run_point(server.url, "m", isl=4, osl=1, concurrency=3, num_requests=3, vocab_size=512, stream=False)
    firsts = [min(s.start_s for s in r.samples if s.user == k) for k in range(3)]
    assert max(firsts) - min(firsts) < 0.1
