"""launch / status / stop / logs: what the user sees; the work is in recipectl.launch."""

from __future__ import annotations

import json
import os
import stat
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any, NotRequired, TypedDict

from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from ..errors import ExitCode, RecipectlError
from ..fieldtypes import escape_controls
from ..fileio import UnreadableFile, open_beneath
from ..launch import slurm
from ..launch.display import Display
from ..launch.launchers import get_launcher
from ..launch.local import recipe_env, shown_argv
from ..plan.shares import shared_gpus
from ..render.processes import build_deployment
from ..render.values import EnvRef, literal, shell_join
from ..runs import processes as procs
from ..runs.state import (
    JOURNAL_FILE,
    STATE_FILE,
    CorruptState,
    JournalEntry,
    RunState,
    find_run,
    find_run_dir,
    journal,
    runs_root,
)
from ..schema import Recipe
from ..secretscan import redact_argv
from ..validate import load_variant


def recipe_runs(path: str, variant: str | None = None) -> tuple[str, str]:
    """A recipe file's name and where its runs are kept (for `status RECIPE` and the like); one
    variant's, for a matrix recipe (--variant)."""
    recipe = load_variant(path, variant).recipe
    return recipe.name, recipe.launch.run_dir


def _recipe_runs(ref: str | None, variant: str | None):
    """find_run's reader of a recipe file, for --variant; --variant names a variant of a recipe
    file, so with a run id, a run directory or no reference at all it is a usage error."""
    if variant is None:
        return recipe_runs
    if ref is None or Path(ref).suffix not in (".yaml", ".yml") or not Path(ref).is_file():
        raise RecipectlError(
            f"--variant picks one variant of a matrix recipe file, and {ref or 'no recipe'} was given",
            fix="give the recipe file with --variant; a run id or run directory names one run without it",
        )
    return lambda path: recipe_runs(path, variant)


def print_dry_run(recipe: Recipe, *, as_json: bool) -> None:
    dep = build_deployment(recipe)
    hosts = recipe.cluster.host_names
    # a GPU that several servers share: each one's share of its memory, and who else is on it
    shares: dict[str, list[str]] = {}
    for shared in shared_gpus(recipe, dep.placement):
        for k, (proc, share) in enumerate(shared.users):
            others = ", ".join(q.name for q, _ in shared.users if q is not proc)
            after = f"; starts once {shared.users[k - 1][0].name} is ready" if k else ""
            shares.setdefault(proc.name, []).append(
                f"GPU {shared.gpu}: {share:g} of its memory, shared with {others}{after}"
            )
    if as_json:
        out = [
            {
                "name": p.name,
                "kind": p.kind,
                "host": p.host,
                "port": p.port,
                "gpus": list(p.gpus),
                **({"shared_gpus": shares[p.name]} if p.name in shares else {}),
                "env": recipe_env(recipe, p),
                "argv": shown_argv(recipe, p),
            }
            for p in dep.processes
        ]
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
            for name, v in p.env:
                shown = env[name] if env[name] == "<redacted>" else shell_join([v], lambda n: hosts[n])
                sys.stdout.write(f"  {name}={shown}\n")
            literals = [f"${{{a.name}}}" if isinstance(a, EnvRef) else literal(a, hosts) for a in p.argv]
            argv = [a if r == lit else r for a, lit, r in zip(p.argv, literals, redact_argv(literals), strict=True)]
            sys.stdout.write(f"  {shell_join(argv, lambda n: hosts[n])}\n")
        sys.stdout.write("\n")


def launch_target(
    target: str,
    recipe_path: str,
    recipe: Recipe,
    *,
    detach: bool,
    timeout: float | None,
    as_json: bool,
    preflight: bool = True,
) -> int:
    """`recipectl launch`: run the target's Launcher (recipectl.launch), then say what happened."""
    launcher = get_launcher(target)
    display = Display()
    try:
        result = launcher.launch(
            recipe_path, recipe, detach=detach, timeout_s=timeout, display=display, check_first=preflight
        )
    except KeyboardInterrupt:
        display.console.print(f"[yellow]interrupted[/]: {launcher.interrupted}")
        return int(ExitCode.INTERRUPTED)
    if as_json:
        sys.stdout.write(json.dumps(asdict(result.state), indent=2) + "\n")
    if result.ok:
        if detach:
            where = f"run {result.state.run_id}" + (f", job {result.state.job_id}" if result.state.job_id else "")
            display.console.print(
                f"[green]ready[/] — router {result.state.router_url}  ({where}; stop with: recipectl stop)"
            )
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


class StatusRow(TypedDict):
    """One process of `recipectl status`: a row of its table, an item of its --json processes."""

    name: str
    kind: str
    pid: int | None
    alive: bool
    healthy: bool | None
    url: str | None
    log: str
    node: NotRequired[str | None]  # Slurm: the node that runs it, and that node's state
    node_state: NotRequired[Any]


def _alive(p) -> bool:
    return procs.is_ours(p.pid, procs.recorded_start(p))


def _root(run_dir: str | None) -> Path | None:
    """--run-dir: where runs are kept (a recipe's launch.run_dir); None: the default, or the recipe's own."""
    return runs_root(run_dir) if run_dir else None


def show_status(ref: str | None, *, as_json: bool, run_dir: str | None = None, variant: str | None = None) -> int:
    import httpx  # only status asks the servers: launch, stop and logs start without it

    state = find_run(ref, _root(run_dir), _recipe_runs(ref, variant))
    rows: list[StatusRow] = []
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
                except (httpx.HTTPError, httpx.InvalidURL):  # a url the state file made up: not healthy
                    healthy = False
            row: StatusRow = {
                "name": p.name,
                "kind": p.kind,
                "pid": p.pid,
                "alive": alive,
                "healthy": healthy,
                "url": p.url,
                "log": p.log,
            }
            if state.target == "slurm":
                row |= {"node": p.node, "node_state": node.get("state")}
            rows.append(row)
    running = any(r["alive"] for r in rows)
    problems = slurm.get("problems", [])
    if as_json:
        out = {
            "run_id": state.run_id,
            "run_dir": state.run_dir,
            "router_url": state.router_url,
            "target": state.target,
            "job_id": state.job_id,
            "job_state": job,
        }
        if state.target == "slurm":
            out |= {"job_end_state": slurm["job_end_state"], "job_reason": slurm["job_reason"], "nodes": nodes}
        out |= {"running": running, "problems": problems, "processes": rows}
        sys.stdout.write(json.dumps(out, indent=2) + "\n")
    else:
        # every value from the state file as text, never as markup ("[/x]" in a name is a name)
        title = escape(escape_controls(f"{state.run_id}  router {state.router_url}"))
        if state.job_id:
            ended = f"ended {slurm['job_end_state']}" if slurm.get("job_end_state") else "ended"
            title += escape(escape_controls(f"  (Slurm job {state.job_id}: {job or ended})"))
        t = Table(title=title, title_justify="left")
        slurm_cols = state.target == "slurm"
        for col in ("process", *(("node",) if slurm_cols else ()), "pid", "state", "url", "log"):
            t.add_column(col)
        for r in rows:
            st = (
                "[green]healthy[/]"
                if r["healthy"]
                else "[yellow]up, not healthy[/]"
                if r["alive"] and r["url"]
                else "[green]up[/]"
                if r["alive"]
                else "[dim]stopped[/]"
            )
            if slurm_cols and nodes.get(r["node"] or "", {}).get("down"):
                st = f"[red]node {escape(escape_controls(str(r['node_state'])))}[/]"
            node_col = (escape(r["node"] or "-"),) if slurm_cols else ()
            t.add_row(
                escape(escape_controls(r["name"])),
                *node_col,
                str(r["pid"] or "-"),
                st,
                escape(escape_controls(r["url"] or "-")),
                escape(escape_controls(r["log"])),
            )
        console = Console()
        console.print(t)
        for line in problems:
            console.print(f"[red]problem[/]: {escape(escape_controls(line))}", highlight=False)
    all_ok = all(r["alive"] and r["healthy"] is not False for r in rows)
    return 0 if all_ok else 1


def _slurm_status(state) -> dict:
    """The job as Slurm sees it: squeue's state (None once it has left the queue), scontrol's final
    state and reason while slurmctld remembers the job, and the state of every node the run's
    processes were on; `problems` says in words what went wrong (a node down, the job ended)."""
    job = slurm.job_state(state.job_id)
    info = slurm.job_info(state.job_id) if job != "RUNNING" else {}
    names = sorted({p.node for p in state.processes if p.node})
    nodes = {n: {**v, "down": slurm.node_is_down(v["state"])} for n, v in slurm.node_states(names).items()}
    problems = []
    for name, node in nodes.items():
        if node["down"]:
            on = ", ".join(p.name for p in state.processes if p.node == name)
            why = f" ({node['reason']})" if node["reason"] else ""
            problems.append(f"node {name} is {node['state']}{why}; it ran {on}")
    end = info.get("JobState") if job is None else None
    if job is None and not state.stopped_at:
        how = slurm.how_it_ended(info)
        problems.append(
            f"Slurm job {state.job_id} ended"
            + (f" {how}" if how else "")
            + (f", exit code {info['ExitCode']}" if info.get("ExitCode") else "")
            + "; nothing of it runs: recipectl logs shows why, recipectl launch starts it again"
        )
    return {
        "job_state": job,
        "job_end_state": end,
        "job_reason": info.get("Reason"),
        "nodes": nodes,
        "problems": problems,
    }


DEFAULT_STOP_GRACE_S = 20.0  # for a run whose recipe cannot be read


def stop_run(ref: str | None, run_dir: str | None = None, variant: str | None = None) -> int:
    """Stop a run: only processes recorded with their pid and start time (and what they lead);
    from the journal when the state is damaged or contradicts it; scancel for a Slurm job."""
    # markup off: names and reasons come from files; soft wrap: paths and pids whole, one line each
    c = Console(stderr=True, highlight=False, markup=False, soft_wrap=True)
    d = find_run_dir(ref, _root(run_dir), _recipe_runs(ref, variant))
    try:
        state = find_run(str(d))
    except CorruptState as e:
        return _stop_from_journal(d, e.problem, c)
    entries = journal(d)
    distrust = _contradiction(state, entries)
    if distrust:
        return _stop_from_journal(d, distrust, c)
    if state.target == "slurm":
        return _cancel(state, c)
    owner = _owner(d / STATE_FILE)
    groups = [
        procs.Group(
            p.name, p.pid, procs.recorded_start(p), [(m.pid, procs.recorded_start(m)) for m in p.members], owner
        )
        for p in state.processes
        if p.pid
    ]
    if _nothing_of_ours(groups, c, f"{state.run_id}: nothing running"):
        return 0
    try:
        outcome = procs.stop_recorded(groups, _grace(state))
    except procs.StopInterrupted as e:
        return _interrupted(groups, e.outcome, c, state)
    done = _report(groups, outcome, c, int(ExitCode.OK))
    state.stopped_at = time.time()
    state.save()  # after the report: a state that cannot be written is said after what was stopped
    return done


def _owner(record: Path) -> int:
    """Whose processes a run's record may name (see recipectl.runs.processes): the user who owns
    both the file and the run directory it is in, each looked at itself, never through a symlink.
    Otherwise nobody's (-1 is no uid): a record that is a symlink takes its target's owner from
    whoever made the link (another user's journal, stopped as theirs), and a state file a stop by
    root rewrote in another user's run directory is root's while its content is still theirs."""
    try:
        own, folder = os.lstat(record), os.lstat(record.parent)
    except OSError:
        return -1
    if stat.S_ISLNK(own.st_mode) or not stat.S_ISDIR(folder.st_mode) or own.st_uid != folder.st_uid:
        return -1
    return own.st_uid


def _grace(state: RunState) -> float:
    try:
        # by the run's recipe name: a matrix recipe's run names its variant
        return load_variant(state.recipe_path, state.recipe_name).recipe.launch.stop_grace_s
    except RecipectlError:
        return DEFAULT_STOP_GRACE_S


def _cancel(state: RunState, c) -> int:
    if not state.job_id:
        c.print(f"{state.run_id}: no Slurm job recorded")
        return 0
    if not slurm.job_state(state.job_id):
        c.print(f"{state.run_id}: Slurm job {state.job_id} is not running")
        return 0
    slurm.cancel_job(state)
    c.print(f"cancelled Slurm job {state.job_id}")
    return 0


def _contradiction(state: RunState, entries: list[JournalEntry]) -> str | None:
    """Why a state.json that parses is still not to be trusted: it leaves out a live process the
    journal recorded (`processes: []`, `target: slurm` over a local run), or lists one that the
    journal never recorded. None when state and journal agree (or there is no journal)."""
    recorded = {(p.pid, procs.recorded_start(p), p.name) for p in state.processes if p.pid} | {
        (m.pid, procs.recorded_start(m), p.name) for p in state.processes for m in p.members
    }
    for e in entries:
        if not procs.is_ours(e.pid, procs.recorded_start(e)):
            continue
        if state.target == "slurm":
            return f"target is slurm, but the journal's {e.name} (pid {e.pid}) runs on this host"
        if not any(pid == e.pid and procs.same_start(start, procs.recorded_start(e)) for pid, start, _ in recorded):
            return f"it does not list {e.name} (pid {e.pid}), which the journal recorded and which is running"
    if entries:
        for pid, start, name in recorded:
            if start is not None and not any(
                e.pid == pid and procs.same_start(procs.recorded_start(e), start) for e in entries
            ):
                return f"{name} (pid {pid}) is not in the journal"
    return None


def _stop_from_journal(run_dir: Path, why: str, c) -> int:
    """The state cannot be trusted: stop what the run's journal recorded (pid and start time of each
    process it started, and of what those led), then exit 2 (the state is invalid input)."""
    where = run_dir / JOURNAL_FILE
    if not where.is_file() or where.is_symlink():
        # a Slurm run keeps no journal here (its processes are on the job's nodes), nor does a run
        # whose journal was removed: nothing it recorded can be stopped, and no job id is trusted
        c.print(
            Text.assemble(
                ("error", "red"),
                escape_controls(
                    f": {run_dir / STATE_FILE} is damaged ({why}), and the run has no journal ({where}) to stop its"
                    " processes from: nothing was stopped, and no Slurm job was cancelled"
                ),
            )
        )
        c.print(
            escape_controls(
                "  fix: find what is left with `squeue --me` (a Slurm run) or `ps -u $USER`, and stop it by its id;"
                " or restore the state file"
            )
        )
        return int(ExitCode.INVALID)
    c.print(
        Text.assemble(
            ("error", "red"),
            escape_controls(
                f": {run_dir / STATE_FILE} is damaged ({why}): stopping what the journal recorded ({where})"
            ),
        )
    )
    # each started process's line is a group of its own: two lines of one pid (one of them out of
    # date) are two records, and the one that matches the live process stops it
    groups: list[procs.Group] = []
    members: dict[int, list[tuple[int, procs.Start | None]]] = {}
    leaderless: dict[int, procs.Group] = {}  # members whose leader's line has not come (yet)
    owner = _owner(where)
    for e in journal(run_dir):
        if e.group is None and e.pid in leaderless:
            g = leaderless.pop(e.pid)
            g.name, g.start = e.name, procs.recorded_start(e)
        elif e.group is None:
            groups.append(procs.Group(e.name, e.pid, procs.recorded_start(e), members.setdefault(e.pid, []), owner))
        elif e.start_time is not None:
            if e.group not in members:
                leaderless[e.group] = procs.Group(e.name, e.group, None, members.setdefault(e.group, []), owner)
                groups.append(leaderless[e.group])
            members[e.group].append((e.pid, procs.recorded_start(e)))
    if _nothing_of_ours(groups, c, f"nothing recorded in {where} is running"):
        return int(ExitCode.INVALID)
    try:
        outcome = procs.stop_recorded(groups, DEFAULT_STOP_GRACE_S)
    except procs.StopInterrupted as e:
        return _interrupted(groups, e.outcome, c, None)
    return _report(groups, outcome, c, int(ExitCode.INVALID))


def _nothing_of_ours(groups: list[procs.Group], c, none_running: str) -> bool:
    """Whether no recorded group has a live process of ours; then each group's reason, and
    `none_running`, are said."""
    table = procs.process_table()
    found = [procs.find_ours(g, table) for g in groups]
    if any(f.processes for f in found):
        return False
    for g, f in zip(groups, found, strict=True):
        if f.note:
            c.print(escape_controls(f"{g.name}: {f.note}"))
    c.print(escape_controls(none_running))
    return True


def _interrupted(groups: list[procs.Group], outcome: list[tuple[str, str]], c, state: RunState | None) -> int:
    """Ctrl-C during a stop: what had been signalled and what is left, as a finished stop says it;
    the run is marked stopped only when nothing of it is left running."""
    if _report(groups, outcome, c, int(ExitCode.OK)) == ExitCode.OK and state is not None:
        state.stopped_at = time.time()
        state.save()
    c.print(Text.assemble(("interrupted", "yellow"), ": recipectl stop again stops what is left"))
    return int(ExitCode.INTERRUPTED)


def _report(groups: list[procs.Group], outcome: list[tuple[str, str]], c, done: int) -> int:
    """One line per recorded process: how it ended, and why anything was left alone."""
    for g, (how, note) in zip(groups, outcome, strict=True):
        c.print(
            escape_controls(
                f"{g.name}: {note}"
                if how == "not signalled"
                else f"{g.name} (pid {g.pid}): {how}" + (f"; {note}" if note else "")
            )
        )
    left = [g.name for g, (how, _) in zip(groups, outcome, strict=True) if how == "still running"]
    if left:
        c.print(Text.assemble(("still running", "red"), escape_controls(f": {', '.join(left)}")))
        return int(ExitCode.FINDINGS)
    return done


def _open_log(state: RunState, p) -> int | None:
    """The process's log, opened where it is in the run directory without following a symlink at
    any step (state.load checked the path; a link swapped in since leads nowhere else); None for a
    log not written yet. Anything but a regular file there is the state's error."""
    run_dir, log = Path(state.run_dir), Path(p.log)
    base = next((b for b in (run_dir, Path(os.path.realpath(run_dir))) if log.is_relative_to(b)), None)
    try:
        # a log nowhere under the run directory stays absolute, and open_beneath refuses it
        return open_beneath(base or run_dir, log.relative_to(base) if base else log)
    except UnreadableFile as e:
        if e.missing:
            return None
        raise RecipectlError(
            f"{state.path()}: processes.{state.processes.index(p)}.log is {p.log}, which is {e.reason}",
            fix="a run's logs are files in its run directory; this state file was edited",
        ) from None


def show_logs(
    ref: str | None,
    which: str | None,
    *,
    follow: bool,
    lines: int,
    run_dir: str | None = None,
    variant: str | None = None,
) -> int:
    if lines < 0:
        raise RecipectlError(f"--lines {lines}: a count of lines is 0 or more", fix="recipectl logs -n 40")
    state = find_run(ref, _root(run_dir), _recipe_runs(ref, variant))
    chosen = [p for p in state.processes if which in (None, p.kind, p.name)]
    if not chosen:
        names = sorted({p.kind for p in state.processes} | {p.name for p in state.processes})
        raise RecipectlError(
            escape_controls(f"no process {which!r} in {state.run_id}"),
            fix=escape_controls("one of: " + ", ".join(names)),
        )
    # by the process, not its name: two records of one name (an edited state) each keep their log
    opened = [(p, fd) for p in chosen if (fd := _open_log(state, p)) is not None]
    # a name from the state file is shown, never sent to the terminal as control characters
    label = (lambda p: f"{escape_controls(p.name)} | ") if len(chosen) > 1 else (lambda p: "")
    for p, fd in opened:
        for line in procs.tail_of(fd, lines).splitlines():
            sys.stdout.write(f"{label(p)}{line}\n")
    if not follow:
        for _, fd in opened:
            os.close(fd)
        return 0
    files = [(label(p), open(fd, errors="replace")) for p, fd in opened]
    for _, f in files:
        f.seek(0, 2)
    try:
        while True:
            quiet = True
            for shown, f in files:
                for line in f.readlines():
                    quiet = False
                    sys.stdout.write(shown + line)
            sys.stdout.flush()
            if quiet:
                time.sleep(0.3)
    except KeyboardInterrupt:
        return 0
