"""Every wait and retry in recipectl, on tenacity: poll until something happens, or try an
operation again after a transient failure."""

from __future__ import annotations

import time
from typing import Any, Awaitable, Callable, TypeVar

from tenacity import (
    AsyncRetrying,
    RetryCallState,
    Retrying,
    retry_if_exception_type,
    retry_if_result,
    stop_after_attempt,
    stop_after_delay,
    stop_never,
    wait_fixed,
)

T = TypeVar("T")


def poll_until(step: Callable[[], T | None], *, interval_s: float, timeout_s: float | None = None) -> T | None:
    """Call `step` every `interval_s` until it returns something other than None and return that;
    None once `timeout_s` has passed (never, without one). `step` runs at least once."""
    return Retrying(
        stop=stop_never if timeout_s is None else stop_after_delay(timeout_s),
        wait=wait_fixed(interval_s),
        retry=retry_if_result(lambda r: r is None),
        retry_error_callback=lambda _: None,
    )(step)


def retry_transient(
    fn: Callable[[], T],
    transient: type[BaseException] | tuple[type[BaseException], ...],
    *,
    attempts: int,
    wait_s: float,
) -> T:
    """`fn()`, tried up to `attempts` times while it raises `transient`; the last failure is raised."""
    return Retrying(
        stop=stop_after_attempt(attempts),
        wait=wait_fixed(wait_s),
        retry=retry_if_exception_type(transient),
        reraise=True,
    )(fn)


def retry_while(
    step: Callable[[], T], retry: Callable[[T], bool], *, attempts: int, deadline: float, wait_s: Callable[[int], float]
) -> T:
    """`step()`, tried again while `retry(result)` holds, up to `attempts` times; before try n + 1 it
    waits `wait_s(n)`. No try starts at or after the monotonic `deadline`: where the next wait would
    reach it, the last result is returned at once. `step` runs at least once."""
    return Retrying(
        stop=lambda rs: rs.attempt_number >= attempts or time.monotonic() + wait_s(rs.attempt_number) >= deadline,
        wait=lambda rs: wait_s(rs.attempt_number),
        retry=retry_if_result(retry),
        retry_error_callback=_last_result,
    )(step)


def _last_result(state: RetryCallState) -> Any:
    """What the last try returned: retry_while gives up by answering with it, not by raising."""
    assert state.outcome is not None  # tenacity calls back only after a try
    return state.outcome.result()


async def retry_transient_async(
    fn: Callable[[], Awaitable[T]],
    transient: type[BaseException] | tuple[type[BaseException], ...],
    *,
    attempts: int,
    wait_s: float,
) -> T:
    """`await fn()`, tried up to `attempts` times while it raises `transient`; the last failure is raised."""
    async for attempt in AsyncRetrying(
        stop=stop_after_attempt(attempts),
        wait=wait_fixed(wait_s),
        retry=retry_if_exception_type(transient),
        reraise=True,
    ):
        with attempt:
            return await fn()
    raise AssertionError("unreachable: tenacity re-raises the last failure")
