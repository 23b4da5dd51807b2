"""Parity: first divergence found, classified by the reference's margin, and judged — against
two real local servers (a reference and a 'P/D' candidate) with scripted tokens and logprobs."""

from __future__ import annotations

import asyncio
import zlib
from collections.abc import Callable
from typing import Any

import pytest

from recipectl.checks.client import RequestFailed, make_client
from recipectl.checks.parity import (
    DEFAULT_PROMPTS,
    ParityResult,
    Step,
    compare_steps,
    parse_steps,
    run_parity,
)

from .fakeserver import FakeServer

# --------------------------------------------------------------------------- pure comparison


def steps(*tokens: str, margin: float = 3.0) -> list[Step]:
    return [Step(t, {t: -0.05, "<alt>": -0.05 - margin}) for t in tokens]


COMPARE = [
    ("identical", steps("a", "b", "c"), steps("a", "b", "c"), "match", None, None),
    (
        "near tie",
        [*steps("a"), Step("b", {"b": -0.70, "x": -0.73}), *steps("c")],
        steps("a", "x", "y"),
        "near_tie",
        1,
        0.03,
    ),
    ("confident", steps("a", "b", margin=6.0), steps("a", "z"), "confident", 1, 6.0),
    ("first token", steps("Paris", margin=9.0), steps("zzz"), "confident", 0, 9.0),
    ("candidate shorter", steps("a", "b", "c", margin=0.01), steps("a", "b"), "near_tie", 2, 0.01),
    ("reference shorter", steps("a"), steps("a", "b"), "unknown", 1, None),
    ("one alternative", [Step("a", {"a": -0.1})], [Step("b", {"b": -0.2})], "unknown", 0, None),
    ("both empty", [], [], "match", None, None),
]


@pytest.mark.parametrize(
    ("ref", "cand", "kind", "position", "margin"), [c[1:] for c in COMPARE], ids=[c[0] for c in COMPARE]
)
def test_compare_steps(
    ref: list[Step], cand: list[Step], kind: str, position: int | None, margin: float | None
) -> None:
    out = compare_steps("p", ref, cand, near_tie_nats=0.1)
    assert out.classification == kind and out.match is (kind == "match")
    assert out.first_divergence == position
    if margin is None:
        assert out.margin_nats is None
    else:
        assert out.margin_nats == pytest.approx(margin)


def test_parse_completions_shape_including_null_entries() -> None:
    choice = {
        "text": "ab",
        "logprobs": {
            "tokens": ["a", "b"],
            "token_logprobs": [-0.1, -0.2],
            "top_logprobs": [{"a": -0.1, "c": -2.0}, None],
            "text_offset": [0, 1],
        },
    }
    assert parse_steps(choice) == [Step("a", {"a": -0.1, "c": -2.0}), Step("b", {})]


def test_parse_chat_shape() -> None:
    choice = {
        "logprobs": {
            "content": [
                {
                    "token": "a",
                    "logprob": -0.1,
                    "top_logprobs": [{"token": "a", "logprob": -0.1}, {"token": "c", "logprob": -1.5}],
                }
            ]
        }
    }
    assert parse_steps(choice) == [Step("a", {"a": -0.1, "c": -1.5})]
    assert parse_steps(choice)[0].margin() == pytest.approx(1.4)


@pytest.mark.parametrize("choice", [{"text": "x"}, {"logprobs": None}, {"logprobs": {"x": 1}}])
def test_parse_without_logprobs_fails(choice: dict[str, Any]) -> None:
    with pytest.raises(RequestFailed):
        parse_steps(choice)


def test_default_prompts_are_deterministic_and_varied() -> None:
    assert len(DEFAULT_PROMPTS) == 20 == len(set(DEFAULT_PROMPTS))
    assert max(len(p) for p in DEFAULT_PROMPTS) > 2500  # spans several KV blocks
    from recipectl.checks import parity

    assert parity._long_prompt() == DEFAULT_PROMPTS[-1]


# --------------------------------------------------------------------------- real servers

Script = Callable[[str, dict[str, Any]], tuple[int, Any]]


class CompletionsServer(FakeServer):
    def __init__(self, script: Script):
        super().__init__(lambda req: script(req.path, req.body))

    @property
    def bodies(self) -> list[dict[str, Any]]:
        return [r.body for r in self.requests]


def tokens_for(prompt: str, n: int) -> list[str]:
    seed = zlib.crc32(prompt.encode())
    return [f"t{(seed >> (i % 24)) % 97}_{i}" for i in range(n)]


def answer(tokens: list[str], tops: list[dict[str, float]]) -> tuple[int, Any]:
    return 200, {
        "choices": [
            {
                "index": 0,
                "text": "".join(tokens),
                "logprobs": {
                    "tokens": tokens,
                    "token_logprobs": [t[k] for t, k in zip(tops, tokens, strict=True)],
                    "top_logprobs": tops,
                    "text_offset": list(range(len(tokens))),
                },
            }
        ]
    }


TIE, BROKEN = DEFAULT_PROMPTS[3], DEFAULT_PROMPTS[7]


def reference(path: str, body: dict[str, Any]) -> tuple[int, Any]:
    toks = tokens_for(body["prompt"], body["max_tokens"])
    tops = [{t: -0.1, "<alt>": -4.0} for t in toks]
    if body["prompt"] == TIE:  # position 5: the reference barely prefers its token
        tops[5] = {toks[5]: -0.69, "<tie>": -0.71}
    return answer(toks, tops)


def candidate(corrupt: bool) -> Script:
    def script(path: str, body: dict[str, Any]) -> tuple[int, Any]:
        toks = tokens_for(body["prompt"], body["max_tokens"])
        if body["prompt"] == TIE:
            toks = toks[:5] + ["<tie>"] + ["drift"] * (len(toks) - 6)
        if corrupt and body["prompt"] == BROKEN:
            toks = ["garbage"] * len(toks)
        return answer(toks, [{t: -0.1, "<alt>": -4.0} for t in toks])

    return script


def parity(cand_url: str, ref_url: str, **kw: Any) -> ParityResult:
    async def go() -> ParityResult:
        async with make_client(concurrency=8) as client:
            return await run_parity(client, cand_url, ref_url, "tiny", max_tokens=12, request_timeout_s=5, **kw)

    return asyncio.run(go())


def test_a_near_tie_passes_and_is_reported() -> None:
    with CompletionsServer(reference) as ref, CompletionsServer(candidate(False)) as cand:
        result = parity(cand.url, ref.url)
    assert result.passed, result.message
    assert result.exact_match_rate == 19 / 20 and result.near_ties == 1
    tie = next(p for p in result.prompts if p.prompt == TIE)
    assert (tie.first_divergence, tie.candidate_token) == (5, "<tie>")
    assert tie.reference_token == tokens_for(TIE, 12)[5]
    assert tie.margin_nats == pytest.approx(0.02)
    assert "19/20 prompts token-identical" in result.message
    for body in ref.bodies + cand.bodies:
        assert body["temperature"] == 0 and body["logprobs"] >= 2 and body["model"] == "tiny"
    assert len(ref.bodies) == len(cand.bodies) == 20


def test_a_confident_divergence_fails() -> None:
    with CompletionsServer(reference) as ref, CompletionsServer(candidate(True)) as cand:
        result = parity(cand.url, ref.url)
    assert not result.passed and result.confident_divergences == 1
    broken = next(p for p in result.prompts if p.prompt == BROKEN)
    assert broken.first_divergence == 0 and broken.margin_nats == pytest.approx(3.9)
    assert "corrupted transferred state" in result.message and "'garbage'" in result.message


def test_the_match_rate_bar_and_the_near_tie_threshold_are_configurable() -> None:
    with CompletionsServer(reference) as ref, CompletionsServer(candidate(False)) as cand:
        strict = parity(cand.url, ref.url, prompts=DEFAULT_PROMPTS[:5], min_exact_match_rate=1.0)
        tight = parity(cand.url, ref.url, prompts=DEFAULT_PROMPTS[:5], near_tie_nats=0.01)
    assert not strict.passed and "below the bar 100%" in strict.message
    assert not tight.passed and tight.confident_divergences == 1


def test_a_failing_candidate_is_an_error_not_a_match() -> None:
    with CompletionsServer(reference) as ref, CompletionsServer(lambda p, b: (500, {"error": "router down"})) as cand:
        result = parity(cand.url, ref.url, prompts=DEFAULT_PROMPTS[:3], retries=0)
    assert not result.passed and result.errors == 3
    assert "HTTP 500" in result.message and result.prompts[0].classification == "error"


def test_logprobs_below_two_is_refused() -> None:
    with pytest.raises(ValueError, match="logprobs"):
        parity("http://127.0.0.1:1", "http://127.0.0.1:1", logprobs=1)
