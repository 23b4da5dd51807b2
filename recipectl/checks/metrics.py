"""Read a vLLM server's Prometheus ``/metrics`` and tell whether P/D really moved the KV cache.

Why this exists: a P/D deployment whose transfer silently fails still answers every request —
decode just recomputes the prompt itself. Only decode's counters show the difference:
``vllm:prompt_tokens_by_source{source="external_kv_transfer"}`` and the NIXL byte histogram go
up when the prompt arrived by transfer; ``{source="local_compute"}`` goes up when it did not.

Metric names, as registered in vLLM 0.32.0 (names in the text format get ``_total`` for
counters and ``_sum``/``_count``/``_bucket`` for histograms):

- ``vllm/v1/metrics/loggers.py``: ``vllm:num_requests_running`` and
  ``vllm:num_requests_waiting`` (gauges), ``vllm:kv_cache_usage_perc`` (gauge, 0..1),
  ``vllm:prompt_tokens_by_source`` (counter, label ``source`` in ``local_compute``,
  ``local_cache_hit``, ``external_kv_transfer``), ``vllm:generation_tokens`` (counter);
- ``vllm/distributed/kv_transfer/kv_connector/v1/nixl/stats.py`` (``NixlPromMetrics``):
  ``vllm:nixl_bytes_transferred`` (histogram, one observation per transfer),
  ``vllm:nixl_num_failed_transfers`` (counter; includes handshake and notification failures).

All carry ``model_name`` and ``engine`` labels; with data parallelism there is one label set per
engine, so counts are summed and KV-cache usage takes the fullest engine. The text is parsed with
``prometheus_client``'s parser, never by hand.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable

import httpx
from prometheus_client.parser import text_string_to_metric_families
from pydantic import BaseModel, ConfigDict

from recipectl.checks.client import CheckError, endpoint
from recipectl.retry import retry_transient_async

__all__ = [
    "MetricsSnapshot",
    "TransferEvidence",
    "histogram_totals",
    "parse_metrics",
    "scrape_metrics",
    "transfer_evidence",
]

RUNNING = "vllm:num_requests_running"
WAITING = "vllm:num_requests_waiting"
KV_USAGE = "vllm:kv_cache_usage_perc"
KV_USAGE_OLD = "vllm:gpu_cache_usage_perc"  # the pre-0.9 name, still seen on old servers
PROMPT_BY_SOURCE = "vllm:prompt_tokens_by_source"
GENERATION = "vllm:generation_tokens"
NIXL_BYTES = "vllm:nixl_bytes_transferred"
NIXL_FAILED = "vllm:nixl_num_failed_transfers"

_Samples = dict[str, list[tuple[dict[str, str], float]]]


class MetricsSnapshot(BaseModel):
    """The few numbers the checks need; ``None`` means the server does not export that metric."""

    model_config = ConfigDict(frozen=True)

    kv_cache_usage: float | None = None
    requests_running: float | None = None
    requests_waiting: float | None = None
    prompt_tokens_local_compute: float | None = None
    prompt_tokens_local_cache_hit: float | None = None
    prompt_tokens_external_transfer: float | None = None
    generation_tokens: float | None = None
    nixl_bytes_transferred: float | None = None
    nixl_transfers: float | None = None
    nixl_failed_transfers: float | None = None
    engines: int = 0


def _index(text: str) -> _Samples:
    samples: _Samples = defaultdict(list)
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if not math.isnan(sample.value):
                samples[sample.name].append((dict(sample.labels), sample.value))
    return samples


def _select(samples: _Samples, names: Iterable[str], **labels: str) -> list[float] | None:
    """Values of the first name present (e.g. ``x_total`` before an untyped ``x``), filtered."""
    for name in names:
        if name in samples:
            return [
                value
                for sample_labels, value in samples[name]
                if all(sample_labels.get(k) == v for k, v in labels.items())
            ]
    return None


def _sum(samples: _Samples, names: Iterable[str], **labels: str) -> float | None:
    values = _select(samples, names, **labels)
    return None if values is None or not values else math.fsum(values)


def _counter(samples: _Samples, name: str, **labels: str) -> float | None:
    return _sum(samples, (name + "_total", name), **labels)


def histogram_totals(text: str) -> dict[str, tuple[float, float]]:
    """Every histogram's (sum, count), summed over its label sets (engines, transfer kinds):
    subtracted between two scrapes, the mean of each timing the server keeps over the requests
    between them (queue, prefill and decode time per request, NIXL transfer time, tokens per
    engine step). ``ValueError`` if the text is not valid."""
    totals: dict[str, tuple[float, float]] = {}
    for family in text_string_to_metric_families(text):
        if family.type != "histogram":
            continue
        sums = [s.value for s in family.samples if s.name == family.name + "_sum" and not math.isnan(s.value)]
        counts = [s.value for s in family.samples if s.name == family.name + "_count" and not math.isnan(s.value)]
        if counts:
            totals[family.name] = (math.fsum(sums), math.fsum(counts))
    return totals


def parse_metrics(text: str) -> MetricsSnapshot:
    """Parse Prometheus text exposition into a snapshot; ``ValueError`` if it is not valid."""
    samples = _index(text)
    usage = _select(samples, (KV_USAGE, KV_USAGE_OLD))
    engines = {
        labels["engine"]
        for name, rows in samples.items()
        if name.startswith("vllm:")
        for labels, _ in rows
        if "engine" in labels
    }
    return MetricsSnapshot(
        kv_cache_usage=max(usage) if usage else None,
        requests_running=_sum(samples, (RUNNING,)),
        requests_waiting=_sum(samples, (WAITING,)),
        prompt_tokens_local_compute=_counter(samples, PROMPT_BY_SOURCE, source="local_compute"),
        prompt_tokens_local_cache_hit=_counter(samples, PROMPT_BY_SOURCE, source="local_cache_hit"),
        prompt_tokens_external_transfer=_counter(samples, PROMPT_BY_SOURCE, source="external_kv_transfer"),
        generation_tokens=_counter(samples, GENERATION),
        nixl_bytes_transferred=_sum(samples, (NIXL_BYTES + "_sum",)),
        nixl_transfers=_sum(samples, (NIXL_BYTES + "_count",)),
        nixl_failed_transfers=_counter(samples, NIXL_FAILED),
        engines=len(engines),
    )


async def scrape_metrics(client: httpx.AsyncClient, base_url: str, *, timeout_s: float = 10.0) -> MetricsSnapshot:
    """GET ``{base_url}/metrics`` and parse it; :class:`CheckError` if it cannot be read."""
    url = endpoint(base_url, "/metrics")
    try:
        # A GET on a kept-alive connection that the server closes at that moment (uvicorn drops idle
        # ones after 5 s) fails with "Server disconnected without sending a response"; a GET is safe
        # to send again, on a new connection.
        response = await retry_transient_async(
            lambda: client.get(url, timeout=timeout_s), httpx.RemoteProtocolError, attempts=2, wait_s=0.2
        )
        response.raise_for_status()
        return parse_metrics(response.text)
    except httpx.HTTPError as exc:
        raise CheckError(f"could not read {url}: {type(exc).__name__}: {exc}") from None
    except ValueError as exc:
        raise CheckError(f"{url} is not Prometheus text: {exc}") from None


class TransferEvidence(BaseModel):
    """Did the prompts between two decode snapshots arrive by KV transfer? With the numbers."""

    model_config = ConfigDict(frozen=True)

    transferred: bool
    external_transfer_tokens: float | None
    local_compute_tokens: float | None
    nixl_bytes: float | None
    nixl_transfers: float | None
    failed_transfers: float | None
    message: str


def _delta(before: float | None, after: float | None) -> float | None:
    return None if before is None or after is None else after - before


def transfer_evidence(before: MetricsSnapshot, after: MetricsSnapshot) -> TransferEvidence:
    """Judge the prompt path from two snapshots of the *decode* server's metrics.

    Transferred means external-transfer prompt tokens or NIXL bytes went up and no transfer
    failed. Decode always computes a little locally (it recomputes the last prompt token), so
    ``local_compute`` going up alone is not a failure; going up while nothing arrived is.
    """
    ext = _delta(before.prompt_tokens_external_transfer, after.prompt_tokens_external_transfer)
    local = _delta(before.prompt_tokens_local_compute, after.prompt_tokens_local_compute)
    nbytes = _delta(before.nixl_bytes_transferred, after.nixl_bytes_transferred)
    count = _delta(before.nixl_transfers, after.nixl_transfers)
    failed = _delta(before.nixl_failed_transfers, after.nixl_failed_transfers)
    numbers = (
        f"external_kv_transfer prompt tokens {_fmt(ext)}, local_compute {_fmt(local)}, "
        f"NIXL bytes {_fmt(nbytes)} in {_fmt(count)} transfers, failed transfers {_fmt(failed)}"
    )
    arrived = (ext or 0) > 0 or (nbytes or 0) > 0
    if any(d is not None and d < 0 for d in (ext, local, nbytes, count, failed)):
        transferred = False
        why = "counters went backwards: the server restarted between the two snapshots"
    elif (failed or 0) > 0:
        transferred = False
        why = f"{failed:,.0f} NIXL transfers failed"
        if (local or 0) > 0:
            why += " and decode recomputed prefill locally (kv_load_failure_policy=recompute?)"
    elif arrived:
        transferred = True
        why = "the prompt arrived by KV transfer"
    elif (local or 0) > 0:
        transferred = False
        why = (
            "decode silently recomputed prefill: local_compute prompt tokens went up while "
            "none arrived by KV transfer (check kv_role on both servers, the router's "
            "--kv-connector, and the NIXL side-channel host/port)"
        )
    elif all(d is None for d in (ext, local, nbytes, failed)):
        transferred = False
        why = (
            "no evidence either way: this server exports neither vllm:prompt_tokens_by_source "
            "nor vllm:nixl_* metrics (is it the decode server, with a NIXL connector?)"
        )
    else:
        transferred = False
        why = "no prompt tokens were processed between the snapshots (send requests in between)"
    return TransferEvidence(
        transferred=transferred,
        external_transfer_tokens=ext,
        local_compute_tokens=local,
        nixl_bytes=nbytes,
        nixl_transfers=count,
        failed_transfers=failed,
        message=f"{why} ({numbers})",
    )


def _fmt(delta: float | None) -> str:
    """A counter delta with its sign (``+344``), or ``n/a`` when the metric is absent."""
    if delta is None:
        return "n/a"
    return f"{delta:+,.0f}" if float(delta).is_integer() else f"{delta:+,.3g}"
