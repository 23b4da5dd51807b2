"""Readiness, for every launcher: which processes answer /health yet."""

from __future__ import annotations

import time

from ..runs.state import RunState


def record_healthy(client, state: RunState) -> None:
    """GET /health of every process that has a URL and has not answered yet; the first 200 is
    recorded (healthy_at) and the state saved. A refused or slow connection is not an answer yet."""
    import httpx

    for ps in state.processes:
        if not ps.url or ps.healthy_at is not None:
            continue
        if state.target == "local" and ps.pid is None and ps.kind != "router":
            continue  # a local worker not started yet (it waits for the GPU it shares) cannot answer; a Slurm
            # step has no pid of ours at all, and answers once it runs
        try:
            if client.get(ps.url + "/health").status_code == 200:
                ps.healthy_at = time.time()
                state.save()
        except httpx.HTTPError:
            pass


def health_client():
    """The HTTP client readiness polls with: a short connect, a few seconds per answer."""
    import httpx

    return httpx.Client(timeout=httpx.Timeout(2.0, connect=0.5))
