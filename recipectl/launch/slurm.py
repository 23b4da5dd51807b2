"""The Slurm launcher: submit the rendered sbatch script, record the job, wait for the router
and the first request; `status`, `stop` and `logs` then work on the job (squeue, scancel, the
step logs)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
from pathlib import Path

from ..errors import ExitCode, RecipectlError
from ..fileio import read_bytes_bounded, write_atomic
from ..render.processes import build_deployment
from ..render.targets import render_slurm, required_env
from ..retry import poll_until, retry_transient
from ..runs.diagnose import diagnose, never_ready
from ..runs.processes import tail
from ..runs.state import JOB_ID_PATTERN, ProcessState, RunState, new_run_dir, runs_root
from ..schema import Recipe
from .display import Display
from .local import base_environ, engine_parse_first, recipe_hash, refuse
from .readiness import health_client, record_healthy
from .result import LaunchResult
from .warmup import prove_serving


def _slurm(*args: str, timeout: float = 30) -> subprocess.CompletedProcess:
    exe = shutil.which(args[0])
    if exe is None:
        raise RecipectlError(
            f"{args[0]} not found: this host is not a Slurm client",
            fix="run on a Slurm login node, or render the script: recipectl render RECIPE --target slurm",
        )
    try:
        return subprocess.run([exe, *args[1:]], capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise RecipectlError(
            f"{args[0]} did not answer within {timeout:.0f} s (slurmctld busy or unreachable)",
            fix="check the controller (scontrol ping), then run the command again; "
            "a job may still be queued or running: squeue --me",
        ) from None


class SqueueFailed(RecipectlError):
    """squeue answered with an error other than "no such job": the controller, not the job."""


#: A failing squeue is asked again this many times, this far apart, before the failure is reported.
SQUEUE_ATTEMPTS, SQUEUE_WAIT_S = 4, 2.0


def _squeue_once(job_id: str) -> str | None:
    r = _slurm("squeue", "-h", "-j", job_id_arg(job_id), "-o", "%T")
    if r.returncode == 0:
        return r.stdout.strip() or None
    if "invalid job id" in r.stderr.lower():  # the job left the queue longer ago than MinJobAge
        return None
    raise SqueueFailed(
        f"squeue -j {job_id} failed (exit {r.returncode}): {r.stderr.strip() or r.stdout.strip()}",
        fix=f"check the controller (scontrol ping); job {job_id} was left as it is: squeue -j {job_id}",
    )


def job_state(job_id: str) -> str | None:
    """PENDING / RUNNING / COMPLETING ...; None once the job has left the queue. A squeue that fails
    (the controller busy or restarting) is asked again; one that keeps failing is a SqueueFailed,
    never taken for a job that has gone."""
    return retry_transient(lambda: _squeue_once(job_id), SqueueFailed, attempts=SQUEUE_ATTEMPTS, wait_s=SQUEUE_WAIT_S)


def _fields(line: str) -> dict[str, str]:
    """`scontrol show ... -o` output: Key=Value pairs, a value running to the next ` Key=` (a Reason
    holds spaces)."""
    return {m.group(1): m.group(2).strip() for m in re.finditer(r"(?:^|\s)(\w+)=(.*?)(?=\s\w+=|$)", line)}


def job_info(job_id: str) -> dict[str, str]:
    """scontrol's record of the job (JobState, Reason, NodeList, ExitCode ...) while slurmctld keeps
    it (MinJobAge after it ends); {} when it has none, or does not answer."""
    try:
        r = _slurm("scontrol", "show", "job", "-o", job_id_arg(job_id))
    except RecipectlError:
        return {}
    return _fields(r.stdout.strip()) if r.returncode == 0 and r.stdout.strip() else {}


def how_it_ended(info: dict[str, str]) -> str:
    """A finished job's state and reason from job_info, in words: "NODE_FAIL (reason: ...)"; "" when
    slurmctld no longer remembers the job."""
    reason = info.get("Reason", "")
    return " ".join(
        x for x in (info.get("JobState", ""), f"(reason: {reason})" if reason not in ("", "None") else "") if x
    )


def node_states(nodes: list[str]) -> dict[str, dict[str, str]]:
    """Each node's state and reason as slurmctld sees it: {"node2": {"state": "DOWN+NOT_RESPONDING",
    "reason": "Not responding"}}; a node it does not answer for is left out."""
    if not nodes:
        return {}
    try:
        r = _slurm("scontrol", "show", "node", "-o", ",".join(nodes))
    except RecipectlError:
        return {}
    out = {}
    for line in r.stdout.splitlines():
        f = _fields(line)
        if "NodeName" in f:
            out[f["NodeName"]] = {"state": f.get("State", "?"), "reason": f.get("Reason", "")}
    return out


def node_is_down(state: str) -> bool:
    """DOWN, FAIL or NOT_RESPONDING (a node that stopped answering, before slurmctld marks it DOWN)."""
    flags = set(state.upper().replace("*", "+NOT_RESPONDING").split("+"))
    return bool(flags & {"DOWN", "FAIL", "FAILING", "NOT_RESPONDING"})


def job_id_arg(job_id: object) -> str:
    """`job_id` if it is a Slurm job id (digits, an optional _N or +N), else a RecipectlError: what
    goes to scancel, squeue or scontrol is a job, never an option ("--me") or anything else."""
    if not isinstance(job_id, str) or not re.fullmatch(JOB_ID_PATTERN, job_id):
        raise RecipectlError(
            f"{str(job_id)[:40]!r} is not a Slurm job id",
            fix="a job id is digits, with an "
            "optional _N (array task) or +N (heterogeneous component): check with squeue --me",
        )
    return job_id


def cancel_job(state: RunState, wait_s: float = 60) -> None:
    """scancel the job and wait until it has left the queue; a controller that does not answer is
    a RecipectlError naming the job, never a traceback."""
    job = job_id_arg(state.job_id)
    try:
        _slurm("scancel", "--", job)  # after "--": an operand, whatever it is
    except RecipectlError as e:
        raise RecipectlError(
            f"could not cancel Slurm job {state.job_id}: {e.message}",
            fix=f"scancel {state.job_id} once the controller answers (or: recipectl stop {state.run_id})",
        ) from None
    poll_until(lambda: job_state(job) is None or None, interval_s=0.5, timeout_s=wait_s)
    state.stopped_at = time.time()
    state.save()


def submit(recipe_path: str, recipe: Recipe) -> RunState:
    dep = build_deployment(recipe)
    run_id, run_dir = new_run_dir(runs_root(recipe.launch.run_dir), recipe.name)
    run_dir = run_dir.resolve()
    (script,) = render_slurm(dep)
    path = run_dir / script.name
    write_atomic(path, script.text, mode=0o755)
    write_atomic(run_dir / "recipe.yaml", read_bytes_bounded(recipe_path))
    env = {**submit_environ(dep), "LOG_DIR": str(run_dir), "READY_TIMEOUT": str(int(recipe.launch.ready_timeout_s))}
    exe = shutil.which("sbatch")
    if exe is None:
        raise RecipectlError(
            "sbatch not found: this host is not a Slurm client",
            fix=f"the script is in {path}; submit it from a login node",
        )
    try:
        r = subprocess.run(
            [exe, "--parsable", f"--chdir={run_dir}", f"--output={run_dir}/slurm-%j.out", str(path)],
            capture_output=True,
            text=True,
            timeout=60,
            env=env,
        )
    except subprocess.TimeoutExpired:
        raise RecipectlError(
            "sbatch did not answer within 60 s (slurmctld busy or unreachable)",
            fix=f"check for the job with squeue --me before submitting again; the script is {path}",
        ) from None
    if r.returncode != 0:
        raise RecipectlError(
            f"sbatch refused the job: {r.stderr.strip()}", fix=f"the script is {path}", exit_code=ExitCode.FINDINGS
        )
    job_id = r.stdout.strip().split(";")[0]
    if not re.fullmatch(JOB_ID_PATTERN, job_id):
        raise RecipectlError(
            f"sbatch answered {r.stdout.strip()[:80]!r}, not a job id",
            fix=f"check for the job with squeue --me; the script is {path}",
        )
    state = RunState(
        run_id=run_id,
        recipe_name=recipe.name,
        recipe_path=str(Path(recipe_path).resolve()),
        recipe_hash=recipe_hash(recipe_path),
        run_dir=str(run_dir),
        target="slurm",
        job_id=job_id,
        served_model_name=recipe.served_name,
    )
    for p in dep.processes:
        state.processes.append(
            ProcessState(
                name=p.name,
                kind=p.kind,
                host=p.host,
                port=p.port,
                url=None,
                log=str(run_dir / f"{p.name}.log"),
                argv=[],
                env={},
            )
        )
    state.save()
    return state


def _resolve_urls(state: RunState, recipe: Recipe) -> bool:
    """Once the job runs, its node list (written by the script) gives every URL."""
    nodes_file = Path(state.run_dir) / "nodes"
    if not nodes_file.exists():
        return False
    nodes = nodes_file.read_text().split()
    if not nodes:
        return False
    dep = build_deployment(recipe)
    used = dep.nodes_used
    for ps, spec in zip(state.processes, dep.processes, strict=True):
        ps.node = nodes[used.index(spec.node)]
        host = spec.host if recipe.cluster.hosts else ps.node
        ps.host = host
        ps.url = f"http://{host}:{spec.port}" if spec.port else None
        if ps.kind == "router":
            state.router_url = ps.url
    state.save()
    return True


def _failed_step(state: RunState) -> ProcessState:
    """The step whose log explains the failure (a recognised cause first, else the newest log)."""
    logs = [p for p in state.processes if Path(p.log).exists()]
    for p in logs:
        if diagnose(tail(p.log, 400)):
            return p
    return max(logs, key=lambda p: Path(p.log).stat().st_mtime) if logs else state.processes[0]


def wait_ready(state: RunState, recipe: Recipe, timeout_s: float, console) -> tuple[bool, str]:
    last_phase = ""
    job = job_id_arg(state.job_id)  # what job_state would refuse in its first step

    def step(client) -> tuple[bool, str] | None:
        nonlocal last_phase
        js = job_state(job)
        if js is None:
            how = how_it_ended(job_info(job))
            return False, f"job {state.job_id} ended{' ' + how if how else ''} before the deployment was ready"
        if js == "RUNNING" and not any(p.url for p in state.processes):
            _resolve_urls(state, recipe)
        record_healthy(client, state)
        stuck = never_ready(state.processes)
        if stuck is not None:
            return False, f"{stuck.name} cannot finish start-up"
        phase = f"job {state.job_id} {js}; healthy: " + ", ".join(p.name for p in state.processes if p.healthy_at)
        if phase != last_phase:
            console.print(phase, highlight=False)
            last_phase = phase
        if all(p.healthy_at for p in state.processes if p.port):
            state.ready_at = time.time()
            state.save()
            return True, "ready"
        return None

    with health_client() as client:
        result = poll_until(lambda: step(client), interval_s=0.5, timeout_s=timeout_s)
    return result or (False, f"not ready after {timeout_s:.0f}s")


def submit_environ(dep, environ: dict[str, str] | None = None) -> dict[str, str]:
    """The environment sbatch gets, and so the job (sbatch exports all of it): what a local worker
    starts with (local.base_environ), Slurm's and sbatch's own settings (SLURM_*, SBATCH_*), the
    container mounts the script reads, and the variables the recipe refers to. Nothing else of the
    caller's shell (cloud credentials, tokens the recipe does not name) reaches the nodes."""
    environ = dict(os.environ if environ is None else environ)
    env = base_environ("decode", environ)
    env.update({k: v for k, v in environ.items() if k.startswith(("SLURM_", "SBATCH_")) or k == "CONTAINER_MOUNTS"})
    env.update({k: environ[k] for k in required_env(dep) if k in environ})
    return env


def launch(
    recipe_path: str, recipe: Recipe, *, detach: bool, timeout_s: float | None, display, check_first: bool = True
) -> LaunchResult:
    """The Launcher for `--target slurm`. Before submitting, where the recipe's extra_args hold a
    flag only the engine knows, this host's engine reads the commands (engine_parse_first; a job
    that would end at once is not queued); the rest of preflight is the scheduler's and the nodes'."""
    console = display.console
    if check_first and (problems := engine_parse_first(recipe, console, servers_here=False)):
        refuse(problems)
    state = submit(recipe_path, recipe)
    console.print(f"submitted job {state.job_id} (run {state.run_id}, logs in {state.run_dir})")
    try:
        timeout_s = timeout_s or recipe.launch.ready_timeout_s
        deadline = time.monotonic() + timeout_s
        ok, message = wait_ready(state, recipe, timeout_s, console)
        failed: ProcessState | None = None
        if ok:
            proof = prove_serving(state, deadline, console)
            ok, message, failed = proof.ok, proof.message, proof.culprit
        if not ok:
            failed = failed or _failed_step(state)
            cancelled = _cancel_reporting(state, console)
            d = diagnose(tail(failed.log, 400))
            return LaunchResult(
                state,
                False,
                message,
                failed,
                tail(failed.log, 40),
                d.cause if d else None,
                d.fix if d else None,
                f"job {state.job_id} cancelled" if cancelled else f"job {state.job_id} NOT cancelled",
            )
        if detach:
            return LaunchResult(state, True, "ready")
        console.print(f"[green]ready[/] — router {state.router_url} (job {state.job_id}; stop with: recipectl stop)")
        job = job_id_arg(state.job_id)  # submit recorded a job id it checked
        poll_until(lambda: job_state(job) is None or None, interval_s=2)
        return LaunchResult(state, False, f"job {state.job_id} ended", cleaned_up="")
    except KeyboardInterrupt:
        if _cancel_reporting(state, console):
            console.print(f"job {state.job_id} cancelled")
        raise


class SlurmLauncher:
    """One Slurm job.

    The rendered sbatch script, each server a job step; preflight is the scheduler's, but for the
    engine's reading of flags only it knows (engine_parse_first)."""

    name = "slurm"
    interrupted = "the job was cancelled"

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


def _cancel_reporting(state: RunState, console) -> bool:
    """Cancel the job on the way out of a failed launch; a controller that does not answer is said
    (with what to run) rather than replacing the launch's own failure."""
    try:
        cancel_job(state)
        return True
    except RecipectlError as e:
        console.print(f"[red]error[/]: {e.message}", highlight=False)
        if e.fix:
            console.print(f"  fix: {e.fix}", highlight=False)
        return False
