"""`recipectl doctor`: checks with a verdict and a fix. Every check is bounded in time and the
independent ones run concurrently; a check that cannot finish fails, it never hangs.

Three groups: environment (no deployment needed: checks/environment.py), endpoints (a running
deployment, found from the run state or given as URLs: checks/endpoints.py), and proofs (P/D
transfer, parity, GSM8K: an accuracy gate, or the pipeline alone where the recipe's bar is 0).
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Awaitable, Callable

PASS, FAIL, WARN, SKIP = "pass", "fail", "warn", "skip"


@dataclass
class CheckResult:
    group: str
    name: str
    status: str
    detail: str = ""
    fix: str = ""
    seconds: float = 0.0
    data: dict = field(default_factory=dict)


@dataclass
class Targets:
    """The deployment under test."""

    router: str | None = None
    prefill: list[str] = field(default_factory=list)
    decode: list[str] = field(default_factory=list)
    model: str | None = None
    run_state: object | None = None  # RunState when found


async def timed(group: str, name: str, fn: Callable[[], Awaitable[CheckResult]], timeout: float) -> CheckResult:
    t0 = time.monotonic()
    try:
        r = await asyncio.wait_for(fn(), timeout)
    except asyncio.TimeoutError:
        r = CheckResult(group, name, FAIL, f"no answer within {timeout:.0f}s",
                        "the endpoint hangs or is overloaded: recipectl logs")
    except Exception as e:  # noqa: BLE001 - a check that breaks is a failed check, reported
        r = CheckResult(group, name, FAIL, f"{type(e).__name__}: {e}")
    r.group, r.name = group, name
    r.seconds = time.monotonic() - t0
    return r
