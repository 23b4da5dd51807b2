"""How fast is our GSM8K client when the server costs nothing?

Starts a minimal HTTP/1.1 completions server on 127.0.0.1 (random free port) in a child process
— a separate process so the server's CPU does not share our GIL — which answers every
``/v1/completions`` at once with the question's reference solution (a plausible ~100-token
completion). Then runs 200 questions at concurrency 64 through ``run_gsm8k`` and prints wall
time, questions/s and the client's own CPU time. Target: under 2 s, i.e. the client is never
the bottleneck against a real server. ``--profile`` prints the client's hottest functions.

Bounded: the server exits by itself after ``--server-lifetime`` seconds, the run is wrapped in
a deadline, and the child is killed on the way out whatever happens.

    .venv/bin/python benchmarks/gsm8k_client.py [--questions 200] [--concurrency 64] [--profile]
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import json
import pstats
import subprocess
import sys
import time

from recipectl.checks.client import make_client
from recipectl.checks.gsm8k import GSM8KResult, load_test, run_gsm8k

# --------------------------------------------------------------------------- the server (child)


async def _serve(lifetime_s: float) -> None:
    answers = {q.question: " " + q.answer for q in load_test()}

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n"):
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":", 1)[1])
                body = json.loads(await reader.readexactly(length))
                prompt: str = body["prompt"]
                question = prompt.rsplit("Question: ", 1)[-1].removesuffix("\nAnswer:")
                text = answers.get(question, " I think it is 42.\n#### 42")
                data = json.dumps(
                    {
                        "id": "cmpl-bench",
                        "object": "text_completion",
                        "model": body.get("model"),
                        "choices": [{"index": 0, "text": text, "finish_reason": "stop", "logprobs": None}],
                        "usage": {
                            "prompt_tokens": len(prompt) // 4,
                            "completion_tokens": len(text) // 4,
                            "total_tokens": (len(prompt) + len(text)) // 4,
                        },
                    }
                ).encode()
                writer.write(
                    b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                    b"Content-Length: %d\r\n\r\n" % len(data) + data
                )
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0, backlog=512)
    print(server.sockets[0].getsockname()[1], flush=True)
    async with server:
        await asyncio.sleep(lifetime_s)  # never outlives the benchmark by much


# --------------------------------------------------------------------------- the client (parent)


async def _bench(url: str, questions: int, concurrency: int) -> GSM8KResult:
    async with make_client(concurrency=concurrency, timeout_s=10) as client:
        async with asyncio.timeout(60):
            return await run_gsm8k(
                client, url, "bench", num_questions=questions, concurrency=concurrency, request_timeout_s=10, retries=0
            )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--questions", type=int, default=200)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--target-s", type=float, default=2.0)
    parser.add_argument("--server-lifetime", type=float, default=120.0)
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        asyncio.run(_serve(args.server_lifetime))
        return 0

    load_test()  # parse the data set before the clock starts, as the CLI does
    child = subprocess.Popen(
        [sys.executable, __file__, "--serve", "--server-lifetime", str(args.server_lifetime)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None
        port = int(child.stdout.readline())
        url = f"http://127.0.0.1:{port}"
        profiler = cProfile.Profile() if args.profile else None
        cpu0, wall0 = time.process_time(), time.perf_counter()
        if profiler:
            profiler.enable()
        result = asyncio.run(_bench(url, args.questions, args.concurrency))
        if profiler:
            profiler.disable()
        wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
    finally:
        child.kill()
        child.wait(timeout=10)

    ok = wall < args.target_s
    print(f"{result.n} questions at concurrency {args.concurrency} against {url}")
    print(
        f"wall {wall:.3f} s, {result.n / wall:.0f} questions/s, client CPU {cpu:.3f} s, "
        f"p50 {result.latency_p50_s or 0:.4f} s, p99 {result.latency_p99_s or 0:.4f} s, "
        f"accuracy {result.accuracy:.3f}, errors {result.errors}"
    )
    print(f"target < {args.target_s:g} s: {'PASS' if ok else 'FAIL'}")
    if profiler:
        pstats.Stats(profiler).sort_stats("cumulative").print_stats(20)
    return 0 if ok and result.errors == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
