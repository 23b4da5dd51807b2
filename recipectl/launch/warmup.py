"""The first request through the router, made by launch before it says "ready".

/health says each server is up; it does not say that prefill and decode can reach each other. The
NIXL handshake happens on the first request that needs a transfer, and it can fail where /health
cannot (an unreachable side channel, a kernel that is missing until the first prefill, a peer too
busy to answer the handshake in time). Launch sends one short completion through the router and
retries while the cause is one a retry can cure; what the user runs first then finds the path
already proven.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from .diagnose import Diagnosis

PROMPT = "recipectl launch: one request through prefill and decode before saying ready."
#: Causes a retry cannot cure: stop at once and report.
FINAL_CAUSES = ("FlashInfer", "not installed", "layout", "flag")


@dataclass
class FirstRequest:
    ok: bool
    attempts: int
    seconds: float
    error: str = ""
    diagnosis: Diagnosis | None = None


def first_request(client, router_url: str, model: str, *, deadline: float,
                  diagnose_logs: Callable[[], Diagnosis | None], max_attempts: int = 6) -> FirstRequest:
    """POST one 2-token completion to the router until it answers 200, the cause is final, the
    attempts run out or the monotonic `deadline` passes."""
    import httpx

    body = {"model": model, "prompt": PROMPT, "max_tokens": 2, "temperature": 0}
    t0 = time.monotonic()
    error = ""
    diagnosis = None
    for attempt in range(1, max_attempts + 1):
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            break
        try:
            r = client.post(router_url.rstrip("/") + "/v1/completions", json=body,
                            timeout=httpx.Timeout(min(remaining, 120.0), connect=5.0))
            if r.status_code == 200:
                return FirstRequest(True, attempt, time.monotonic() - t0)
            error = f"HTTP {r.status_code}: {r.text.strip()[:300]}"
        except httpx.HTTPError as e:
            error = f"{type(e).__name__}: {e}".strip()
        diagnosis = diagnose_logs()
        if diagnosis and any(k in diagnosis.cause for k in FINAL_CAUSES):
            return FirstRequest(False, attempt, time.monotonic() - t0, error, diagnosis)
        time.sleep(min(2.0 * attempt, max(0.0, deadline - time.monotonic())))
    return FirstRequest(False, max_attempts, time.monotonic() - t0, error, diagnosis)


def diagnose_run_logs(log_paths: list[str]) -> Diagnosis | None:
    """The first known cause found in the tails of the given logs."""
    from . import processes as procs
    from .diagnose import diagnose

    for path in log_paths:
        d = diagnose(procs.tail(path, 400))
        if d is not None:
            return d
    return None
