"""How fast NIXL moves a request's state between two processes on this host, alone and beside a
third process that keeps the device busy: the link a P/D deployment's KV and GDN state cross, where
prefill and decode share a GPU (docs/sla-planner.md, "plan --check with the users out of step, and
traces of them").

    ENGINE_PYTHON scripts/nixl-link-bench.py [--device cuda:0] [--mb 41,110] [--repeats 5]

A target process registers a buffer with a NIXL agent (UCX backend); this process READs it into
its own, as vLLM's decode endpoint pulls a request's blocks from prefill's, and times each
transfer from post to done; then the same with a third process running back-to-back matrix
products on the device. Each size in --mb in turn, on one connection. UCX picks its transports
from the environment (UCX_TLS; unset: its own choice; UCX_PROTO_INFO=y prints which it chose).
One JSON line per condition on stdout, as it is measured: the transports UCX was told, the device,
the size, whether the device was busy, each transfer's seconds and the median GB/s (NIXL and UCX
log to stdout too: the results are the lines that start with "{"). Exit 2 where the engine lacks
NIXL or torch, or the device is not there; 1 where a transfer fails or stalls, or a helper
process does not start (the reason on stderr, with progress).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import statistics
import sys
import time
from collections.abc import Iterator

# how long a transfer may take before the run gives up on it (a stalled transport, not a slow one),
# and how long a helper process may take to start (import torch, open the device, make its agent)
TRANSFER_LIMIT_S = 30.0
START_LIMIT_S = 60.0


def _progress(text: str) -> None:
    print(f"nixl-link-bench: {text}", file=sys.stderr, flush=True)


def _buffer(device: str, nbytes: int, fill: int):
    import torch

    return torch.full((nbytes,), fill, dtype=torch.uint8, device=device)


def _agent(name: str):
    from nixl._api import nixl_agent, nixl_agent_config

    return nixl_agent(name, nixl_agent_config(backends=["UCX"]))


def _target(conn, device: str, sizes_mb: list[int]) -> None:
    """Holds a registered buffer of 7s for the initiator to read, until told to stop or its parent
    is gone; sends its agent's metadata and, per size, the descriptors of the buffer's first that
    many MiB."""
    buf = _buffer(device, max(sizes_mb) << 20, 7)
    agent = _agent("target")
    agent.register_memory(buf)
    descs = {mb: agent.get_serialized_descs(agent.get_xfer_descs(buf[: mb << 20])) for mb in sizes_mb}
    conn.send((agent.get_agent_metadata(), descs))
    try:
        conn.recv()
    except EOFError:
        pass  # the parent is gone


def _load(device: str, stop, ready) -> None:
    """Back-to-back matrix products on the device, a server's steps never idle, until told to stop
    or its parent is gone (a parent killed outright leaves no one to tell it)."""
    import torch

    parent = mp.parent_process()
    a = torch.randn(4096, 4096, device=device, dtype=torch.bfloat16 if device != "cpu" else torch.float32)
    ready.set()
    while not stop.is_set() and (parent is None or parent.is_alive()):
        for _ in range(8):
            a = torch.tanh(a @ a)
        if device != "cpu":
            torch.cuda.synchronize()


def _read(agent, local, remote, peer: str) -> float:
    handle = agent.initialize_xfer("READ", local, remote, peer)
    t0 = time.perf_counter()
    state = agent.transfer(handle)
    while state not in ("DONE", "ERR"):
        if time.perf_counter() - t0 > TRANSFER_LIMIT_S:
            raise TimeoutError(f"a transfer not done after {TRANSFER_LIMIT_S:.0f} s")
        state = agent.check_xfer_state(handle)
    seconds = time.perf_counter() - t0
    agent.release_xfer_handle(handle)
    if state == "ERR":
        raise RuntimeError("NIXL reported the transfer failed")
    return seconds


def _metadata(conn, target) -> tuple:
    """What the target sends once it is ready; an error as soon as it has died instead."""
    deadline = time.monotonic() + START_LIMIT_S
    while not conn.poll(0.5):
        if target.exitcode is not None:
            raise RuntimeError(f"the target process exited ({target.exitcode}) before it was ready")
        if time.monotonic() > deadline:
            raise TimeoutError(f"the target process was not ready within {START_LIMIT_S:.0f} s")
    try:
        return conn.recv()
    except EOFError:  # it died with the pipe readable: its end closed
        target.join(5)
        raise RuntimeError(f"the target process exited ({target.exitcode}) before it was ready") from None


def measure(device: str, sizes_mb: list[int], repeats: int) -> Iterator[dict]:
    """Each condition's row as it is measured: a run its time limit stops keeps the rows before."""
    ctx = mp.get_context("spawn")
    ours, theirs = ctx.Pipe()
    target = ctx.Process(target=_target, args=(theirs, device, sizes_mb), daemon=True)
    target.start()
    theirs.close()  # the target's end: ours reads end-of-file once the target is gone
    try:
        _progress(f"starting the target on {device}")
        metadata, descs = _metadata(ours, target)
        dst = _buffer(device, max(sizes_mb) << 20, 0)
        agent = _agent("initiator")
        agent.register_memory(dst)
        peer = agent.add_remote_agent(metadata)
        for mb in sizes_mb:
            local, remote = agent.get_xfer_descs(dst[: mb << 20]), agent.deserialize_descs(descs[mb])
            dst[: mb << 20].zero_()
            _progress(f"{mb} MiB: the first read (the connection's set-up, not timed)")
            _read(agent, local, remote, peer)
            if int(dst[: mb << 20].min()) != 7:
                raise RuntimeError("the bytes read are not the target's")
            for busy in (False, True):
                _progress(f"{mb} MiB: {repeats} reads, the device {'busy' if busy else 'idle'}")
                timed = _timed(ctx, (agent, local, remote, peer), device, busy, repeats)
                yield {
                    "ucx_tls": os.environ.get("UCX_TLS", "UCX's own choice"),
                    "device": device,
                    "mb": mb,
                    "device_busy": busy,
                    "seconds": timed,
                    "gb_per_s": (mb << 20) / statistics.median(timed) / 1e9,
                }
    finally:
        try:
            ours.send("stop")
        except (BrokenPipeError, OSError):
            pass  # the target is gone already
        target.join(10)
        if target.is_alive():
            target.kill()


def _timed(ctx, transfer: tuple, device: str, busy: bool, repeats: int) -> list[float]:
    """``repeats`` transfers' seconds, with the device kept busy by another process or not."""
    stop, ready = ctx.Event(), ctx.Event()
    load = ctx.Process(target=_load, args=(device, stop, ready), daemon=True) if busy else None
    try:
        if load:
            load.start()
            if not ready.wait(START_LIMIT_S) or not load.is_alive():
                raise RuntimeError(f"the process to keep {device} busy did not start (exit {load.exitcode})")
            time.sleep(0.5)
        seconds = [_read(*transfer) for _ in range(repeats)]
        if load and not load.is_alive():
            raise RuntimeError(f"the process keeping {device} busy stopped during the reads (exit {load.exitcode})")
        return seconds
    finally:
        if load:
            stop.set()
            load.join(10)
            if load.is_alive():
                load.kill()


def _sizes(text: str) -> list[int]:
    sizes = [int(x) for x in text.split(",")]
    if any(mb < 1 for mb in sizes):
        raise ValueError(text)
    return sizes


def _positive(text: str) -> int:
    n = int(text)
    if n < 1:
        raise ValueError(text)
    return n


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda:0", help="cuda:N, or cpu (host memory)")
    ap.add_argument(
        "--mb",
        type=_sizes,
        default=[41, 110],
        help="MiB per transfer, comma-separated (Qwen3.5-9B's state at 512 tokens: about 41; at 2,560: about 105)",
    )
    ap.add_argument("--repeats", type=_positive, default=5)
    args = ap.parse_args(argv)
    try:
        import nixl._api  # noqa: F401
        import torch
    except ImportError as e:
        print(f"error: this Python has no {e.name}: run it with the engine's (ENGINE/bin/python)", file=sys.stderr)
        return 2
    if args.device != "cpu":
        kind, _, index = args.device.partition(":")
        if kind != "cuda" or not (index or "0").isdigit():
            print(f"error: --device {args.device}: cuda:N or cpu", file=sys.stderr)
            return 2
        if int(index or 0) >= torch.cuda.device_count():
            print(
                f"error: --device {args.device}: this host has {torch.cuda.device_count()} CUDA device(s)",
                file=sys.stderr,
            )
            return 2
    try:
        for row in measure(args.device, args.mb, args.repeats):
            print(json.dumps(row), flush=True)
    except (RuntimeError, TimeoutError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
