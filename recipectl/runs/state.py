"""The run's state on disk (pids, ports, URLs, logs, recipe hash), so that status, stop, logs,
doctor and bench find a deployment that another command started."""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

from ..errors import RecipectlError

STATE_FILE = "state.json"
JOURNAL_FILE = "processes.jsonl"  # one line per started process: what stop reads when state.json is damaged
LOCK_FILE = ".state.lock"
_RUN_SUFFIX = r"-\d{8}-\d{6}(?:-\d+)?"  # what new_run_dir appends to the recipe name


class CorruptState(RecipectlError):
    """A state.json that cannot be read (truncated, edited, not ours): said, with the run directory."""

    def __init__(self, path: Path, problem: str):
        super().__init__(f"the run state {path} is unreadable ({problem})",
                         fix=f"recipectl stop {path.parent} still stops the processes it started")
        self.run_dir = path.parent


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
    pid: int | None = None
    start_time: float | None = None  # psutil create_time: a reused pid is not our process
    started_at: float | None = None
    healthy_at: float | None = None
    exited: int | None = None
    node: str | None = None  # Slurm: the node of the job that runs it (from the job's node list)


@dataclass
class RunState:
    run_id: str
    recipe_name: str
    recipe_path: str
    recipe_hash: str
    run_dir: str
    target: str = "local"
    created_at: float = field(default_factory=time.time)
    ready_at: float | None = None
    first_request_s: float | None = None  # the first request through the router, after ready_at
    stopped_at: float | None = None
    router_url: str | None = None
    served_model_name: str = ""
    job_id: str | None = None  # slurm
    processes: list[ProcessState] = field(default_factory=list)

    def path(self) -> Path:
        return Path(self.run_dir) / STATE_FILE

    def save(self) -> None:
        """Write state.json whole or not at all: a temporary file renamed over it, under the run's
        lock so that two writers (launch, stop) never interleave."""
        import fcntl
        import tempfile

        d = Path(self.run_dir)
        text = json.dumps(asdict(self), indent=2)
        with open(d / LOCK_FILE, "a") as lock:
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

    def record_start(self, ps: "ProcessState") -> None:
        """Append a started process to the run's journal (one short line, O_APPEND): stop finds
        the process from it even when state.json is lost or damaged."""
        line = json.dumps({"name": ps.name, "pid": ps.pid, "start_time": ps.start_time}) + "\n"
        fd = os.open(Path(self.run_dir) / JOURNAL_FILE, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, line.encode())
        finally:
            os.close(fd)

    @classmethod
    def load(cls, path: Path) -> "RunState":
        try:
            data = json.loads(path.read_text())
            known = {f.name for f in fields(ProcessState)}
            procs = [ProcessState(**{k: v for k, v in p.items() if k in known}) for p in data.pop("processes", [])]
            own = {f.name for f in fields(cls)} - {"processes"}
            for p in procs:  # what stop acts on must have the types it acts with
                if not (p.pid is None or type(p.pid) is int and p.pid > 0) or not (
                        p.start_time is None or type(p.start_time) in (int, float)):
                    raise ValueError(f"process {str(p.name)[:40]!r} has pid {str(p.pid)[:20]!r}, "
                                     f"start time {str(p.start_time)[:20]!r}")
            return cls(**{k: v for k, v in data.items() if k in own}, processes=procs)
        except OSError as e:
            raise CorruptState(path, e.strerror or str(e)) from None
        except (ValueError, TypeError, AttributeError) as e:  # truncated JSON, wrong shapes, missing keys
            raise CorruptState(path, f"{type(e).__name__}: {str(e)[:120]}") from None

    def endpoint_urls(self, kind: str) -> list[str]:
        return [p.url for p in self.processes if p.kind == kind and p.url]


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


def find_run_dir(ref: str | None, root: Path | None = None,
                 recipe_runs: Callable[[str], tuple[str, str]] | None = None) -> Path:
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
            found = p
        elif "/" not in ref and ((base / ref / STATE_FILE).exists() or (base / ref / JOURNAL_FILE).exists()):
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
    if found is None:
        raise RecipectlError(f"no run found{f' for {ref!r}' if ref else ''} under {base}",
                             fix="start one with: recipectl launch RECIPE --detach")
    return found


def find_run(ref: str | None, root: Path | None = None,
             recipe_runs: Callable[[str], tuple[str, str]] | None = None) -> RunState:
    """The state of the run find_run_dir finds; CorruptState when its state.json cannot be read."""
    return RunState.load(find_run_dir(ref, root, recipe_runs) / STATE_FILE)


def journal(run_dir: Path) -> list[tuple[str, int, float | None]]:
    """(name, pid, start time) of every process the run's journal recorded; a damaged line is skipped."""
    out = []
    try:
        lines = (run_dir / JOURNAL_FILE).read_text(errors="replace").splitlines()
    except OSError:
        return []
    for line in lines:
        try:
            rec = json.loads(line)
            pid, start = rec["pid"], rec.get("start_time")
            if isinstance(pid, int) and pid > 0 and (start is None or isinstance(start, (int, float))):
                out.append((str(rec.get("name", "?")), pid, start))
        except (ValueError, KeyError, TypeError):
            continue
    return out
