"""launch / status / stop / logs: what the user sees; the work is in recipectl.launch."""

from __future__ import annotations

import json
import sys
import time
from dataclasses import asdict
from pathlib import Path

from ..errors import ExitCode, RecipectlError
from ..runs import processes as procs
from ..runs.state import CorruptState, find_run, find_run_dir, journal
from ..schema import Recipe


def recipe_runs(path: str, variant: str | None = None) -> tuple[str, str]:
    """A recipe file's name and where its runs are kept (for `status RECIPE` and the like); one
    variant's, for a matrix recipe (--variant)."""
    from ..validate import load_variant

    recipe = load_variant(path, variant).recipe
    return recipe.name, recipe.launch.run_dir


def _recipe_runs(ref: str | None, variant: str | None):
    """find_run's reader of a recipe file, for --variant; --variant names a variant of a recipe
    file, so with a run id, a run directory or no reference at all it is a usage error."""
    if variant is None:
        return recipe_runs
    if ref is None or Path(ref).suffix not in (".yaml", ".yml") or not Path(ref).is_file():
        raise RecipectlError(f"--variant picks one variant of a matrix recipe file, and {ref or 'no recipe'} "
                             "was given", fix="give the recipe file with --variant; a run id or run directory "
                             "names one run without it")
    return lambda path: recipe_runs(path, variant)

def print_dry_run(recipe: Recipe, *, as_json: bool) -> None:
    from ..launch.local import recipe_env, shown_argv
    from ..plan.shares import shared_gpus
    from ..render.processes import build_deployment
    from ..render.values import EnvRef, literal, shell_join
    from ..secretscan import redact_argv

    dep = build_deployment(recipe)
    hosts = recipe.cluster.host_names
    # a GPU that several servers share: each one's share of its memory, and who else is on it
    shares: dict[str, list[str]] = {}
    for shared in shared_gpus(recipe, dep.placement):
        for k, (proc, share) in enumerate(shared.users):
            others = ", ".join(q.name for q, _ in shared.users if q is not proc)
            after = f"; starts once {shared.users[k - 1][0].name} is ready" if k else ""
            shares.setdefault(proc.name, []).append(
                f"GPU {shared.gpu}: {share:g} of its memory, shared with {others}{after}")
    if as_json:
        out = [{"name": p.name, "kind": p.kind, "host": p.host, "port": p.port, "gpus": list(p.gpus),
                **({"shared_gpus": shares[p.name]} if p.name in shares else {}),
                "env": recipe_env(recipe, p), "argv": shown_argv(recipe, p)}
               for p in dep.processes]
        sys.stdout.write(json.dumps(out, indent=2) + "\n")
        return
    # The same redaction as the JSON form and the run state: a dry run is pasted into tickets.
    for node in dep.nodes_used:
        sys.stdout.write(f"# host {hosts[node]} (node {node})\n")
        for p in dep.on_node(node):
            gpus = f" gpus={','.join(map(str, p.gpus))}" if p.gpus else ""
            sys.stdout.write(f"## {p.name}{gpus}\n")
            for line in shares.get(p.name, ()):
                sys.stdout.write(f"  # {line}\n")
            env = recipe_env(recipe, p)
            for k, v in p.env:
                shown = env[k] if env[k] == "<redacted>" else shell_join([v], lambda n: hosts[n])
                sys.stdout.write(f"  {k}={shown}\n")
            literals = [f"${{{a.name}}}" if isinstance(a, EnvRef) else literal(a, hosts) for a in p.argv]
            argv = [a if r == lit else r for a, lit, r in zip(p.argv, literals, redact_argv(literals), strict=True)]
            sys.stdout.write(f"  {shell_join(argv, lambda n: hosts[n])}\n")
        sys.stdout.write("\n")


def launch_target(target: str, recipe_path: str, recipe: Recipe, *, detach: bool, timeout: float | None,
                  as_json: bool, preflight: bool = True) -> int:
    """`recipectl launch`: run the target's Launcher (recipectl.launch), then say what happened."""
    from ..launch.display import Display

    if target == "local":
        from ..launch.local import launch
    elif target == "slurm":
        from ..launch.slurm import launch
    else:
        raise RecipectlError(f"unknown target {target!r}", fix="--target local or --target slurm")
    display = Display()
    try:
        result = launch(recipe_path, recipe, detach=detach, timeout_s=timeout, display=display,
                        check_first=preflight)
    except KeyboardInterrupt:
        display.console.print("[yellow]interrupted[/]: " + ("every process stopped" if target == "local"
                                                             else "the job was cancelled"))
        return int(ExitCode.INTERRUPTED)
    if as_json:
        sys.stdout.write(json.dumps(asdict(result.state), indent=2) + "\n")
    if result.ok:
        if detach:
            where = f"run {result.state.run_id}" + (f", job {result.state.job_id}" if result.state.job_id else "")
            display.console.print(f"[green]ready[/] — router {result.state.router_url}  "
                                  f"({where}; stop with: recipectl stop)")
        return 0
    c = display.console
    c.print(f"[red]launch failed[/]: {result.message}")
    if result.failed is not None:
        c.print(f"--- last lines of {result.failed.log} ---", highlight=False)
        c.print(result.log_tail, markup=False, highlight=False)
        c.print("---", highlight=False)
    if result.diagnosis:
        c.print(f"[bold]cause[/]: {result.diagnosis}")
        c.print(f"[bold]fix[/]: {result.fix}")
    if result.cleaned_up:
        c.print(result.cleaned_up)
    return int(ExitCode.FINDINGS)


def _alive(p) -> bool:
    return procs.is_ours(p.pid, p.start_time)


def _root(run_dir: str | None) -> Path | None:
    """--run-dir: where runs are kept (a recipe's launch.run_dir); None: the default, or the recipe's own."""
    from ..runs.state import runs_root

    return runs_root(run_dir) if run_dir else None


def show_status(ref: str | None, *, as_json: bool, run_dir: str | None = None, variant: str | None = None) -> int:
    import httpx

    state = find_run(ref, _root(run_dir), _recipe_runs(ref, variant))
    rows = []
    job = None
    slurm: dict = {}
    if state.target == "slurm" and state.job_id:
        slurm = _slurm_status(state)
        job = slurm["job_state"]
    nodes = slurm.get("nodes", {})
    with httpx.Client(timeout=2.0) as client:
        for p in state.processes:
            node = nodes.get(p.node or "", {})
            alive = (job == "RUNNING" and not node.get("down")) if state.target == "slurm" else _alive(p)
            healthy = None
            if alive and p.url:
                try:
                    healthy = client.get(p.url + "/health").status_code == 200
                except httpx.HTTPError:
                    healthy = False
            row = {"name": p.name, "kind": p.kind, "pid": p.pid, "alive": alive, "healthy": healthy,
                   "url": p.url, "log": p.log}
            if state.target == "slurm":
                row |= {"node": p.node, "node_state": node.get("state")}
            rows.append(row)
    running = any(r["alive"] for r in rows)
    problems = slurm.get("problems", [])
    if as_json:
        out = {"run_id": state.run_id, "run_dir": state.run_dir, "router_url": state.router_url,
               "target": state.target, "job_id": state.job_id, "job_state": job}
        if state.target == "slurm":
            out |= {"job_end_state": slurm["job_end_state"], "job_reason": slurm["job_reason"], "nodes": nodes}
        out |= {"running": running, "problems": problems, "processes": rows}
        sys.stdout.write(json.dumps(out, indent=2) + "\n")
    else:
        from rich.console import Console
        from rich.table import Table

        title = f"{state.run_id}  router {state.router_url}"
        if state.job_id:
            ended = f"ended {slurm['job_end_state']}" if slurm.get("job_end_state") else "ended"
            title += f"  (Slurm job {state.job_id}: {job or ended})"
        t = Table(title=title, title_justify="left")
        slurm_cols = state.target == "slurm"
        for col in ("process", *(("node",) if slurm_cols else ()), "pid", "state", "url", "log"):
            t.add_column(col)
        for r in rows:
            st = ("[green]healthy[/]" if r["healthy"] else "[yellow]up, not healthy[/]" if r["alive"] and r["url"]
                  else "[green]up[/]" if r["alive"] else "[dim]stopped[/]")
            if slurm_cols and nodes.get(r["node"] or "", {}).get("down"):
                st = f"[red]node {r['node_state']}[/]"
            node_col = (r["node"] or "-",) if slurm_cols else ()
            t.add_row(r["name"], *node_col, str(r["pid"] or "-"), st, r["url"] or "-", r["log"])
        console = Console()
        console.print(t)
        for line in problems:
            console.print(f"[red]problem[/]: {line}", highlight=False)
    all_ok = all(r["alive"] and r["healthy"] is not False for r in rows)
    return 0 if all_ok else 1


def _slurm_status(state) -> dict:
    """The job as Slurm sees it: squeue's state (None once it has left the queue), scontrol's final
    state and reason while slurmctld remembers the job, and the state of every node the run's
    processes were on; `problems` says in words what went wrong (a node down, the job ended)."""
    from ..launch.slurm import how_it_ended, job_info, job_state, node_is_down, node_states

    job = job_state(state.job_id)
    info = job_info(state.job_id) if job != "RUNNING" else {}
    names = sorted({p.node for p in state.processes if p.node})
    nodes = {n: {**v, "down": node_is_down(v["state"])} for n, v in node_states(names).items()}
    problems = []
    for name, node in nodes.items():
        if node["down"]:
            on = ", ".join(p.name for p in state.processes if p.node == name)
            why = f" ({node['reason']})" if node["reason"] else ""
            problems.append(f"node {name} is {node['state']}{why}; it ran {on}")
    end = info.get("JobState") if job is None else None
    if job is None and not state.stopped_at:
        how = how_it_ended(info)
        problems.append(f"Slurm job {state.job_id} ended" + (f" {how}" if how else "")
                        + (f", exit code {info['ExitCode']}" if info.get("ExitCode") else "")
                        + "; nothing of it runs: recipectl logs shows why, recipectl launch starts it again")
    return {"job_state": job, "job_end_state": end, "job_reason": info.get("Reason"), "nodes": nodes,
            "problems": problems}


def stop_run(ref: str | None, run_dir: str | None = None, variant: str | None = None) -> int:
    from rich.console import Console

    c = Console(stderr=True)
    d = find_run_dir(ref, _root(run_dir), _recipe_runs(ref, variant))
    try:
        state = find_run(str(d))
    except CorruptState as e:
        return _stop_from_journal(d, e, c)
    if state.target == "slurm" and state.job_id:
        from ..launch.slurm import cancel_job, job_state

        if not job_state(state.job_id):
            c.print(f"{state.run_id}: Slurm job {state.job_id} is not running")
            return 0
        cancel_job(state)
        c.print(f"cancelled Slurm job {state.job_id}")
        return 0
    # every process with a recorded start: a group whose leader died may still have members
    recorded = [p for p in state.processes if p.pid and p.start_time is not None]
    groups = {p.pid: procs.our_group(p.pid, p.start_time) for p in recorded}
    ours = [p for p in recorded if groups[p.pid]]
    unknown = [p for p in state.processes if p.pid and p.start_time is None]
    for p in unknown:
        c.print(f"{p.name} (pid {p.pid}): no start time recorded, so pid {p.pid} may be another process: "
                "left alone")
    if not ours:
        c.print(f"{state.run_id}: nothing running")
        return 0
    grace = 20.0
    try:
        from ..validate import load_variant

        # by the run's recipe name: a matrix recipe's run names its variant
        grace = load_variant(state.recipe_path, state.recipe_name).recipe.launch.stop_grace_s
    except RecipectlError:
        pass
    outcome = procs.stop_recorded([(p.pid, p.start_time) for p in ours], grace)  # pid == pgid: own session
    state.stopped_at = time.time()
    state.save()
    for p in ours:
        c.print(f"{p.name} (pid {p.pid}): {outcome.get(p.pid, '?')}")
    left = [p.name for p in ours if procs.our_group(p.pid, p.start_time)]
    if left:
        c.print(f"[red]still running[/]: {', '.join(left)}")
        return 1
    return 0


def _stop_from_journal(run_dir: Path, error: CorruptState, c) -> int:
    """state.json is damaged: stop what the run's journal recorded (pid and start time of each
    process it started), then say the state was unreadable (exit 2)."""
    c.print(f"[red]error[/]: {error.message}", highlight=False)
    records = journal(run_dir)
    live = [(name, pid, start) for name, pid, start in records if procs.our_group(pid, start)]
    if live:
        outcome = procs.stop_recorded([(pid, start) for _, pid, start in live], 20.0)
        for name, pid, _ in live:
            c.print(f"{name} (pid {pid}): {outcome.get(pid, '?')} (from {run_dir / 'processes.jsonl'})",
                    highlight=False)
    else:
        c.print(f"nothing recorded in {run_dir / 'processes.jsonl'} is running", highlight=False)
    left = [name for name, pid, start in live if procs.our_group(pid, start)]
    if left:
        c.print(f"[red]still running[/]: {', '.join(left)}")
        return 1
    return int(ExitCode.INVALID)


def show_logs(ref: str | None, which: str | None, *, follow: bool, lines: int, run_dir: str | None = None,
              variant: str | None = None) -> int:
    state = find_run(ref, _root(run_dir), _recipe_runs(ref, variant))
    chosen = [p for p in state.processes if which in (None, p.kind, p.name)]
    if not chosen:
        raise RecipectlError(f"no process {which!r} in {state.run_id}",
                             fix="one of: " + ", ".join(sorted({p.kind for p in state.processes} |
                                                               {p.name for p in state.processes})))
    prefix = len(chosen) > 1
    for p in chosen:
        for line in procs.tail(p.log, lines).splitlines():
            sys.stdout.write(f"{p.name} | {line}\n" if prefix else line + "\n")
    if not follow:
        return 0
    files = {p.name: open(p.log, errors="replace") for p in chosen if Path(p.log).exists()}
    for f in files.values():
        f.seek(0, 2)
    try:
        while True:
            quiet = True
            for name, f in files.items():
                for line in f.readlines():
                    quiet = False
                    sys.stdout.write(f"{name} | {line}" if prefix else line)
            sys.stdout.flush()
            if quiet:
                time.sleep(0.3)
    except KeyboardInterrupt:
        return 0
