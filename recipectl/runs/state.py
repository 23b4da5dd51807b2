"""The run's state on disk (pids, ports, URLs, logs, recipe hash), so that status, stop, logs,
doctor and bench find a deployment that another command started."""

from __future__ import annotations

import errno
import fcntl
import json
import os
import re
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field, StringConstraints, TypeAdapter, ValidationError

from ..errors import RecipectlError
from ..fileio import MiB, UnreadableFile, append_line, open_regular, read_bytes_bounded

STATE_FILE = "state.json"
JOURNAL_FILE = "processes.jsonl"  # one line per started process: what stop reads when state.json is damaged
LOCK_FILE = ".state.lock"
STATE_READ_LIMIT = 4 * MiB  # a run of a thousand processes is a few hundred KiB
JOURNAL_READ_LIMIT = 4 * MiB
# A Slurm job id as sbatch prints it: a job (123), an array task (123_4), a heterogeneous job's
# component (123+1). Nothing else reaches scancel, squeue or scontrol: "--me" is an option.
JOB_ID_PATTERN = r"^[0-9]{1,12}(?:[_+][0-9]{1,9})?$"
MAX_PROCESSES = 1024  # processes of one run (endpoints and a router)
MAX_MEMBERS = 4096  # processes one started process leads (engine cores, workers)

# What stop acts on is typed exactly: a pid the kernel can hand out, a start time, a job id.
Pid = Annotated[int, Field(gt=0, lt=1 << 22)]  # PID_MAX_LIMIT
StartTime = Annotated[float, Field(gt=0, allow_inf_nan=False)]
# ... and, where /proc says, the start in clock ticks since boot and that boot's id (processes.Start)
StartTicks = Annotated[int, Field(ge=0, lt=1 << 63)]
BootId = Annotated[str, StringConstraints(pattern=r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")]
JobId = Annotated[str, StringConstraints(pattern=JOB_ID_PATTERN)]
# A node of the job, as `scontrol show hostnames` lists them: status hands it to scontrol, so never an
# option ("-M"), a second node (",") or a host list to expand ("n[1-1000000]").
NodeName = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,254}$")]
_RUN_SUFFIX = r"-\d{8}-\d{6}(?:-\d+)?"  # what new_run_dir appends to the recipe name


class CorruptState(RecipectlError):
    """A state.json that cannot be read (truncated, edited, not ours): said, with the run directory."""

    def __init__(self, path: Path, problem: str):
        super().__init__(
            f"the run state {path} is unreadable ({problem})",
            fix=f"recipectl stop {path.parent} still stops the processes it started",
        )
        self.run_dir = path.parent
        self.problem = problem


@dataclass
class Member:
    """A process that a started process led in its group (an engine core, a worker), as the
    launcher saw it: stop finds it by this pid and start time after its leader has exited."""

    pid: Pid
    start_time: StartTime
    start_ticks: StartTicks | None = None
    boot_id: BootId | None = None


@dataclass
class ProcessState:
    name: str
    kind: str  # prefill | decode | router
    host: str
    port: int | None
    url: str | None
    log: str
    argv: list[str]
    env: dict[str, str]  # only what the recipe set (never the whole environment: no secrets)
    pid: Pid | None = None
    start_time: StartTime | None = None  # psutil create_time: a reused pid is not our process
    start_ticks: StartTicks | None = None  # the same start, in clock ticks since boot (no clock step moves it)
    boot_id: BootId | None = None  # ... of this boot
    started_at: float | None = None
    healthy_at: float | None = None
    exited: int | None = None
    node: NodeName | None = None  # Slurm: the node of the job that runs it (from the job's node list)
    members: Annotated[list[Member], Field(max_length=MAX_MEMBERS)] = field(default_factory=list)


@dataclass
class RunState:
    run_id: str
    recipe_name: str
    recipe_path: str
    recipe_hash: str
    run_dir: str
    target: Literal["local", "slurm"] = "local"
    created_at: float = field(default_factory=time.time)
    ready_at: float | None = None
    first_request_s: float | None = None  # the first request through the router, after ready_at
    stopped_at: float | None = None
    router_url: str | None = None
    served_model_name: str = ""
    job_id: JobId | None = None  # slurm
    processes: Annotated[list[ProcessState], Field(max_length=MAX_PROCESSES)] = field(default_factory=list)

    def path(self) -> Path:
        return Path(self.run_dir) / STATE_FILE

    def save(self) -> None:
        """Write state.json whole or not at all: a temporary file renamed over it, under the run's
        lock so that two writers (launch, stop) never interleave."""
        d = Path(self.run_dir)
        text = json.dumps(asdict(self), indent=2)
        lock = _open_lock(d / LOCK_FILE)
        try:
            fcntl.flock(lock, fcntl.LOCK_EX)
            fd, tmp = tempfile.mkstemp(prefix=".state-", suffix=".tmp", dir=d)
            try:
                with os.fdopen(fd, "w") as f:
                    f.write(text)
                    f.flush()
                    os.fsync(f.fileno())
                os.replace(tmp, d / STATE_FILE)  # readers never see a half-written file
            except BaseException:
                Path(tmp).unlink(missing_ok=True)
                raise
        finally:
            os.close(lock)

    def record_start(self, ps: "ProcessState") -> None:
        """Append a started process to the run's journal (one short line, O_APPEND): stop finds
        the process from it even when state.json is lost or damaged."""
        self._journal({"name": ps.name, "pid": ps.pid, **_start_fields(ps)})

    def record_members(self, ps: "ProcessState", members: list[Member]) -> None:
        """Add processes that `ps` leads (seen by the launcher) to its record and the journal."""
        known = {m.pid for m in ps.members}
        for m in members:
            if m.pid not in known and len(ps.members) < MAX_MEMBERS:
                ps.members.append(m)
                self._journal({"name": ps.name, "pid": m.pid, **_start_fields(m), "group": ps.pid})

    def _journal(self, record: dict[str, Any]) -> None:
        # one write, never through a symlink: a journal some other user linked elsewhere is not written
        where = Path(self.run_dir) / JOURNAL_FILE
        try:
            append_line(where, json.dumps(record))
        except OSError as e:  # launch stops what it started: a process stop could not find is not left
            raise RecipectlError(
                f"cannot record {record['name']} (pid {record['pid']}) in {where}: {e.strerror or e}",
                fix=f"{where} must be a plain file of the run directory (a symlink is never written through)",
            ) from None

    @classmethod
    def load(cls, path: Path) -> "RunState":
        """state.json, read within bounds (a FIFO, a device or a huge file is refused, never waited
        on) and typed strictly: CorruptState, naming the field, for anything else."""
        try:
            data = read_bytes_bounded(path, STATE_READ_LIMIT)
        except UnreadableFile as e:
            raise CorruptState(path, e.reason) from None
        try:
            state = _STATE.validate_json(data, strict=True)
        except ValidationError as e:
            raise CorruptState(path, _first_error(e)) from None
        except (RecursionError, ValueError) as e:
            raise CorruptState(path, f"{type(e).__name__}: {str(e)[:120]}") from None
        _confine(state, path.parent)
        return state

    def endpoint_urls(self, kind: str) -> list[str]:
        return [p.url for p in self.processes if p.kind == kind and p.url]


def _open_lock(path: Path) -> int:
    """The run's lock file, created if missing, as a descriptor. Whoever can write the run
    directory can put anything there: a symlink is never followed (a stop by root would create
    or lock its target), a FIFO never waited on; anything but a regular file is refused."""
    try:
        return open_regular(path, os.O_RDONLY | os.O_CREAT)
    except OSError as e:
        if e.errno == errno.ELOOP:
            why = "is a symlink"
        elif e.errno == errno.EINVAL:
            why = "is not a regular file"
        else:
            why = f"cannot be opened ({e.strerror})"
    raise RecipectlError(
        f"cannot lock the run state: {path} {why}",
        fix=f"{path.name} is a plain file recipectl creates: remove what is there, then run the command again",
    )


def _start_fields(record: "ProcessState | Member") -> dict[str, Any]:
    """A record's start, as the journal holds it."""
    return {"start_time": record.start_time, "start_ticks": record.start_ticks, "boot_id": record.boot_id}


def _confine(state: RunState, d: Path) -> None:
    """The run directory is where its state.json is, whatever the file says: what stop writes goes
    there, never to a run_dir the file names. Each log is a file in it; one recorded at the top of
    the run's old place (a run directory that was moved) is taken by its name in the new one. A log
    path that leads out of it, by `..`, an absolute path or a symlink, is CorruptState, so that
    logs, status and doctor never print a file of the user's because a state file named it."""
    recorded, state.run_dir = Path(state.run_dir), str(d)
    real = os.path.realpath(d)
    for i, p in enumerate(state.processes):
        if not p.log:
            continue
        log = Path(p.log)
        if log.parent.name == recorded.name and not log.is_relative_to(d):  # launch writes them at its top
            log = d / log.name
        try:
            inside = Path(os.path.realpath(log)).is_relative_to(real) and os.path.realpath(log) != real
        except (OSError, ValueError):  # a NUL byte, a loop of symlinks
            inside = False
        if not inside:
            raise CorruptState(d / STATE_FILE, f"processes.{i}.log: {str(p.log)[:200]!r} is outside the run directory")
        p.log = str(log)


def runs_root(base: str | None = None) -> Path:
    """$RECIPECTL_RUN_DIR wins over the recipe's launch.run_dir (tests, CI, shared hosts)."""
    return Path(os.path.expanduser(os.environ.get("RECIPECTL_RUN_DIR") or base or ".recipectl/runs"))


def new_run_dir(root: Path, recipe_name: str) -> tuple[str, Path]:
    """A fresh run directory: mkdir either creates it or fails, so two launches in the same
    second get two directories. `latest` then points at it, replaced in one rename."""
    root.mkdir(parents=True, exist_ok=True)
    run_id = f"{recipe_name}-{time.strftime('%Y%m%d-%H%M%S')}"
    name, n = run_id, 1
    while True:
        try:
            (root / name).mkdir()
            break
        except FileExistsError:
            n += 1
            name = f"{run_id}-{n}"
    d = root / name
    tmp = root / f".latest-{os.getpid()}-{time.monotonic_ns()}"
    tmp.symlink_to(name)
    os.replace(tmp, root / "latest")
    return name, d


def runs_of(root: Path, recipe_name: str) -> list[Path]:
    """Run directories of exactly `recipe_name` (not of a recipe whose name starts with it), oldest first."""
    pattern = re.compile(re.escape(recipe_name) + _RUN_SUFFIX + "$")
    try:
        found = [d for d in root.iterdir() if pattern.match(d.name) and d.is_dir() and not d.is_symlink()]
    except OSError:
        return []

    def created(d: Path) -> tuple[float, str]:
        try:
            return d.stat().st_mtime, d.name
        except OSError:
            return 0.0, d.name

    return sorted(found, key=created)


def _is_run_id(ref: str) -> bool:
    return "/" not in ref and ref not in (".", "..")


def _refuse_symlinked_run(run_dir: Path) -> None:
    if run_dir.is_symlink():
        raise RecipectlError(
            f"{run_dir} is a symlink, not a run directory launch made: not followed",
            fix=f"name the directory it points at (recipectl status {run_dir.resolve()})",
        )


def find_run_dir(
    ref: str | None, root: Path | None = None, recipe_runs: Callable[[str], tuple[str, str]] | None = None
) -> Path:
    """A run directory by directory, state file, run id, recipe name (its newest run), recipe file
    (its newest run, under the recipe's launch.run_dir unless `root` is given), or the latest run.
    `root`: where runs are kept (default: runs_root()). `recipe_runs`: a recipe file's (name,
    launch.run_dir), given by the caller, which reads recipes (this layer does not)."""
    base = root or runs_root()
    found: Path | None = None
    if ref:
        p = Path(ref)
        if p.name == STATE_FILE and p.is_file():
            found = p.parent
        elif p.is_dir() and ((p / STATE_FILE).exists() or (p / JOURNAL_FILE).exists()):
            if "/" not in ref:  # a bare name reads as a run id here too (from inside the runs root)
                _refuse_symlinked_run(p)
            found = p
        elif _is_run_id(ref) and ((base / ref / STATE_FILE).exists() or (base / ref / JOURNAL_FILE).exists()):
            # a run id names a run directory under `base` itself: "." and ".." name base and what
            # holds it, and a symlink wherever it points, none of them a run launch made there
            _refuse_symlinked_run(base / ref)
            found = base / ref
        else:
            matches: list[Path] = []
            if "/" not in ref and not ref.startswith("."):
                matches = runs_of(base, ref)
            if not matches and p.suffix in (".yaml", ".yml") and p.is_file() and recipe_runs is not None:
                name, run_dir = recipe_runs(str(p))
                base = root or runs_root(run_dir)
                matches = runs_of(base, name)
            found = matches[-1] if matches else None
    elif (base / "latest").exists():
        found = (base / "latest").resolve()
        if found.parent != base.resolve():  # new_run_dir points it at a run beside it, nowhere else
            raise RecipectlError(
                f"{base / 'latest'} points outside {base}, at {found}",
                fix="name the run (recipectl status RUN), or remove the link",
            )
    if found is None:
        raise RecipectlError(
            f"no run found{f' for {ref!r}' if ref else ''} under {base}",
            fix="start one with: recipectl launch RECIPE --detach",
        )
    return found


def find_run(
    ref: str | None, root: Path | None = None, recipe_runs: Callable[[str], tuple[str, str]] | None = None
) -> RunState:
    """The state of the run find_run_dir finds; CorruptState when its state.json cannot be read."""
    return RunState.load(find_run_dir(ref, root, recipe_runs) / STATE_FILE)


@dataclass(frozen=True)
class JournalEntry:
    """One line of the journal: a process the launcher started (group None), or one that a
    started process led (group: its leader's pid)."""

    name: Annotated[str, StringConstraints(max_length=200)]
    pid: Pid
    start_time: StartTime | None = None
    group: Pid | None = None
    start_ticks: StartTicks | None = None
    boot_id: BootId | None = None


_STATE = TypeAdapter(RunState)
_ENTRY = TypeAdapter(JournalEntry)


def _first_error(e: ValidationError) -> str:
    """The first problem of a ValidationError, by field path (never the value: it may be anything)."""
    err = e.errors(include_input=False)[0]
    where = ".".join(str(x) for x in err["loc"])
    return f"{where}: {err['msg']}" if where else err["msg"]


def journal(run_dir: Path) -> list[JournalEntry]:
    """Every process the run's journal recorded; a damaged line is skipped, and a journal that is
    not a bounded regular file is none."""
    try:
        data = read_bytes_bounded(run_dir / JOURNAL_FILE, JOURNAL_READ_LIMIT)
    except UnreadableFile:
        return []
    out = []
    for line in data.splitlines():
        try:
            out.append(_ENTRY.validate_json(line, strict=True))
        except (ValueError, RecursionError):  # ValidationError is a ValueError
            continue
    return out
