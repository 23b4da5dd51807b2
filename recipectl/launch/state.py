"""The run's state on disk (pids, ports, URLs, logs, recipe hash), so that status, stop, logs,
doctor and bench find a deployment that another command started."""

from __future__ import annotations

import json
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from ..errors import RecipectlError

STATE_FILE = "state.json"


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
    start_ticks: int | None = None  # /proc start time: a reused pid is not our process
    started_at: float | None = None
    healthy_at: float | None = None
    exited: int | None = None


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
        p = self.path()
        tmp = p.with_suffix(".tmp")
        tmp.write_text(json.dumps(asdict(self), indent=2))
        os.replace(tmp, p)  # readers never see a half-written file

    @classmethod
    def load(cls, path: Path) -> "RunState":
        data = json.loads(path.read_text())
        procs = [ProcessState(**p) for p in data.pop("processes", [])]
        return cls(**data, processes=procs)

    def by_kind(self, kind: str) -> list[ProcessState]:
        return [p for p in self.processes if p.kind == kind]

    def endpoint_urls(self, kind: str) -> list[str]:
        return [p.url for p in self.processes if p.kind == kind and p.url]


def runs_root(base: str | None = None) -> Path:
    """$RECIPECTL_RUN_DIR wins over the recipe's launch.run_dir (tests, CI, shared hosts)."""
    return Path(os.path.expanduser(os.environ.get("RECIPECTL_RUN_DIR") or base or ".recipectl/runs"))


def new_run_dir(root: Path, recipe_name: str) -> tuple[str, Path]:
    run_id = f"{recipe_name}-{time.strftime('%Y%m%d-%H%M%S')}"
    d = root / run_id
    n = 1
    while d.exists():
        n += 1
        d = root / f"{run_id}-{n}"
    d.mkdir(parents=True)
    (root / "latest").unlink(missing_ok=True)
    (root / "latest").symlink_to(d.name)
    return d.name, d


def find_run(ref: str | None, root: Path) -> RunState:
    """A run by directory, state file, run id, recipe name (its newest run), or the latest run."""
    candidates: list[Path] = []
    if ref:
        p = Path(ref)
        if p.is_file() and p.name == STATE_FILE:
            candidates.append(p)
        elif (p / STATE_FILE).is_file():
            candidates.append(p / STATE_FILE)
        elif (root / ref / STATE_FILE).is_file():
            candidates.append(root / ref / STATE_FILE)
        else:
            matches = []
            if "/" not in ref and not ref.startswith("."):
                matches = sorted(root.glob(f"{ref}-*/{STATE_FILE}"), key=lambda q: q.stat().st_mtime)
            if not matches and p.suffix in (".yaml", ".yml") and p.is_file():
                from ..validate import load_one

                name = load_one(str(p)).recipe.name
                matches = sorted(root.glob(f"{name}-*/{STATE_FILE}"), key=lambda q: q.stat().st_mtime)
            candidates.extend(matches[-1:])
    elif (root / "latest" / STATE_FILE).is_file():
        candidates.append(root / "latest" / STATE_FILE)
    if not candidates:
        raise RecipectlError(f"no run found{f' for {ref!r}' if ref else ''} under {root}",
                             fix="start one with: recipectl launch RECIPE --detach")
    return RunState.load(candidates[0])
