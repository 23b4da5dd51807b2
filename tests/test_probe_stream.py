"""The calibration client's reading of a streamed completion (recipectl/bench/probe.py): every
event is one JSON object, whatever the model's text holds and wherever the bytes are cut."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys

import httpx
from hypothesis import given, settings
from hypothesis import strategies as st

from recipectl.bench.probe import run_point, sse_data

# The line breaks str.splitlines() knows besides LF and CR: JSON leaves the last three unescaped
# (json.dumps with ensure_ascii=False, as vLLM's responses are), so they reach the stream raw.
LINE_BREAKS = "\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"


def event(text: str, **extra) -> bytes:
    body = {"choices": [{"index": 0, "text": text}], **extra}
    return b"data: " + json.dumps(body, ensure_ascii=False).encode() + b"\n\n"


def payloads(chunks: list[bytes]) -> list[str]:
    async def stream():
        for c in chunks:
            yield c

    async def read() -> list[str]:
        return [p async for p in sse_data(httpx.Response(200, content=stream()))]

    return asyncio.run(read())


@settings(max_examples=200, deadline=None)
@given(
    texts=st.lists(st.text(alphabet=st.sampled_from("ab \n\r" + LINE_BREAKS), max_size=12), min_size=1, max_size=5),
    cuts=st.lists(st.integers(min_value=0, max_value=400), max_size=8),
    crlf=st.booleans(),
)
def test_every_event_is_read_whole_wherever_the_stream_is_cut(texts, cuts, crlf):
    data = b"".join(event(t) for t in texts) + b"data: [DONE]\n\n"
    if crlf:
        data = data.replace(b"\n", b"\r\n")
    edges = sorted({0, len(data), *(c % (len(data) + 1) for c in cuts)})
    chunks = [data[a:b] for a, b in zip(edges, edges[1:], strict=False)]
    got = payloads(chunks)
    assert got[-1] == "[DONE]"
    assert [json.loads(p)["choices"][0]["text"] for p in got[:-1]] == texts


def test_a_streamed_point_reads_text_with_u2028_through_a_real_socket(fake_server):
    # what the H200 run met at concurrency 16: a token's text held U+2028 and the point failed
    # with "JSONDecodeError: Unterminated string"
    def handler(req):
        out = req.raw
        out.send_response(200)
        out.send_header("Content-Type", "text/event-stream")
        out.send_header("Connection", "close")
        out.end_headers()
        for text in ("a\u2028b", "\x85", "c\u2029"):
            out.wfile.write(event(text))
            out.wfile.flush()
        out.wfile.write(event("", usage={"completion_tokens": 3}).replace(b'"choices"', b'"_"'))
        out.wfile.write(b"data: [DONE]\n\n")
        out.wfile.flush()
        out.close_connection = True
        return (0, None)

    server = fake_server(handler)
    r = run_point(server.url, "m", isl=8, osl=3, concurrency=2, num_requests=4, vocab_size=512)
    assert r.errors == []
    assert [s.output_tokens for s in r.samples] == [3, 3, 3, 3]


def test_no_two_calls_send_a_prompt_that_shares_a_prefix(fake_server):
    """The prompts of every call are its own, whatever seed it is given: a second calibration of
    one running deployment (`calibrate --run`, the accuracy benchmark's recalibration) sent the
    first's prompts again and the engine's prefix cache answered them (a 512-token prompt in 0.3 s
    that had taken 1.1 s). Two calls with one seed, and a call in another process, share no
    prompt's first 16 tokens (an attention block's worth on the smallest block size)."""
    sent: list[list[int]] = []

    def handler(req):
        sent.append(req.body["prompt"])
        return (200, {"choices": [{"text": "x"}], "usage": {"completion_tokens": 1}})

    server = fake_server(handler)
    for _ in range(2):
        r = run_point(server.url, "m", isl=64, osl=1, concurrency=1, num_requests=3, vocab_size=512, stream=False)
        assert r.errors == []
    # the same first call from two other processes, as two runs of `recipectl calibrate` make it
    for _ in range(2):
        subprocess.run(
            [
                sys.executable,
                "-c",
                "import sys; from recipectl.bench.probe import run_point; run_point(sys.argv[1], 'm', "
                "isl=64, osl=1, concurrency=1, num_requests=3, vocab_size=512, stream=False)",
                server.url,
            ],
            check=True,
            timeout=60,
        )
    heads = [tuple(p[:16]) for p in sent]
    assert len(sent) == 12 and all(len(p) == 64 for p in sent)
    assert len(set(heads)) == len(heads)
