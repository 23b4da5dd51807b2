"""retry_while, what launch's first request is retried by: it stops at the attempts or before a
wait that would pass the deadline, never waits after the last try, and returns the last result."""

from __future__ import annotations

import time

import pytest

from recipectl import retry
from recipectl.retry import retry_while


@pytest.fixture
def waits(monkeypatch):
    """The waits tenacity asks for, recorded instead of slept (the clock does not move)."""
    slept: list[float] = []
    monkeypatch.setattr(retry.time, "sleep", slept.append)
    return slept


def test_tries_until_the_result_needs_no_retry(waits):
    results = iter([1, 2, 3, 4])
    got = retry_while(
        lambda: next(results), lambda r: r < 3, attempts=6, deadline=time.monotonic() + 60, wait_s=lambda n: 2.0 * n
    )
    assert got == 3 and waits == [2.0, 4.0]


def test_returns_the_last_result_after_its_attempts_without_a_wait_after_the_last(waits):
    calls = []
    got = retry_while(
        lambda: calls.append(1) or len(calls),
        lambda r: True,
        attempts=3,
        deadline=time.monotonic() + 60,
        wait_s=lambda n: 2.0 * n,
    )
    assert got == 3 and len(calls) == 3 and waits == [2.0, 4.0]


def test_no_try_starts_at_or_past_the_deadline():
    calls = []
    start = time.monotonic()
    got = retry_while(
        lambda: calls.append(1) or len(calls),
        lambda r: True,
        attempts=6,
        deadline=start + 0.5,
        wait_s=lambda n: 0.2 * n,
    )
    # after try 1 a 0.2 s wait ends before the deadline; after try 2 a 0.4 s one would pass it
    assert got == 2 and len(calls) == 2
    assert time.monotonic() - start < 0.5  # returned at once, not at the deadline
