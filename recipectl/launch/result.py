"""What a launch gives back, whichever launcher ran it, and the protocol every launcher follows."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from ..runs.state import ProcessState, RunState
from ..schema import Recipe

if TYPE_CHECKING:
    from .display import Display


@dataclass
class LaunchResult:
    """ok: every process is up and one request went through the router. Otherwise the message,
    the process whose log explains it, that log's tail and the recognised cause with its fix."""

    state: RunState
    ok: bool
    message: str
    failed: ProcessState | None = None
    log_tail: str = ""
    diagnosis: str | None = None
    fix: str | None = None
    cleaned_up: str = "every process of the run was stopped"  # what the launcher did about it


@runtime_checkable
class Launcher(Protocol):
    """What `recipectl launch --target NAME` runs (launch/registry.py holds one per target).

    `launch` starts a recipe's deployment, waits until it serves (readiness, then the first request,
    launch.warmup), and on failure cleans up and diagnoses. With `detach` it returns once ready;
    otherwise it stays in the foreground until the deployment ends. Ctrl-C cleans up and is
    re-raised; `interrupted` says what that clean-up did. `check_first` runs the host's preflight
    (a launcher whose preflight is the scheduler's ignores it). The run it writes (recipectl.runs,
    with `target` its name) is what status, stop, logs and doctor read."""

    name: str  # --target's value, and the run state's target
    interrupted: str  # what Ctrl-C during a launch left behind, in words

    def launch(
        self,
        recipe_path: str,
        recipe: Recipe,
        *,
        detach: bool,
        timeout_s: float | None,
        display: Display,
        check_first: bool = True,
    ) -> LaunchResult: ...
