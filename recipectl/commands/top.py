"""`recipectl top`: every endpoint's KV-cache use, running/waiting requests and token throughput,
live from /metrics (the seed keeps --api-server-count 1 so that these stay on)."""

from __future__ import annotations

import asyncio
import json
import sys
import time

from rich.console import Console
from rich.live import Live
from rich.table import Table

from ..checks.client import make_client
from ..checks.metrics import scrape_metrics
from ..errors import RecipectlError
from . import load_recipe_or_none
from .doctor import resolve_targets


async def _snapshot(client, urls: list[tuple[str, str]]):
    async def one(name, url):
        try:
            return name, url, await scrape_metrics(client, url, timeout_s=5)
        except Exception as e:  # an endpoint that does not answer is shown as down
            return name, url, e

    return await asyncio.gather(*(one(n, u) for n, u in urls))


def _rows(snap, prev, dt):
    rows = []
    for name, url, m in snap:
        if isinstance(m, Exception):
            rows.append({"endpoint": name, "url": url, "up": False, "error": str(m)[:120]})
            continue
        p = prev.get(name)
        tps = None
        if (
            p is not None
            and not isinstance(p, Exception)
            and dt > 0
            and m.generation_tokens is not None
            and p.generation_tokens is not None
        ):
            tps = (m.generation_tokens - p.generation_tokens) / dt
        rows.append(
            {
                "endpoint": name,
                "url": url,
                "up": True,
                "kv_cache_usage": m.kv_cache_usage,
                "running": m.requests_running,
                "waiting": m.requests_waiting,
                "generation_tokens_per_s": tps,
                "external_transfer_prompt_tokens": m.prompt_tokens_external_transfer,
                "nixl_bytes": m.nixl_bytes_transferred,
            }
        )
    return rows


def _table(rows):
    t = Table(title=f"recipectl top  {time.strftime('%H:%M:%S')}", title_justify="left")
    for col in ("endpoint", "KV cache", "running", "waiting", "gen tok/s", "prompt tok by transfer", "NIXL bytes"):
        t.add_column(col, justify="right" if col != "endpoint" else "left")
    f = lambda v, spec="{:,.0f}": "-" if v is None else spec.format(v)  # noqa: E731
    for r in rows:
        if not r["up"]:
            t.add_row(r["endpoint"], "[red]down[/]", "", "", "", "", r["error"])
            continue
        t.add_row(
            r["endpoint"],
            f(r["kv_cache_usage"] and r["kv_cache_usage"] * 100, "{:.1f}%") if r["kv_cache_usage"] is not None else "-",
            f(r["running"]),
            f(r["waiting"]),
            f(r["generation_tokens_per_s"], "{:.1f}"),
            f(r["external_transfer_prompt_tokens"]),
            f(r["nixl_bytes"]),
        )
    return t


def top(
    recipe_path: str | None, *, run: str | None, interval: float, once: bool, as_json: bool, variant: str | None = None
) -> int:
    recipe = load_recipe_or_none(recipe_path, variant, "top")
    t = resolve_targets(recipe, recipe_path, run, None, [], [])
    urls = [(f"prefill-{i}", u) for i, u in enumerate(t.prefill)] + [(f"decode-{i}", u) for i, u in enumerate(t.decode)]
    if not urls:
        raise RecipectlError("no running deployment found", fix="recipectl launch RECIPE --detach, or --run RUN")

    async def loop() -> int:
        async with make_client(concurrency=8, timeout_s=10, connect_timeout_s=2, connect_retries=0) as client:
            prev: dict = {}
            last = time.monotonic()
            snap = await _snapshot(client, urls)
            if once or as_json:
                rows = _rows(snap, prev, 0)
                if as_json:
                    sys.stdout.write(json.dumps(rows, indent=2) + "\n")
                else:
                    Console().print(_table(rows))
                return 0
            with Live(_table(_rows(snap, prev, 0)), refresh_per_second=2) as live:
                while True:
                    prev = {n: m for n, _, m in snap}
                    await asyncio.sleep(interval)
                    now = time.monotonic()
                    snap = await _snapshot(client, urls)
                    live.update(_table(_rows(snap, prev, now - last)))
                    last = now

    try:
        return asyncio.run(loop())
    except KeyboardInterrupt:
        return 0
