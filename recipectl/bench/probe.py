"""A closed-loop streaming client for the few points a calibration measures.

`vllm bench serve` (bench/sweep.py) imports the engine for every level, tens of seconds on a small
host; a calibration needs a handful of short points, each repeated, so it sends its own requests:
``concurrency`` users, each sending its next request when the last finished, prompts of exactly
``isl`` random token ids, drawn afresh by every call (no prefix is shared with any other request,
of this call or of another, in this process or another: so no cache hit shortens a prefill,
where the engine's prefix cache keeps what an earlier calibration of the same deployment sent) and ``osl``
tokens generated with EOS ignored. Per request: TTFT (to the first streamed token), the mean
inter-token latency after it ((end - first) / (tokens - 1), vllm bench's TPOT), the tokens.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import math
import os
import random
import statistics
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import httpx


@dataclass
class Sample:
    ttft_s: float
    itl_s: float | None
    output_tokens: int
    e2e_s: float
    start_s: float = 0.0  # perf_counter at the request's start: when it decoded, beside the others
    user: int = 0  # which of the point's closed-loop users sent it


@dataclass
class PointResult:
    isl: int
    osl: int
    concurrency: int
    samples: list[Sample] = field(default_factory=list)
    duration_s: float = 0.0
    errors: list[str] = field(default_factory=list)

    @property
    def ttft_s(self) -> float:
        return statistics.median(s.ttft_s for s in self.samples)

    @property
    def itl_s(self) -> float | None:
        xs = [s.itl_s for s in self.samples if s.itl_s is not None]
        return statistics.median(xs) if xs else None

    @property
    def decode_residents(self) -> float:
        """The mean number of requests decoding while one decodes (itself included), over the
        requests and their decode time: the concurrency decode's step time saw. Below the
        point's concurrency wherever users wait for prefill."""
        spans = [(s.start_s + s.ttft_s, s.start_s + s.e2e_s) for s in self.samples if s.e2e_s > s.ttft_s]
        if not spans:
            return 1.0
        means = [sum(max(0.0, min(b, d) - max(a, c)) for c, d in spans) / (b - a) for a, b in spans]
        return sum(means) / len(means)

    @property
    def output_tps(self) -> float:
        return sum(s.output_tokens for s in self.samples) / self.duration_s if self.duration_s else 0.0

    def steady(self) -> SteadyState | None:
        """What the point's users saw while all of them were sending: from when the last of them
        sent its first request to when the first of them got its last answer (a run's start, and
        its end where users run out of requests at different times, are left out). TTFT and ITL:
        the medians of the requests sent inside that window; throughput: the tokens of every
        request, each spread evenly over its time, that fall inside it. None where some user sent
        nothing inside it (a window too short to say what all of them saw), or a time is not finite."""
        by_user: dict[int, list[Sample]] = {}
        for s in self.samples:
            by_user.setdefault(s.user, []).append(s)
        if self.concurrency < 1 or len(by_user) < self.concurrency:
            return None
        if not all(math.isfinite(s.start_s + s.e2e_s) for s in self.samples):
            return None
        start = max(min(s.start_s for s in xs) for xs in by_user.values())
        end = min(max(s.start_s + s.e2e_s for s in xs) for xs in by_user.values())
        inside = [s for s in self.samples if start <= s.start_s < end]
        if end <= start or {s.user for s in inside} != set(by_user):
            return None
        tokens = 0.0
        for s in self.samples:
            overlap = min(end, s.start_s + s.e2e_s) - max(start, s.start_s)
            if overlap > 0:
                tokens += (self.isl + s.output_tokens) * overlap / s.e2e_s
        itls = [s.itl_s for s in inside if s.itl_s is not None]
        return SteadyState(
            ttft_s=statistics.median(s.ttft_s for s in inside),
            itl_s=statistics.median(itls) if itls else None,
            total_tps=tokens / (end - start),
            window_s=end - start,
            requests=len(inside),
        )


@dataclass(frozen=True)
class SteadyState:
    """PointResult.steady: a point's users all sending."""

    ttft_s: float
    itl_s: float | None
    total_tps: float
    window_s: float
    requests: int


# What makes every call's prompts its own: seeded by the seed alone, a second `calibrate --run` of
# one deployment sent the first's prompts again, and the prefix cache served a 512-token prompt
# in 0.3-0.44 s that had taken 1.1-1.3 s (the CPU engine, whose hybrid prefix caching is on)
_PROCESS_SALT = os.urandom(16).hex()
_CALLS = itertools.count()


def random_prompt(rng: random.Random, isl: int, vocab_size: int) -> list[int]:
    """``isl`` token ids drawn from the vocabulary past its first 100 (special and control ids)."""
    lo = min(100, vocab_size - 1)
    return [rng.randrange(lo, vocab_size) for _ in range(isl)]


async def sse_data(response: httpx.Response) -> AsyncIterator[str]:
    """The ``data:`` payloads of a server-sent event stream, one per line. A line ends at LF (CRLF
    and CR alike, as the SSE format says) and nowhere else: httpx's ``aiter_lines()`` also splits
    at U+2028, U+0085 and the other breaks ``str.splitlines()`` knows, which a model's text holds
    unescaped inside one JSON event (seen on H200: a tiny random-weight model's output cut an event
    in two, "JSONDecodeError: Unterminated string")."""

    pending = b""
    async for chunk in response.aiter_bytes():
        pending += chunk.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        *lines, pending = pending.split(b"\n")
        for line in lines:
            if line.startswith(b"data:"):
                yield line[5:].removeprefix(b" ").decode("utf-8")
    if pending.startswith(b"data:"):
        yield pending[5:].removeprefix(b" ").decode("utf-8")


async def _request(
    client: httpx.AsyncClient, url: str, model: str, prompt: list[int], osl: int, stream: bool
) -> Sample:
    body = {"model": model, "prompt": prompt, "max_tokens": osl, "temperature": 0, "ignore_eos": True, "stream": stream}
    t0 = time.perf_counter()
    if not stream:
        r = await client.post(url + "/v1/completions", json=body)
        r.raise_for_status()
        t = time.perf_counter() - t0
        return Sample(
            ttft_s=t, itl_s=None, output_tokens=int(r.json()["usage"]["completion_tokens"]), e2e_s=t, start_s=t0
        )
    body["stream_options"] = {"include_usage": True}
    first: float | None = None
    last: float | None = None
    chunks = 0
    tokens = None
    async with client.stream("POST", url + "/v1/completions", json=body) as r:
        r.raise_for_status()
        async for payload in sse_data(r):
            if payload == "[DONE]":
                continue
            data = json.loads(payload)
            if data.get("usage"):
                tokens = int(data["usage"]["completion_tokens"])
            if data.get("choices"):
                now = time.perf_counter()
                first = first or now
                last = now
                chunks += 1
    if first is None or last is None:
        raise RuntimeError("the stream held no token")
    n = tokens or chunks
    itl = (last - first) / (n - 1) if n > 1 else None
    return Sample(ttft_s=first - t0, itl_s=itl, output_tokens=n, e2e_s=last - t0, start_s=t0)


async def _run(
    url: str,
    model: str,
    *,
    isl: int,
    osl: int,
    concurrency: int,
    num_requests: int,
    vocab_size: int,
    seed: int,
    stream: bool,
    timeout_s: float,
    stagger_s: float = 0.0,
) -> PointResult:
    rng = random.Random(f"{_PROCESS_SALT}:{next(_CALLS)}:{seed}")
    prompts = [random_prompt(rng, isl, vocab_size) for _ in range(num_requests)]
    result = PointResult(isl=isl, osl=osl, concurrency=concurrency)
    # together, the users share one queue of prompts; out of step, each has its share of them, so
    # a user who starts late still sends its requests while the others send theirs
    shared = list(reversed(prompts))
    queues = [list(reversed(prompts[k::concurrency])) for k in range(concurrency)] if stagger_s > 0 else None

    async def user(client: httpx.AsyncClient, k: int) -> None:
        queue = shared if queues is None else queues[k]
        if stagger_s > 0:
            await asyncio.sleep(stagger_s * k / concurrency)
        while queue:
            prompt = queue.pop()
            try:
                sample = await _request(client, url, model, prompt, osl, stream)
                sample.user = k
                result.samples.append(sample)
            except Exception as e:
                result.errors.append(f"{type(e).__name__}: {str(e)[:200]}")

    limits = httpx.Limits(max_connections=concurrency + 2)
    async with httpx.AsyncClient(timeout=timeout_s, limits=limits) as client:
        t0 = time.perf_counter()
        await asyncio.gather(*(user(client, k) for k in range(concurrency)))
        result.duration_s = time.perf_counter() - t0
    return result


def run_point(
    url: str,
    model: str,
    *,
    isl: int,
    osl: int,
    concurrency: int,
    num_requests: int,
    vocab_size: int,
    seed: int = 0,
    stream: bool = True,
    timeout_s: float = 600,
    stagger_s: float = 0.0,
) -> PointResult:
    """One point: ``num_requests`` requests by ``concurrency`` closed-loop users against ``url``
    (the router, or one endpoint), streamed (TTFT and ITL) or not (the whole request's time).
    ``seed`` is mixed into the prompts' draw, which is new at every call whatever it is.
    ``stagger_s``: the users start that long apart in all, user k after k / concurrency of it (0:
    all at once, as vllm bench serve's --max-concurrency does: the first requests come as a wave;
    a user's cycle: out of step from the start, as users who do not arrive together are)."""
    return asyncio.run(
        _run(
            url,
            model,
            isl=isl,
            osl=osl,
            concurrency=concurrency,
            num_requests=num_requests,
            vocab_size=vocab_size,
            seed=seed,
            stream=stream,
            timeout_s=timeout_s,
            stagger_s=stagger_s,
        )
    )


# Users out of step: each sends at least this many, so that all of them send a few while all are
# sending (PointResult.steady's window)
OUT_OF_STEP_REQUESTS_PER_USER = 5


def warm_up(
    url: str, model: str, *, isl: int, osl: int, concurrency: int, vocab_size: int, seed: int, rounds: int = 1
) -> float:
    """``rounds`` rounds of the point's users, together, not measured: a batch shape's first run
    pays its kernels' set-up. The last round's duration: one cycle of the point's users, which
    users out of step are spread over (a second round's, so that the set-up is not in it)."""
    duration = 0.0
    for k in range(rounds):
        r = run_point(
            url,
            model,
            isl=isl,
            osl=osl,
            concurrency=concurrency,
            num_requests=concurrency,
            vocab_size=vocab_size,
            seed=seed + k,
        )
        duration = r.duration_s
    return duration


def run_offsets(
    url: str,
    model: str,
    *,
    isl: int,
    osl: int,
    offsets_s: list[float],
    vocab_size: int,
    stream: bool = True,
    timeout_s: float = 600,
) -> PointResult:
    """One request per offset, each sent that many seconds after the first, from one event loop
    and over connections opened before the first is sent (so an offset is not a connection's or a
    thread's start-up): not a closed loop, a schedule. Samples in the order of ``offsets_s``, less
    those that failed (each an entry of ``errors``); a server that refuses the connections: no samples."""
    return asyncio.run(_offsets(url, model, isl, osl, offsets_s, vocab_size, stream, timeout_s))


async def _offsets(
    url: str, model: str, isl: int, osl: int, offsets_s: list[float], vocab_size: int, stream: bool, timeout_s: float
) -> PointResult:
    rng = random.Random(f"{_PROCESS_SALT}:{next(_CALLS)}:offsets")
    prompts = [random_prompt(rng, isl, vocab_size) for _ in offsets_s]
    result = PointResult(isl=isl, osl=osl, concurrency=len(offsets_s))
    samples: list[Sample | None] = [None] * len(offsets_s)
    # one client per request, each connected first (a GET of the model list): a request sent
    # later must not wait for, nor ride on, another's connection
    clients = [httpx.AsyncClient(timeout=timeout_s) for _ in offsets_s]
    try:
        # a connection refused here is refused again when its request is sent: an error there
        await asyncio.gather(*(c.get(url + "/v1/models") for c in clients), return_exceptions=True)
        t0 = time.perf_counter()

        async def send(i: int) -> None:
            await asyncio.sleep(max(0.0, t0 + offsets_s[i] - time.perf_counter()))
            try:
                samples[i] = await _request(clients[i], url, model, prompts[i], osl, stream)
            except Exception as e:
                result.errors.append(f"{type(e).__name__}: {str(e)[:200]}")

        await asyncio.gather(*(send(i) for i in range(len(offsets_s))))
        result.duration_s = time.perf_counter() - t0
    finally:
        await asyncio.gather(*(c.aclose() for c in clients))
    result.samples = [x for x in samples if x is not None]
    return result
