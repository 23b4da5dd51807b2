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
NIXL or torch, or the device is not there.
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

# how long a transfer may take before the run gives up on it (a stalled transport, not a slow one)
TRANSFER_LIMIT_S = 60.0


def _buffer(device: str, nbytes: int, fill: int):
    import torch

    return torch.full((nbytes,), fill, dtype=torch.uint8, device=device)


def _agent(name: str):
    from nixl._api import nixl_agent, nixl_agent_config

    return nixl_agent(name, nixl_agent_config(backends=["UCX"]))


def _target(conn, device: str, sizes_mb: list[int]) -> None:
    """Holds a registered buffer of 7s for the initiator to read, until told to stop; sends its
    agent's metadata and, per size, the descriptors of the buffer's first that many MiB."""
    buf = _buffer(device, max(sizes_mb) << 20, 7)
    agent = _agent("target")
    agent.register_memory(buf)
    descs = {mb: agent.get_serialized_descs(agent.get_xfer_descs(buf[: mb << 20])) for mb in sizes_mb}
    conn.send((agent.get_agent_metadata(), descs))
    conn.recv()


def _load(device: str, stop, ready) -> None:
    """Back-to-back matrix products on the device: a server's steps, never idle."""
    import torch

    a = torch.randn(4096, 4096, device=device, dtype=torch.bfloat16 if device != "cpu" else torch.float32)
    ready.set()
    while not stop.is_set():
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


def measure(device: str, sizes_mb: list[int], repeats: int) -> Iterator[dict]:
    """Each condition's row as it is measured: a run its time limit stops keeps the rows before."""
    ctx = mp.get_context("spawn")
    ours, theirs = ctx.Pipe()
    target = ctx.Process(target=_target, args=(theirs, device, sizes_mb), daemon=True)
    target.start()
    try:
        if not ours.poll(120):
            raise TimeoutError("the target process sent no metadata within 120 s")
        metadata, descs = ours.recv()
        dst = _buffer(device, max(sizes_mb) << 20, 0)
        agent = _agent("initiator")
        agent.register_memory(dst)
        peer = agent.add_remote_agent(metadata)
        for mb in sizes_mb:
            local, remote = agent.get_xfer_descs(dst[: mb << 20]), agent.deserialize_descs(descs[mb])
            _read(agent, local, remote, peer)  # the first of each size (the connection's set-up), not timed
            if int(dst[: mb << 20].min()) != 7:
                raise RuntimeError("the bytes read are not the target's")
            for busy in (False, True):
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
        ours.send("stop")
        target.join(30)


def _timed(ctx, transfer: tuple, device: str, busy: bool, repeats: int) -> list[float]:
    """``repeats`` transfers' seconds, with the device kept busy by another process or not."""
    stop, ready = ctx.Event(), ctx.Event()
    load = ctx.Process(target=_load, args=(device, stop, ready), daemon=True) if busy else None
    if load:
        load.start()
        ready.wait(120)
        time.sleep(0.5)
    try:
        return [_read(*transfer) for _ in range(repeats)]
    finally:
        if load:
            stop.set()
            load.join(30)


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda:0", help="cuda:N, or cpu (host memory)")
    ap.add_argument(
        "--mb",
        type=lambda text: [int(x) for x in text.split(",")],
        default=[41, 110],
        help="MiB per transfer, comma-separated (Qwen3.5-9B's state at 512 tokens: about 41; at 2,560: 110)",
    )
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args(argv)
    try:
        import nixl._api  # noqa: F401
        import torch
    except ImportError as e:
        print(f"error: this Python has no {e.name}: run it with the engine's (ENGINE/bin/python)", file=sys.stderr)
        return 2
    if args.device != "cpu" and not torch.cuda.is_available():
        print(f"error: no CUDA device here for --device {args.device}", file=sys.stderr)
        return 2
    for row in measure(args.device, args.mb, args.repeats):
        print(json.dumps(row), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
