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

import httpx

from ..retry import retry_while
from ..runs.diagnose import Diagnosis, diagnose_endpoints
from ..runs.state import ProcessState

PROMPT = "recipectl launch: one request through prefill and decode before saying ready."


@dataclass
class FirstRequest:
    ok: bool
    attempts: int
    seconds: float
    error: str = ""
    diagnosis: Diagnosis | None = None


def first_request(
    client,
    router_url: str,
    model: str,
    *,
    deadline: float,
    diagnose_logs: Callable[[], Diagnosis | None],
    max_attempts: int = 6,
) -> FirstRequest:
    """POST one 2-token completion to the router until it answers 200, the cause is final, the
    attempts run out or the monotonic `deadline` passes; 2 s, 4 s, 6 s ... between attempts."""
    body = {"model": model, "prompt": PROMPT, "max_tokens": 2, "temperature": 0}
    t0 = time.monotonic()
    if deadline <= t0:
        return FirstRequest(False, 0, 0.0)
    attempts = 0

    def attempt() -> FirstRequest:
        nonlocal attempts
        attempts += 1
        remaining = deadline - time.monotonic()
        try:
            r = client.post(
                router_url.rstrip("/") + "/v1/completions",
                json=body,
                timeout=httpx.Timeout(max(0.001, min(remaining, 120.0)), connect=5.0),
            )
            if r.status_code == 200:
                return FirstRequest(True, attempts, time.monotonic() - t0)
            error = f"HTTP {r.status_code}: {r.text.strip()[:300]}"
        except httpx.HTTPError as e:
            error = f"{type(e).__name__}: {e}".strip()
        return FirstRequest(False, attempts, time.monotonic() - t0, error, diagnose_logs())

    def again(result: FirstRequest) -> bool:
        return not result.ok and not (result.diagnosis and result.diagnosis.final)

    return retry_while(attempt, again, attempts=max_attempts, deadline=deadline, wait_s=lambda n: 2.0 * n)


@dataclass
class ServingProof:
    ok: bool
    message: str
    culprit: ProcessState | None = None  # the ProcessState whose log explains a failure (else the router)
    diagnosis: Diagnosis | None = None


def prove_serving(state, deadline: float, console) -> ServingProof:
    """Launch's last step on every target: the first request, recorded in the run state."""
    if not state.router_url:
        return ServingProof(True, "ready")
    found: list = []

    def diagnose_logs() -> Diagnosis | None:
        hit = diagnose_endpoints(state.processes)
        found[:] = [hit[0]] if hit else []
        return hit[1] if hit else None

    with console.status("first request through the router ..."), httpx.Client() as client:
        first = first_request(
            client,
            state.router_url,
            state.served_model_name,
            deadline=max(deadline, time.monotonic() + 60),
            diagnose_logs=diagnose_logs,
        )
    state.first_request_s = round(first.seconds, 3)
    state.save()
    if first.ok:
        return ServingProof(True, "ready")
    culprit = found[0] if found else next(p for p in state.processes if p.kind == "router")
    return ServingProof(
        False,
        f"every process is healthy, but the first request through the router failed "
        f"({first.attempts} attempt(s)): {first.error}",
        culprit,
        first.diagnosis,
    )
