"""Token-level parity between the P/D path and an aggregated reference server, judged by logprobs.

Why logprobs: greedy decoding through P/D is not bit-identical to a single server — decode
recomputes the last prompt token from transferred state, and bf16 arithmetic in a different
order can flip the argmax where the top two tokens are nearly tied (on CPU we saw divergences
at margins of ~0.05 nats). Such a divergence is numerical and harmless. A corrupted transfer
looks different: the outputs differ where the reference was *confident*. So at the first
divergence we read the reference's margin (logprob of its top token minus the runner-up) and
call it a near-tie below ``near_tie_nats`` and a confident divergence above.

Both servers get the same prompts via ``/v1/completions`` with temperature 0 and ``logprobs``
(top-k >= 2). The completions shape (``logprobs.tokens`` + ``logprobs.top_logprobs``, a list of
``{token: logprob}`` dicts) and the chat shape (``logprobs.content[].top_logprobs``) are both read.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import httpx
from pydantic import BaseModel, ConfigDict

from recipectl.checks.client import RequestFailed, endpoint, post_json

__all__ = [
    "DEFAULT_PROMPTS",
    "ParityResult",
    "PromptParity",
    "Step",
    "compare_steps",
    "parse_steps",
    "run_parity",
]


def _long_prompt() -> str:
    """~1,000 tokens, so the transferred KV spans several blocks (and GDN state chunks)."""
    colours = ("red", "green", "blue", "yellow", "black", "white", "orange")
    lines = [
        f"{i}. The {colours[i % len(colours)]} box on shelf {i % 9} holds {(i * 7) % 13} marbles." for i in range(1, 61)
    ]
    return "Inventory list:\n" + "\n".join(lines) + "\nThe box on shelf 4 that is blue holds"


DEFAULT_PROMPTS: tuple[str, ...] = (
    "The capital of France is",
    'def fibonacci(n):\n    """Return the n-th Fibonacci number."""\n',
    "Q: What is 17 multiplied by 23?\nA:",
    "The three primary colors are",
    "Once upon a time, in a small village by the sea,",
    "Translate to French: 'The cat sleeps on the warm windowsill.'\nFrench:",
    "1, 2, 3, 5, 8, 13, 21,",
    "The chemical symbol for gold is",
    "SELECT name, COUNT(*) FROM orders",
    "Photosynthesis is the process by which",
    "import numpy as np\n\narr = np.arange(10)\nprint(",
    "The largest planet in our solar system is",
    "Dear hiring manager,\n\nI am writing to apply for",
    "A haiku about autumn leaves:\n",
    "In 1969, the Apollo 11 mission",
    "The quick brown fox jumps over the lazy dog. The quick brown fox",
    "Water boils at a temperature of",
    '{"name": "Alice", "age": 30, "city":',
    "To make a cup of tea, first",
    _long_prompt(),
)

Classification = Literal["match", "near_tie", "confident", "unknown", "error"]


@dataclass(frozen=True)
class Step:
    """One generated token and the top alternatives the server reported for that position."""

    token: str
    top: dict[str, float] = field(default_factory=dict)

    def margin(self) -> float | None:
        """Top logprob minus runner-up, in nats; ``None`` with fewer than two alternatives."""
        best = sorted(self.top.values(), reverse=True)
        return best[0] - best[1] if len(best) >= 2 else None


def parse_steps(choice: dict[str, Any]) -> list[Step]:
    """Steps from one ``choices[i]`` entry, completions or chat logprobs shape."""
    logprobs = choice.get("logprobs")
    if not isinstance(logprobs, dict):
        raise RequestFailed("response has no logprobs (does the server allow logprobs?)")
    if isinstance(logprobs.get("content"), list):  # chat shape
        return [
            Step(
                str(item["token"]),
                {str(a["token"]): float(a["logprob"]) for a in item.get("top_logprobs") or []},
            )
            for item in logprobs["content"]
        ]
    tokens = logprobs.get("tokens")
    if not isinstance(tokens, list):
        raise RequestFailed("logprobs has neither tokens nor content")
    tops = logprobs.get("top_logprobs") or [None] * len(tokens)
    return [
        Step(str(tok), {str(k): float(v) for k, v in (top or {}).items()})
        for tok, top in zip(tokens, tops, strict=False)
    ]


class PromptParity(BaseModel):
    """How one prompt compared; positions count generated tokens from 0."""

    model_config = ConfigDict(frozen=True)

    prompt: str
    match: bool
    classification: Classification
    first_divergence: int | None = None
    reference_token: str | None = None
    candidate_token: str | None = None
    margin_nats: float | None = None
    reference_tokens: int = 0
    candidate_tokens: int = 0
    error: str | None = None


def compare_steps(
    prompt: str, reference: Sequence[Step], candidate: Sequence[Step], near_tie_nats: float
) -> PromptParity:
    """Compare token by token; classify the first divergence by the reference's margin."""
    n_ref, n_cand = len(reference), len(candidate)
    pairs = enumerate(zip(reference, candidate, strict=False))
    k = next((i for i, (r, c) in pairs if r.token != c.token), min(n_ref, n_cand))
    if k == n_ref == n_cand:
        return PromptParity(
            prompt=prompt, match=True, classification="match", reference_tokens=n_ref, candidate_tokens=n_cand
        )
    ref_tok = reference[k].token if k < len(reference) else None
    cand_tok = candidate[k].token if k < len(candidate) else None
    margin = reference[k].margin() if k < len(reference) else None
    if margin is None:
        kind: Classification = "unknown"  # the reference ended here, or gave one alternative
    elif margin < near_tie_nats:
        kind = "near_tie"
    else:
        kind = "confident"
    return PromptParity(
        prompt=prompt,
        match=False,
        classification=kind,
        first_divergence=k,
        reference_token=ref_tok,
        candidate_token=cand_tok,
        margin_nats=margin,
        reference_tokens=n_ref,
        candidate_tokens=n_cand,
    )


class ParityResult(BaseModel):
    """Per-prompt outcomes, the overall match rate and the verdict on the configured bars."""

    model_config = ConfigDict(frozen=True)

    prompts: tuple[PromptParity, ...]
    exact_match_rate: float
    near_ties: int
    confident_divergences: int
    unknown_divergences: int
    errors: int
    min_exact_match_rate: float
    near_tie_nats: float
    passed: bool
    message: str


def _verdict(outcomes: Sequence[PromptParity], min_rate: float, near_tie_nats: float) -> ParityResult:
    count = {
        c: sum(o.classification == c for o in outcomes) for c in ("match", "near_tie", "confident", "unknown", "error")
    }
    rate = count["match"] / len(outcomes)
    problems: list[str] = []
    if count["error"]:
        first = next(o for o in outcomes if o.error)
        problems.append(f"{count['error']} prompts got no answer (first: {first.error})")
    for o in outcomes:
        if o.classification in ("confident", "unknown"):
            margin = "unknown" if o.margin_nats is None else f"{o.margin_nats:.2f} nats"
            problems.append(
                f"prompt {o.prompt[:40]!r} diverged at token {o.first_divergence} where the "
                f"reference was {'confident' if o.margin_nats is not None else 'not measurable'} "
                f"(margin {margin}): reference {o.reference_token!r}, P/D {o.candidate_token!r}"
            )
    if rate < min_rate:
        problems.append(f"exact-match rate {rate:.0%} is below the bar {min_rate:.0%}")
    passed = not problems
    summary = (
        f"{count['match']}/{len(outcomes)} prompts token-identical ({rate:.0%}); "
        f"{count['near_tie']} near-tie divergences (margin < {near_tie_nats:g} nats, numerical)"
    )
    if passed:
        message = f"parity PASS: {summary}"
    else:
        message = (
            f"parity FAIL: {summary}; "
            + "; ".join(problems[:5])
            + ("; confident divergences mean corrupted transferred state" if count["confident"] else "")
        )
    return ParityResult(
        prompts=tuple(outcomes),
        exact_match_rate=rate,
        near_ties=count["near_tie"],
        confident_divergences=count["confident"],
        unknown_divergences=count["unknown"],
        errors=count["error"],
        min_exact_match_rate=min_rate,
        near_tie_nats=near_tie_nats,
        passed=passed,
        message=message,
    )


async def run_parity(
    client: httpx.AsyncClient,
    candidate_url: str,
    reference_url: str,
    model: str,
    *,
    reference_model: str | None = None,
    prompts: Sequence[str] = DEFAULT_PROMPTS,
    max_tokens: int = 32,
    logprobs: int = 5,
    near_tie_nats: float = 0.1,
    min_exact_match_rate: float = 0.5,
    concurrency: int = 8,
    request_timeout_s: float = 120.0,
    retries: int = 1,
    token_ids: bool = False,
) -> ParityResult:
    """Send ``prompts`` greedily to the candidate (P/D router) and the reference; compare.

    Passes when every prompt got answers, no divergence is confident (or unmeasurable), and
    the exact-match rate reaches ``min_exact_match_rate``. The default bar is lenient (0.5)
    because near-ties are expected on bf16; the confident-divergence rule is the real test.
    ``token_ids=True`` asks vLLM for ``token_id:N`` strings so two tokens that decode to the
    same text can neither compare equal nor collide in the top-logprobs dict.
    """
    if logprobs < 2:
        raise ValueError("logprobs must be >= 2 to measure a margin")
    if not prompts:
        raise ValueError("at least one prompt is needed")
    limit = asyncio.Semaphore(max(1, concurrency))

    async def generate(url: str, name: str, prompt: str) -> list[Step]:
        payload: dict[str, Any] = {
            "model": name,
            "prompt": prompt,
            "max_tokens": max_tokens,
            "temperature": 0.0,
            "logprobs": logprobs,
            **({"return_tokens_as_token_ids": True} if token_ids else {}),
        }
        async with limit:
            data = await post_json(
                client, endpoint(url, "/v1/completions"), payload, timeout_s=request_timeout_s, retries=retries
            )
        choices = data.get("choices")
        if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
            raise RequestFailed(f"{url}: response has no choices")
        return parse_steps(choices[0])

    async def one(prompt: str) -> PromptParity:
        ref, cand = await asyncio.gather(
            generate(reference_url, reference_model or model, prompt),
            generate(candidate_url, model, prompt),
            return_exceptions=True,
        )
        for got in (ref, cand):
            if isinstance(got, RequestFailed):
                return PromptParity(prompt=prompt, match=False, classification="error", error=str(got))
            if isinstance(got, BaseException):
                raise got
        assert isinstance(ref, list) and isinstance(cand, list)
        return compare_steps(prompt, ref, cand, near_tie_nats)

    outcomes = await asyncio.gather(*(one(p) for p in prompts))
    return _verdict(outcomes, min_exact_match_rate, near_tie_nats)
