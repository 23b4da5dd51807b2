"""One way to build the HTTP client every check uses, and one way to POST with retries.

Why a shared factory: the checks talk to vLLM servers and the P/D router at high concurrency
(GSM8K runs 64 requests at once by default). httpx's defaults — a 5 s timeout, a pool of 100
connections, no connect retries, proxies taken from the environment — are wrong for that in
different ways, and getting them right once here keeps every check bounded in time.

Why a hard per-attempt deadline on top of httpx's timeouts: httpx bounds each phase (connect,
each read, write, pool wait) separately, so a server that trickles bytes never trips a read
timeout. ``asyncio.timeout`` around the whole attempt is the only bound that always holds.
"""

from __future__ import annotations

import asyncio
import json
import math
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

import httpx

from recipectl.errors import ExitCode, RecipectlError

__all__ = [
    "CheckError",
    "RequestFailed",
    "ShardedTransport",
    "endpoint",
    "make_client",
    "post_json",
]

#: Status codes worth another attempt: the router's upstream is briefly unavailable, or the
#: server is shedding load. A 4xx (bad model name, bad request) will fail the same way again.
RETRYABLE_STATUS = frozenset({429, 500, 502, 503, 504})


class CheckError(RecipectlError):
    """A check could not run to completion (server hung, too many failed requests)."""

    def __init__(self, message: str, *, fix: str | None = None):
        super().__init__(message, fix=fix, exit_code=ExitCode.FINDINGS)


class RequestFailed(Exception):
    """One request failed after all its attempts; ``str()`` says why, for a human."""


#: Connections per inner pool. httpcore's pool does O(connections^2) work on every request
#: start and finish (a list of all connections is rebuilt for each idle one): one large pool
#: makes the client the bottleneck, small pools do not (benchmarks/gsm8k_client.py measures it).
SHARD_CONNECTIONS = 8


class _ReleasingStream(httpx.AsyncByteStream):
    """Wraps a response body so the shard's in-flight count drops when httpx closes it."""

    def __init__(self, inner: httpx.AsyncByteStream, release: Callable[[], None]):
        self._inner, self._release = inner, release

    async def __aiter__(self) -> AsyncIterator[bytes]:
        async for chunk in self._inner:
            yield chunk

    async def aclose(self) -> None:
        release, self._release = self._release, _noop
        try:
            await self._inner.aclose()
        finally:
            release()


def _noop() -> None:
    pass


class ShardedTransport(httpx.AsyncBaseTransport):
    """Several small ``httpx.AsyncHTTPTransport`` pools behind one transport; each request
    goes to the shard with the fewest requests in flight."""

    def __init__(self, concurrency: int, *, retries: int, keepalive_expiry: float = 30.0):
        concurrency = max(1, concurrency)
        count = math.ceil(concurrency / SHARD_CONNECTIONS)
        # The connections split exactly: 65 is 2 pools of 8 and 7 of 7, never 9 of 8 (72 in flight).
        base, extra = divmod(concurrency, count)
        self.capacity = tuple(base + (i < extra) for i in range(count))
        ssl_context = httpx.create_ssl_context()  # loads the CA bundle: build it once, not per shard
        self.shards = [
            httpx.AsyncHTTPTransport(
                verify=ssl_context,
                retries=retries,
                limits=httpx.Limits(
                    max_connections=size, max_keepalive_connections=size, keepalive_expiry=keepalive_expiry
                ),
            )
            for size in self.capacity
        ]
        self._inflight = [0] * count

    @property
    def in_flight(self) -> tuple[int, ...]:
        """Requests in flight per shard (a response counts until its body is closed)."""
        return tuple(self._inflight)

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        # the shard with the most free connections: a request waits in a pool only when all are busy
        index = max(range(len(self.shards)), key=lambda i: self.capacity[i] - self._inflight[i])
        self._inflight[index] += 1

        def release() -> None:
            self._inflight[index] -= 1

        try:
            response = await self.shards[index].handle_async_request(request)
        except BaseException:
            release()
            raise
        assert isinstance(response.stream, httpx.AsyncByteStream)
        return httpx.Response(
            status_code=response.status_code,
            headers=response.headers,
            stream=_ReleasingStream(response.stream, release),
            extensions=response.extensions,
        )

    async def aclose(self) -> None:
        for shard in self.shards:
            await shard.aclose()


def make_client(
    *,
    concurrency: int = 64,
    timeout_s: float = 600.0,
    connect_timeout_s: float = 10.0,
    connect_retries: int = 2,
    trust_env: bool = False,
) -> httpx.AsyncClient:
    """Build an ``httpx.AsyncClient`` sized for ``concurrency`` requests in flight.

    - ``connect_retries`` go to ``httpx.AsyncHTTPTransport(retries=...)``, which retries only
      failed connects (refused, reset during handshake) — safe because nothing was sent yet.
      Retrying a request that reached the server is the caller's job (see :func:`post_json`).
    - ``concurrency`` connections in total, all kept alive (a check that reconnects on every
      request measures TCP set-up instead of the server), split over pools of
      :data:`SHARD_CONNECTIONS` (see :class:`ShardedTransport`).
    - ``trust_env=False`` by default: the endpoints are cluster-internal, and an ``HTTP_PROXY``
      inherited from a login shell would silently send them through a corporate proxy.
    """
    if concurrency < 1:
        raise ValueError("concurrency must be >= 1")
    timeout = httpx.Timeout(timeout_s, connect=min(connect_timeout_s, timeout_s))
    transport = ShardedTransport(concurrency, retries=connect_retries)
    return httpx.AsyncClient(transport=transport, timeout=timeout, trust_env=trust_env)


def endpoint(base_url: str, path: str) -> str:
    """Join a server's base URL and a path from the server root (``/v1/completions``,
    ``/metrics``), accepting base URLs given with or without a trailing ``/v1`` (both forms
    are common in recipes and in vLLM's own docs)."""
    base = base_url.rstrip("/")
    if base.endswith("/v1"):
        base = base[: -len("/v1")]
    return base + path


@dataclass(frozen=True)
class Attempt:
    """What one attempt ended with; kept so the final error can tell the whole story."""

    error: str
    retryable: bool


def _describe_http_error(exc: httpx.HTTPError) -> Attempt:
    if isinstance(exc, httpx.TimeoutException):  # one phase ran past the client's timeouts
        return Attempt(f"timed out ({type(exc).__name__})", True)
    if isinstance(exc, httpx.TransportError):
        return Attempt(f"{type(exc).__name__}: {exc or 'connection failed'}", True)
    return Attempt(f"{type(exc).__name__}: {exc}", False)


async def _attempt(
    client: httpx.AsyncClient, url: str, payload: dict[str, Any], timeout_s: float
) -> tuple[dict[str, Any] | None, Attempt | None]:
    # The client's own per-phase timeouts (connect 10 s by default) still apply inside.
    try:
        async with asyncio.timeout(timeout_s):
            response = await client.post(url, json=payload)
            body = response.content
    except TimeoutError:
        return None, Attempt(f"no complete answer within {timeout_s:g} s", True)
    except httpx.HTTPError as exc:
        return None, _describe_http_error(exc)
    if response.status_code != 200:
        snippet = body[:200].decode("utf-8", "replace").strip()
        retryable = response.status_code in RETRYABLE_STATUS
        return None, Attempt(f"HTTP {response.status_code}: {snippet}", retryable)
    try:
        data = json.loads(body)
    except ValueError:
        return None, Attempt("response is not JSON", False)
    if not isinstance(data, dict):
        return None, Attempt("response JSON is not an object", False)
    return data, None


async def post_json(
    client: httpx.AsyncClient,
    url: str,
    payload: dict[str, Any],
    *,
    timeout_s: float,
    retries: int = 1,
    backoff_s: float = 0.5,
) -> dict[str, Any]:
    """POST ``payload`` and return the JSON object, or raise :class:`RequestFailed`.

    Each attempt is bounded by ``timeout_s`` end to end. Timeouts, transport errors and
    429/5xx are retried up to ``retries`` more times with exponential backoff; other 4xx
    and malformed bodies fail at once, since repeating them cannot help.
    """
    attempts: list[Attempt] = []
    for number in range(retries + 1):
        if number:
            await asyncio.sleep(backoff_s * (2 ** (number - 1)))
        data, failure = await _attempt(client, url, payload, timeout_s)
        if failure is None and data is not None:
            return data
        assert failure is not None
        attempts.append(failure)
        if not failure.retryable:
            break
    tries = f"{len(attempts)} attempt" + ("s" if len(attempts) != 1 else "")
    raise RequestFailed(f"POST {url} failed after {tries}: {attempts[-1].error}")
