"""The live start-up table (stderr): one row per process — phase, elapsed, last log line."""

from __future__ import annotations

import contextlib
import time

from ..runs.processes import is_ours, last_line, recorded_start
from ..runs.state import RunState


def phase(p) -> str:
    if p.exited is not None:
        return f"[red]exited {p.exited}[/]"
    if p.healthy_at:
        return "[green]healthy[/]"
    if p.pid:
        return "[yellow]starting[/]" if is_ours(p.pid, recorded_start(p)) else "[red]gone[/]"
    return "[dim]waiting for workers[/]"


def table(state: RunState):
    from rich.table import Table

    t = Table(title=f"{state.recipe_name}  ({state.run_dir})", title_justify="left", expand=True)
    for col, kw in (
        ("process", {"no_wrap": True}),
        ("phase", {"no_wrap": True}),
        ("time", {"justify": "right"}),
        ("url", {"no_wrap": True}),
        ("last log line", {"overflow": "ellipsis", "no_wrap": True, "ratio": 1}),
    ):
        t.add_column(col, **kw)
    now = time.time()
    for p in state.processes:
        if p.healthy_at and p.started_at:
            elapsed = f"{p.healthy_at - p.started_at:.0f}s"
        elif p.started_at:
            elapsed = f"{now - p.started_at:.0f}s"
        else:
            elapsed = "-"
        t.add_row(p.name, phase(p), elapsed, p.url or "-", last_line(p.log)[-160:] if p.started_at else "")
    return t


class _Live:
    def __init__(self, live, state):
        self._live, self._state = live, state

    def update(self) -> None:
        if self._live is not None:
            self._live.update(table(self._state))


class Display:
    """Rich on a terminal; plain progress lines otherwise (CI logs, pipes)."""

    def __init__(self, quiet: bool = False):
        from rich.console import Console

        self.console = Console(stderr=True)
        self.quiet = quiet

    @contextlib.contextmanager
    def live(self, state: RunState):
        if self.quiet or not self.console.is_terminal:
            yield _PlainLive(state, self.console, self.quiet)
            return
        from rich.live import Live

        with Live(table(state), console=self.console, refresh_per_second=4, transient=False) as live:
            yield _Live(live, state)

    def ready(self, state: RunState) -> None:
        self.console.print(
            f"[green]ready[/] — router {state.router_url}; Ctrl-C stops everything (logs in {state.run_dir})"
        )


class _PlainLive:
    def __init__(self, state, console, quiet):
        self.state, self.console, self.quiet = state, console, quiet
        self.seen: dict[str, str] = {}
        self.last_tick = 0.0

    def update(self) -> None:
        if self.quiet:
            return
        for p in self.state.processes:
            ph = phase(p)
            if self.seen.get(p.name) != ph:
                self.seen[p.name] = ph
                self.console.print(f"{p.name}: {ph}", highlight=False)
        if time.time() - self.last_tick > 30:  # a heartbeat for long start-ups
            self.last_tick = time.time()
            waiting = [p.name for p in self.state.processes if not p.healthy_at]
            if waiting:
                self.console.print(f"waiting for {', '.join(waiting)} ...", highlight=False)
