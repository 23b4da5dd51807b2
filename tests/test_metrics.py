"""/metrics parsing and the P/D transfer verdict.

The exposition is produced by prometheus_client itself with the names, types and labels vLLM
0.32.0 registers (vllm/v1/metrics/loggers.py, .../kv_connector/v1/nixl/stats.py), so ``_total``,
``_created``, ``_sum``/``_count``/``_bucket`` appear exactly as a real server writes them.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from recipectl.checks.client import CheckError, make_client
from recipectl.checks.metrics import (
    MetricsSnapshot,
    histogram_totals,
    parse_metrics,
    scrape_metrics,
    transfer_evidence,
)

from .fakeserver import FakeServer, Request

LABELS = ["model_name", "engine"]


def exposition(engines: dict[str, dict[str, Any]], *, nixl: bool = True, by_source: bool = True) -> str:
    """Text exposition for one server with one label set per engine.

    Per engine: running, waiting, usage, local, cached, external, generated, and (with NIXL)
    transfers (list of byte sizes) and failed."""
    reg = CollectorRegistry()
    running = Gauge("vllm:num_requests_running", "", LABELS, registry=reg)
    waiting = Gauge("vllm:num_requests_waiting", "", LABELS, registry=reg)
    usage = Gauge("vllm:kv_cache_usage_perc", "", LABELS, registry=reg)
    source = Counter("vllm:prompt_tokens_by_source", "", [*LABELS, "source"], registry=reg)
    generated = Counter("vllm:generation_tokens", "", LABELS, registry=reg)
    Counter("vllm:prompt_tokens", "", LABELS, registry=reg).labels("m", "0").inc(999)
    if nixl:
        nbytes = Histogram(
            "vllm:nixl_bytes_transferred", "", LABELS, registry=reg, buckets=[2 ** (10 + i) for i in range(1, 25, 2)]
        )
        xfer = Histogram("vllm:nixl_xfer_time_seconds", "", LABELS, registry=reg)
        failed = Counter("vllm:nixl_num_failed_transfers", "", LABELS, registry=reg)
    for engine, v in engines.items():
        running.labels("m", engine).set(v.get("running", 0))
        waiting.labels("m", engine).set(v.get("waiting", 0))
        usage.labels("m", engine).set(v.get("usage", 0))
        if by_source:
            source.labels("m", engine, "local_compute").inc(v.get("local", 0))
            source.labels("m", engine, "local_cache_hit").inc(v.get("cached", 0))
            source.labels("m", engine, "external_kv_transfer").inc(v.get("external", 0))
        generated.labels("m", engine).inc(v.get("generated", 0))
        if nixl:
            for size in v.get("transfers", []):
                nbytes.labels("m", engine).observe(size)
                xfer.labels("m", engine).observe(0.01)
            failed.labels("m", engine).inc(v.get("failed", 0))
    return generate_latest(reg).decode()


def test_names_in_the_text_are_the_ones_vllm_writes() -> None:
    text = exposition({"0": {"external": 5, "transfers": [100]}})
    for name in (
        'vllm:prompt_tokens_by_source_total{engine="0",model_name="m",source="external_kv_transfer"}',
        "vllm:prompt_tokens_by_source_created",
        "vllm:generation_tokens_total",
        "vllm:nixl_bytes_transferred_sum",
        "vllm:nixl_bytes_transferred_count",
        "vllm:nixl_num_failed_transfers_total",
        "vllm:kv_cache_usage_perc",
    ):
        assert name in text


def test_one_engine() -> None:
    snap = parse_metrics(
        exposition(
            {
                "0": {
                    "running": 3,
                    "waiting": 1,
                    "usage": 0.25,
                    "local": 4,
                    "cached": 16,
                    "external": 344,
                    "generated": 40,
                    "transfers": [163840 + 3 * (6144 + 131072)] * 4,
                    "failed": 0,
                }
            }
        )
    )
    assert snap == MetricsSnapshot(
        kv_cache_usage=0.25,
        requests_running=3,
        requests_waiting=1,
        prompt_tokens_local_compute=4,
        prompt_tokens_local_cache_hit=16,
        prompt_tokens_external_transfer=344,
        generation_tokens=40,
        nixl_bytes_transferred=2_301_952,
        nixl_transfers=4,
        nixl_failed_transfers=0,
        engines=1,
    )


def test_several_engines_are_summed_and_usage_takes_the_fullest() -> None:
    snap = parse_metrics(
        exposition(
            {
                "0": {"running": 2, "usage": 0.5, "external": 100, "local": 1, "transfers": [10, 20]},
                "1": {"running": 5, "usage": 0.75, "external": 50, "local": 2, "transfers": [30], "failed": 1},
            }
        )
    )
    assert (snap.requests_running, snap.kv_cache_usage, snap.engines) == (7, 0.75, 2)
    assert (snap.prompt_tokens_external_transfer, snap.prompt_tokens_local_compute) == (150, 3)
    assert (snap.nixl_bytes_transferred, snap.nixl_transfers, snap.nixl_failed_transfers) == (60, 3, 1)


def test_absent_metrics_are_none() -> None:
    snap = parse_metrics(exposition({"0": {"running": 1}}, nixl=False, by_source=False))
    assert snap.requests_running == 1 and snap.generation_tokens == 0
    assert snap.prompt_tokens_external_transfer is None and snap.prompt_tokens_local_compute is None
    assert snap.nixl_bytes_transferred is None and snap.nixl_failed_transfers is None
    assert parse_metrics("") == MetricsSnapshot()


def test_histogram_totals_sum_each_histogram_over_its_engines() -> None:
    """The trace's per-point timings: every histogram's sum and count over all engines, nothing
    else (counters and gauges are not histograms)."""
    totals = histogram_totals(exposition({"0": {"transfers": [100, 300]}, "1": {"transfers": [600]}}))
    assert totals["vllm:nixl_bytes_transferred"] == (1000, 3)
    assert totals["vllm:nixl_xfer_time_seconds"] == pytest.approx((0.03, 3))
    assert set(totals) == {"vllm:nixl_bytes_transferred", "vllm:nixl_xfer_time_seconds"}
    assert histogram_totals(exposition({"0": {}}, nixl=False)) == {}


UNTYPED = """\
vllm:prompt_tokens_by_source_total{engine="0",source="local_compute"} 7.0
vllm:prompt_tokens_by_source_total{engine="0",source="external_kv_transfer"} 70.0
vllm:nixl_bytes_transferred_sum{engine="0"} 4096.0
vllm:nixl_bytes_transferred_count{engine="0"} 2.0
vllm:gpu_cache_usage_perc{engine="0"} 0.5
"""


def test_untyped_text_and_the_old_usage_name() -> None:
    snap = parse_metrics(UNTYPED)
    assert (snap.prompt_tokens_local_compute, snap.prompt_tokens_external_transfer) == (7, 70)
    assert (snap.nixl_bytes_transferred, snap.nixl_transfers, snap.kv_cache_usage) == (4096, 2, 0.5)


def test_garbage_is_a_value_error() -> None:
    with pytest.raises(ValueError):
        parse_metrics('vllm:x{engine="0" 1\n')


# --------------------------------------------------------------------------- the verdict


def snap(**kw: float | None) -> MetricsSnapshot:
    base: dict[str, Any] = dict(
        prompt_tokens_local_compute=0.0,
        prompt_tokens_external_transfer=0.0,
        nixl_bytes_transferred=0.0,
        nixl_transfers=0.0,
        nixl_failed_transfers=0.0,
    )
    base.update(kw)
    return MetricsSnapshot(**base)


E = "prompt_tokens_external_transfer"
L = "prompt_tokens_local_compute"
B = "nixl_bytes_transferred"
N = "nixl_transfers"
F = "nixl_failed_transfers"

CASES = [
    ("transferred", snap(), snap(**{E: 344, L: 4, B: 2_301_952, N: 4}), True, "arrived by KV transfer"),
    ("silent recompute", snap(), snap(**{L: 348}), False, "decode silently recomputed prefill"),
    ("bytes only", snap(**{E: None, L: None}), snap(**{E: None, L: None, B: 10, N: 1}), True, "arrived by KV transfer"),
    (
        "tokens only",
        snap(**{B: None, N: None, F: None}),
        snap(**{E: 10, B: None, N: None, F: None}),
        True,
        "arrived by KV transfer",
    ),
    ("failed transfers", snap(), snap(**{E: 100, B: 10, N: 2, F: 1}), False, "1 NIXL transfers failed"),
    ("failed then recompute", snap(), snap(**{L: 300, F: 3}), False, "recomputed prefill locally"),
    ("restart", snap(**{E: 500, B: 10_000, N: 5}), snap(**{E: 20, B: 100, N: 1}), False, "server restarted"),
    ("no metrics", MetricsSnapshot(), MetricsSnapshot(), False, "no evidence either way"),
    ("no traffic", snap(**{E: 5}), snap(**{E: 5}), False, "no prompt tokens were processed"),
]


@pytest.mark.parametrize(
    ("before", "after", "transferred", "phrase"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_transfer_evidence(before: MetricsSnapshot, after: MetricsSnapshot, transferred: bool, phrase: str) -> None:
    verdict = transfer_evidence(before, after)
    assert verdict.transferred is transferred
    assert phrase in verdict.message


def test_evidence_carries_the_numbers() -> None:
    v = transfer_evidence(snap(**{E: 10}), snap(**{E: 354, L: 4, B: 2_301_952, N: 4}))
    assert (v.external_transfer_tokens, v.local_compute_tokens, v.nixl_bytes, v.nixl_transfers, v.failed_transfers) == (
        344,
        4,
        2_301_952,
        4,
        0,
    )
    assert "+344" in v.message and "+2,301,952" in v.message


# --------------------------------------------------------------------------- scraping


class MetricsServer(FakeServer):
    def __init__(self, status: int, text: str):
        super().__init__(lambda req: (status if req.path == "/metrics" else 404, text, "text/plain; version=0.0.4"))


async def scrape(url: str) -> MetricsSnapshot:
    async with make_client(concurrency=2, connect_retries=0) as client:
        return await scrape_metrics(client, url, timeout_s=2)


def test_scrape_a_live_endpoint() -> None:
    with MetricsServer(200, exposition({"0": {"external": 9, "transfers": [1, 2]}})) as server:
        before = asyncio.run(scrape(server.url))
        assert asyncio.run(scrape(server.url + "/v1")) == before  # a /v1 base URL works too
    assert before.prompt_tokens_external_transfer == 9 and before.nixl_transfers == 2


@pytest.mark.parametrize(
    ("status", "text", "phrase"),
    [
        (500, "oops", "HTTPStatusError"),
        (200, '<html>{"not": prometheus</html>\n', "not Prometheus text"),
    ],
)
def test_scrape_failures_are_check_errors(status: int, text: str, phrase: str) -> None:
    with MetricsServer(status, text) as server, pytest.raises(CheckError, match=phrase):
        asyncio.run(scrape(server.url))


class DroppingServer(FakeServer):
    """Reads each request and closes the connection without a response, `drops` times; then
    answers: what a kept-alive connection the server closes at that moment looks like."""

    def __init__(self, drops: int, text: str):
        def answer(req: Request) -> tuple[int, str]:
            if len(self.requests) <= drops:
                req.raw.close_connection = True
                return 0, None
            return 200, text

        super().__init__(answer)


def test_a_dropped_connection_is_read_again_once() -> None:
    text = exposition({"0": {"external": 9, "transfers": [1, 2]}})
    with DroppingServer(1, text) as server:
        assert asyncio.run(scrape(server.url)).prompt_tokens_external_transfer == 9
        assert len(server.requests) == 2
    with DroppingServer(5, text) as server, pytest.raises(CheckError, match="RemoteProtocolError"):
        asyncio.run(scrape(server.url))
    assert len(server.requests) == 2
