"""GSM8K accuracy against a running OpenAI-compatible server, measured the way vLLM measures it.

Why match vLLM exactly (``tests/evals/gsm8k/gsm8k_eval.py``): the published reference numbers
(0.86, 0.88, ...) and vLLM's CI gate (accuracy >= threshold - 0.08) only mean something for the
same prompt, decoding settings and scorer. So:

- prompt: the first ``num_shots`` *train* examples, each ``"Question: {q}\\nAnswer: {a}\\n\\n"``,
  followed by ``"Question: {q}\\nAnswer:"`` for the test question;
- request: ``POST /v1/completions`` with temperature 0, seed 42, ``max_tokens`` 256 and stop
  strings ``["Question", "Assistant:", "<|separator|>"]``;
- score: drop commas, take the *last* run of digits, read it as a Python integer literal;
  no digits (or a literal Python rejects, e.g. ``007``) is invalid. The sign is never read, so
  ``-10`` scores as 10 — for labels too (two test answers are negative), which keeps them
  consistent. A request that fails counts as an invalid answer, as in vLLM.

Where we differ on purpose: every request is bounded in time and retried, and a run whose failures
exceed ``max_errors`` stops with a :class:`~recipectl.checks.client.CheckError` instead of
quietly scoring a dead server as 0 %.
"""

from __future__ import annotations

import asyncio
import json
import math
import re
import time
from collections.abc import Callable, Coroutine, Iterator
from dataclasses import dataclass
from functools import lru_cache
from importlib.resources import files
from importlib.resources.abc import Traversable
from pathlib import Path
from typing import Any

import httpx
from pydantic import BaseModel, ConfigDict

from recipectl.checks.client import CheckError, RequestFailed, endpoint, post_json

__all__ = [
    "STOP",
    "GSM8KResult",
    "GateVerdict",
    "Question",
    "build_prompts",
    "extract_answer",
    "gate",
    "load_fewshot",
    "load_test",
    "run_gsm8k",
]

STOP: tuple[str, ...] = ("Question", "Assistant:", "<|separator|>")
SEED = 42  # vLLM's eval sends seed 42 by default; harmless at temperature 0, kept for parity
DEFAULT_TOLERANCE = 0.08  # vLLM CI: pass when accuracy >= threshold - 0.08

_DIGITS = re.compile(r"\d+")

#: Called after every finished question with (done, total, correct so far).
ProgressCallback = Callable[[int, int, int], None]


def extract_answer(text: str) -> int | None:
    """The model's answer as vLLM reads it, or ``None`` when invalid.

    vLLM evaluates the last digit run with ``ast.literal_eval`` and treats a ``SyntaxError`` as
    invalid; we apply the same integer-literal rules directly: ASCII digits only (``\\d`` also
    matches e.g. Arabic-Indic digits, which Python literals reject), no leading zeros unless the
    number is all zeros, and not longer than Python will convert (4300 digits).
    """
    numbers = _DIGITS.findall(text.replace(",", ""))
    if not numbers:
        return None
    last = numbers[-1]
    if not last.isascii():
        return None
    if len(last) > 1 and last[0] == "0" and last.strip("0"):
        return None
    try:
        return int(last)
    except ValueError:  # beyond sys.get_int_max_str_digits()
        return None


@dataclass(frozen=True)
class Question:
    """One GSM8K item: the question, the reference solution and its scored label."""

    question: str
    answer: str
    label: int


def _data_dir() -> Traversable:
    try:
        return files("recipectl").joinpath("data", "gsm8k")
    except NotADirectoryError:
        # An editable install made before recipectl/__init__.py existed maps ``recipectl`` as a
        # namespace package, which importlib.resources cannot read; `pip install -e .` fixes
        # it, and until then the files are next to this module.
        return Path(__file__).resolve().parents[1] / "data" / "gsm8k"


def _read_jsonl(name: str) -> tuple[Question, ...]:
    resource = _data_dir().joinpath(name)
    items: list[Question] = []
    for line in resource.read_text(encoding="utf-8").splitlines():
        if not line.strip() or line.startswith("#"):  # vLLM skips '#' lines too
            continue
        row = json.loads(line)
        label = extract_answer(row["answer"])
        if label is None:
            raise ValueError(f"gsm8k/{name}: reference answer without a number: {row['answer']!r}")
        items.append(Question(row["question"], row["answer"], label))
    return tuple(items)


@lru_cache(maxsize=1)
def load_test() -> tuple[Question, ...]:
    """The 1,319 GSM8K test questions shipped with the package (MIT, openai/grade-school-math)."""
    return _read_jsonl("test.jsonl")


@lru_cache(maxsize=1)
def load_fewshot() -> tuple[Question, ...]:
    """The first train examples — all the few-shot prompt uses, so all the package ships."""
    return _read_jsonl("train_fewshot.jsonl")


def build_prompts(num_questions: int, num_shots: int = 5) -> tuple[list[str], list[int]]:
    """Prompts and labels for the first ``num_questions`` test questions (capped at 1,319)."""
    shots = load_fewshot()
    if not 0 <= num_shots <= len(shots):
        raise ValueError(f"num_shots must be between 0 and {len(shots)}, got {num_shots}")
    if num_questions < 1:
        raise ValueError(f"num_questions must be >= 1, got {num_questions}")
    prefix = "".join(f"Question: {s.question}\nAnswer: {s.answer}\n\n" for s in shots[:num_shots])
    test = load_test()[:num_questions]
    return [f"{prefix}Question: {q.question}\nAnswer:" for q in test], [q.label for q in test]


class GSM8KResult(BaseModel):
    """What a GSM8K run measured. Latencies are per question, over questions that succeeded."""

    model_config = ConfigDict(frozen=True)

    n: int
    correct: int
    accuracy: float
    invalid_rate: float
    errors: int
    latency_p50_s: float | None
    latency_p90_s: float | None
    latency_p99_s: float | None
    output_tokens: int
    output_tokens_per_s: float
    questions_per_s: float
    duration_s: float
    num_shots: int
    max_tokens: int
    error_samples: tuple[str, ...] = ()


class GateVerdict(BaseModel):
    """Pass/fail against a reference accuracy, with the sentence a human reads."""

    model_config = ConfigDict(frozen=True)

    passed: bool
    accuracy: float
    threshold: float
    tolerance: float
    bar: float
    message: str


def gate(result: GSM8KResult, threshold: float, tolerance: float = DEFAULT_TOLERANCE) -> GateVerdict:
    """Pass when ``accuracy >= threshold - tolerance`` (vLLM CI's rule); say why either way."""
    bar = threshold - tolerance
    passed = result.accuracy >= bar
    head = (
        f"GSM8K {'PASS' if passed else 'FAIL'}: accuracy {result.accuracy:.3f} "
        f"{'>=' if passed else '<'} {bar:.3f} (reference {threshold:.3f} - tolerance "
        f"{tolerance:.3f}) over {result.n} questions, {result.num_shots}-shot"
    )
    notes: list[str] = []
    if result.errors:
        notes.append(f"{result.errors} requests failed and were scored as wrong")
    if not passed and result.invalid_rate >= 0.5:
        notes.append(
            f"{result.invalid_rate:.0%} of completions held no number: the server is producing "
            "garbage (corrupted transferred KV/SSM state, wrong model, or dummy weights)"
        )
    message = head + ("; " + "; ".join(notes) if notes else "")
    return GateVerdict(
        passed=passed,
        accuracy=result.accuracy,
        threshold=threshold,
        tolerance=tolerance,
        bar=bar,
        message=message,
    )


def _percentile(sorted_values: list[float], q: float) -> float | None:
    """Linear-interpolated percentile (numpy's default), ``q`` in [0, 1]."""
    if not sorted_values:
        return None
    k = (len(sorted_values) - 1) * q
    lo = math.floor(k)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (k - lo)


def _completion(data: dict[str, object]) -> tuple[str, int]:
    """(text, completion tokens) from a /v1/completions body; RequestFailed if malformed."""
    try:
        text = data["choices"][0]["text"]  # type: ignore[index]
    except (KeyError, IndexError, TypeError):
        raise RequestFailed("response has no choices[0].text") from None
    usage = data.get("usage")
    tokens = usage.get("completion_tokens", 0) if isinstance(usage, dict) else 0
    return (text if isinstance(text, str) else ""), int(tokens or 0)


async def run_gsm8k(
    client: httpx.AsyncClient,
    base_url: str,
    model: str,
    *,
    num_questions: int = 1319,
    num_shots: int = 5,
    concurrency: int = 64,
    max_tokens: int = 256,
    request_timeout_s: float = 600.0,
    retries: int = 1,
    backoff_s: float = 0.5,
    max_errors: int | None = None,
    on_progress: ProgressCallback | None = None,
) -> GSM8KResult:
    """Run GSM8K against ``base_url`` (a server or the P/D router) and score it.

    ``concurrency`` workers each keep one request in flight. Each attempt is bounded by
    ``request_timeout_s`` end to end and retried ``retries`` times after ``backoff_s``,
    doubling (see :func:`post_json`). Failed questions are scored as invalid, as vLLM does;
    once more than ``max_errors`` fail (default: 1 % of the questions) the run stops with
    :class:`CheckError`, so a hung server fails after about ``(retries + 1) *
    request_timeout_s`` plus backoff instead of hanging the run. ``on_progress(done, total,
    correct)`` is called after every finished question (for a progress bar).

    Past 60 lines only by its keyword signature and this text: the worker stays a closure over
    the run's counters, which it alone updates.
    """
    if concurrency < 1:
        raise ValueError(f"concurrency must be >= 1, got {concurrency}")
    prompts, labels = build_prompts(num_questions, num_shots)
    total = len(prompts)
    allowed = total // 100 if max_errors is None else max_errors
    url = endpoint(base_url, "/v1/completions")
    preds: list[int | None] = [None] * total
    tokens = [0] * total
    latencies: list[float] = []
    failures: list[str] = []
    done = correct = 0
    pending: Iterator[int] = iter(range(total))

    async def worker() -> None:
        nonlocal done, correct
        for i in pending:  # shared iterator: each index is taken by exactly one worker
            payload = {
                "model": model,
                "prompt": prompts[i],
                "max_tokens": max_tokens,
                "temperature": 0.0,
                "seed": SEED,
                "stop": list(STOP),
            }
            started = time.perf_counter()
            try:
                data = await post_json(
                    client, url, payload, timeout_s=request_timeout_s, retries=retries, backoff_s=backoff_s
                )
                text, tokens[i] = _completion(data)
            except RequestFailed as exc:
                failures.append(f"question {i}: {exc}")
                if len(failures) > allowed:
                    raise _stopped(failures, total, allowed, url) from None
            else:
                latencies.append(time.perf_counter() - started)
                preds[i] = extract_answer(text)
                correct += preds[i] == labels[i]
            done += 1
            if on_progress is not None:
                on_progress(done, total, correct)

    duration = await _run_workers(worker, min(concurrency, total))
    return _result(preds, correct, tokens, latencies, failures, duration, num_shots=num_shots, max_tokens=max_tokens)


def _result(
    preds: list[int | None],
    correct: int,
    tokens: list[int],
    latencies: list[float],
    failures: list[str],
    duration: float,
    *,
    num_shots: int,
    max_tokens: int,
) -> GSM8KResult:
    """A finished run's score, latency percentiles and rates."""
    total = len(preds)
    latencies = sorted(latencies)
    out_tokens = sum(tokens)
    return GSM8KResult(
        n=total,
        correct=correct,
        accuracy=correct / total,
        invalid_rate=sum(p is None for p in preds) / total,
        errors=len(failures),
        latency_p50_s=_percentile(latencies, 0.50),
        latency_p90_s=_percentile(latencies, 0.90),
        latency_p99_s=_percentile(latencies, 0.99),
        output_tokens=out_tokens,
        output_tokens_per_s=out_tokens / duration if duration > 0 else 0.0,
        questions_per_s=total / duration if duration > 0 else 0.0,
        duration_s=duration,
        num_shots=num_shots,
        max_tokens=max_tokens,
        error_samples=tuple(failures[:5]),
    )


def _stopped(failures: list[str], total: int, allowed: int, url: str) -> CheckError:
    """The error that stops a run once more requests failed than it allows."""
    return CheckError(
        f"GSM8K stopped: {len(failures)} of {total} requests failed "
        f"(at most {allowed} allowed). First failure: {failures[0]}",
        fix=f"check that {url} answers (is the server or router hung?), "
        "or raise the request timeout if the model is only slow",
    )


async def _run_workers(worker: Callable[[], Coroutine[Any, Any, None]], n: int) -> float:
    """Run `n` copies of `worker` until all are done; the seconds that took. A run stopped by
    one of them (CheckError) or a single failure is raised as itself, not as a group."""
    started = time.perf_counter()
    try:
        async with asyncio.TaskGroup() as group:
            for _ in range(n):
                group.create_task(worker())
    except BaseExceptionGroup as eg:
        aborts = [e for e in eg.exceptions if isinstance(e, CheckError)]
        if aborts:
            raise aborts[0] from None
        if len(eg.exceptions) == 1:
            raise eg.exceptions[0] from None
        raise
    return time.perf_counter() - started
