"""Ports for the servers a test starts: free now, and outside the kernel's ephemeral range.

A port picked by binding to port 0 comes from the ephemeral range (32768-60999 by default), the
same range the kernel hands to every outgoing connection and to every bind(0) of the processes
the test starts: vLLM binds its own internal ZMQ and torch ports that way. A server that binds a
chosen port seconds later can then find it taken (a prefill's NIXL side channel once found its
port held by decode's worker, and start-up hung). Below the ephemeral range the kernel never
hands a port out by itself; only another process asking for that number could take it.
"""

from __future__ import annotations

import random
import socket
from contextlib import ExitStack
from pathlib import Path

_LOWEST = 20000  # above the well-known and the commonly configured service ports


def _ephemeral_low() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768  # Linux's default


def free_ports(n: int) -> list[int]:
    """``n`` distinct TCP ports, free on every interface now, below the ephemeral range (held
    together while chosen, so distinct)."""
    high = _ephemeral_low() - 1
    if high - _LOWEST < 100 * n:  # an unusual range: fall back to whatever the kernel gives
        candidates = iter(lambda: 0, None)
    else:
        candidates = iter(lambda: random.randint(_LOWEST, high), None)
    with ExitStack() as stack:
        ports: list[int] = []
        for _ in range(1000 * n):
            s = stack.enter_context(socket.socket())
            try:
                s.bind(("", next(candidates)))
            except OSError:
                continue
            ports.append(s.getsockname()[1])
            if len(ports) == n:
                return ports
    raise RuntimeError(f"no {n} free ports found below {high + 1}")


def free_port() -> int:
    return free_ports(1)[0]
