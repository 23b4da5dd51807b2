"""The plan ledger: what the performance model predicted at a point a deployment was measured at,
and how far off it was, one JSON line per point (`plan --check` and every `bench` level append).

A line is appended in one write (fileio.append_line): a kill leaves it whole or absent, and a
reader skips any line it cannot read (counted, never fatal). The error of a metric is signed, the
prediction relative to the measurement: +50% predicted half as much again as was measured.
"""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ..fileio import MiB, UnreadableFile, append_line, read_bytes_bounded

LEDGER_FILE = "plan-ledger.jsonl"
LEDGER_VERSION: Literal[1] = 1
LEDGER_READ_LIMIT = 64 * MiB  # a line is under 2 KB: tens of thousands of measured points
UNCALIBRATED = "uncalibrated"
# What is compared: TTFT and ITL (medians over the requests; ITL per request as vllm bench's TPOT,
# the time per output token after the first) and throughput in total (prompt + output) tokens/s,
# which needs no count of devices to agree with the prediction's.
METRICS = ("ttft_s", "itl_s", "total_tps")
Source = Literal["plan --check", "bench"]
# How the point's users were started: all at once (vllm bench serve --max-concurrency, bench, and
# plan --check by default), or spread over one of their cycles (plan --check --out-of-step)
Users = Literal["together", "out of step"]


class Point(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    isl: int = Field(ge=1)
    osl: int = Field(ge=1)
    concurrency: int = Field(ge=1)


class Metrics(BaseModel):
    """TTFT and ITL in seconds, throughput in tokens/s; None where not known (a level without a
    TPOT, an error of a measurement of 0)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    ttft_s: float | None = None
    itl_s: float | None = None
    total_tps: float | None = None


class LedgerEntry(BaseModel):
    """One line of the ledger."""

    model_config = ConfigDict(frozen=True, extra="allow")  # a newer writer's fields are kept, not refused

    ledger_version: Literal[1]
    at: str  # UTC, ISO 8601
    source: Source
    recipe: str
    fingerprint: str  # the effective configuration's (recipectl calibrate's describe)
    calibration: str  # the calibration file the prediction used, or "uncalibrated"
    point: Point
    predicted: Metrics
    measured: Metrics
    error_pct: Metrics
    run_id: str | None = None
    users: Users = "together"  # lines written before it was recorded: their users started together


def error_pct(predicted: float | None, measured: float | None) -> float | None:
    """(predicted - measured) / measured in percent; None without both, or a measurement of 0."""
    if predicted is None or measured is None or not measured or not math.isfinite(predicted + measured):
        return None
    return (predicted - measured) / measured * 100


def _finite(x: float | None) -> float | None:
    return x if x is not None and math.isfinite(x) else None  # JSON has no Infinity


def errors(predicted: Metrics, measured: Metrics) -> Metrics:
    return Metrics(**{m: error_pct(getattr(predicted, m), getattr(measured, m)) for m in METRICS})


def make_entry(
    *,
    at: str,
    source: Source,
    recipe: str,
    fingerprint: str,
    calibration: str | None,
    point: Point,
    predicted: Metrics,
    measured: Metrics,
    run_id: str | None = None,
    **extra: Any,
) -> LedgerEntry:
    """An entry, its errors computed here; ``extra``: what else the writer knows (the SLA, the
    layout), kept as given."""
    predicted = Metrics(**{m: _finite(getattr(predicted, m)) for m in METRICS})
    measured = Metrics(**{m: _finite(getattr(measured, m)) for m in METRICS})
    return LedgerEntry(
        ledger_version=LEDGER_VERSION,
        at=at,
        source=source,
        recipe=recipe,
        fingerprint=fingerprint,
        calibration=calibration or UNCALIBRATED,
        point=point,
        predicted=predicted,
        measured=measured,
        error_pct=errors(predicted, measured),
        run_id=run_id,
        **extra,
    )


def append_entries(path: Path, entries: Iterable[LedgerEntry]) -> None:
    """Each entry as one line, each in its own single write (a kill between two keeps the first)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    for e in entries:
        append_line(path, json.dumps(e.model_dump(mode="json"), sort_keys=True, allow_nan=False))


def read_entries(path: Path, recipe: str | None = None) -> tuple[list[LedgerEntry], int]:
    """The ledger's entries (of ``recipe`` only, when given), oldest first, and how many lines could
    not be read (cut off, edited, not an entry). A missing ledger has none; one that is not a
    readable regular file raises UnreadableFile."""
    try:
        data = read_bytes_bounded(path, LEDGER_READ_LIMIT)
    except UnreadableFile as e:
        if e.missing:
            return [], 0
        raise
    entries: list[LedgerEntry] = []
    skipped = 0
    for line in data.splitlines():
        if not line.strip():
            continue
        try:
            entry = LedgerEntry.model_validate_json(line)
        except (ValidationError, ValueError, RecursionError):
            skipped += 1
            continue
        if recipe is None or entry.recipe == recipe:
            entries.append(entry)
    return entries, skipped


def median_abs_errors(entries: Sequence[LedgerEntry]) -> dict[str, float | None]:
    """Per metric, the median of |error| over the entries that have one (None: none has)."""
    out: dict[str, float | None] = {}
    for m in METRICS:
        xs = [
            abs(e)
            for e in (error_pct(getattr(x.predicted, m), getattr(x.measured, m)) for x in entries)
            if e is not None
        ]
        out[m] = statistics.median(xs) if xs else None
    return out
