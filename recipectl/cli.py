"""The command line: one Typer app whose commands are loaded when they are used.

COMMANDS is the table of every command: its name, the function (or Typer sub-app) that declares
its arguments and runs it, and its help. `recipectl --help`, misspelt-command suggestions and the
docs read the table; only the command being run (or asked for its help or completions) is
imported, so `recipectl validate` imports what validate uses and nothing another command needs.
A command is a function in recipectl/commands/ whose parameters are declared with Typer's
annotations and which returns its exit code; adding one is a row here and that function.
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import typer
from typer.core import TyperGroup

from .guard import run_guarded

# The environment variable that asks for a shell completion. Pinned, not derived from the
# program's name, so that `python -m recipectl` answers it as the `recipectl` script does.
COMPLETE_VAR = "_RECIPECTL_COMPLETE"


@dataclass(frozen=True)
class CommandEntry:
    """One command of the table. `target` is "module:attribute": a function declared with Typer's
    annotations that returns the exit code, or a typer.Typer of subcommands."""

    name: str
    target: str
    help: str


COMMANDS: tuple[CommandEntry, ...] = (
    CommandEntry(
        "validate",
        "recipectl.commands.validate:validate",
        "Check recipes against the schema and the hybrid P/D rules.\n\n"
        "Exit 0: clean; 1: rule errors (or warnings with --strict); 2: a file is invalid or a usage error.",
    ),
    CommandEntry(
        "fix",
        "recipectl.commands.fix:fix",
        "Apply the rules' mechanical fixes to recipe files, keeping comments, key order and formatting.\n\n"
        "Safe fixes by default; --unsafe-fixes for those that change more than the finding. "
        "Exit 0: nothing remains that validate fails on; 1: findings remain (or, with --diff, a fix would "
        "change a file); 2: a file is invalid or not a recipectl recipe, or a usage error.",
    ),
    CommandEntry(
        "render",
        "recipectl.commands.recipes:render",
        "Render the deployment (every vllm serve process and the router) for a target.",
    ),
    CommandEntry("rules", "recipectl.commands.recipes:list_rules", "List every rule: code, severity, category, title."),
    CommandEntry(
        "explain",
        "recipectl.commands.recipes:explain",
        "Print one rule's documentation: what it checks, why, example, fix, source.",
    ),
    CommandEntry(
        "show",
        "recipectl.commands.recipes:show",
        "Print a recipe (with --resolved: exactly what will run, defaults included, and each role's "
        "effective engine configuration: value, source and, where the engine picks by host, each host's).",
    ),
    CommandEntry("expand", "recipectl.commands.recipes:expand", "Expand a recipe's matrix into its concrete recipes."),
    CommandEntry(
        "import",
        "recipectl.commands.recipes:import_recipe",
        "Write the equivalent recipectl recipe: each value with the original line it came from, and "
        "what could not be carried. Exit 2: not a format recipectl reads, or an -o it will not write.",
    ),
    CommandEntry(
        "launch",
        "recipectl.commands.deployments:launch",
        "Start the deployment: endpoints in parallel, the router once they are up; supervise it.",
    ),
    CommandEntry(
        "lock",
        "recipectl.commands.deployments:lock",
        "Pin what a recipe resolves to (each role's effective settings and their origin, the page "
        "geometry, the engine build, the model config, the image, each rendered command's hash) and check "
        "it later.\n\n"
        "Exit 0: written, or no drift; 1: drift (each field named, with why it matters); 2: no readable "
        "lock.",
    ),
    CommandEntry(
        "status", "recipectl.commands.deployments:status", "Show a run's processes: alive, healthy, ports, logs."
    ),
    CommandEntry(
        "stop",
        "recipectl.commands.deployments:stop",
        "Stop a run: SIGTERM to every process group, SIGKILL after the grace period.",
    ),
    CommandEntry("down", "recipectl.commands.deployments:stop", "Alias of stop."),
    CommandEntry("logs", "recipectl.commands.deployments:logs", "Print the logs of a run's processes."),
    CommandEntry(
        "plan",
        "recipectl.commands.deployments:plan",
        "Capacity plan: KV cache + GDN state per GPU, concurrency at which decode saturates; with --sla, "
        "the P/D configurations that meet a TTFT/ITL target, ranked.",
    ),
    CommandEntry(
        "calibrate",
        "recipectl.commands.deployments:calibrate",
        "Measure the deployment at the few points that pin plan --sla's performance model; write them and the fit.",
    ),
    CommandEntry(
        "doctor",
        "recipectl.commands.deployments:doctor",
        "Environment, endpoint health, proof that KV moved over NIXL, parity and a gated GSM8K check.\n\n"
        "Exit 0: every check passed; 1: a check failed; 2: doctor could not run.",
    ),
    CommandEntry(
        "bench",
        "recipectl.commands.deployments:bench_app",
        "The concurrency sweep (`bench RECIPE`, `bench run RECIPE`) and comparing two sweeps.",
    ),
    CommandEntry(
        "top",
        "recipectl.commands.deployments:top",
        "Live KV-cache use, running/waiting requests and throughput of every endpoint (from /metrics).",
    ),
)


def _exits_with_its_code(fn: Callable[..., Any]) -> Callable[..., Any]:
    """A command function's return value as the process's exit code."""

    @functools.wraps(fn)
    def command(*args: Any, **kwargs: Any) -> None:
        raise typer.Exit(int(fn(*args, **kwargs) or 0))

    return command


def load_command(entry: CommandEntry) -> Any:
    """The click command of a table entry: its module imported, its function made a command."""
    module, _, attribute = entry.target.partition(":")
    found = getattr(importlib.import_module(module), attribute)
    if not isinstance(found, typer.Typer):
        single = typer.Typer(add_completion=False)
        single.command(entry.name, help=entry.help)(_exits_with_its_code(found))
        found = single
    command = typer.main.get_command(found)
    command.name = entry.name
    command.help = entry.help
    return command


class _Commands(Mapping[str, Any]):
    """The group's commands by name, each loaded on first use: the names are the table's."""

    def __init__(self, entries: tuple[CommandEntry, ...]):
        self._entries = {e.name: e for e in entries}
        self._loaded: dict[str, Any] = {}

    def __getitem__(self, name: str) -> Any:
        if name not in self._loaded:
            self._loaded[name] = load_command(self._entries[name])
        return self._loaded[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)


class LazyGroup(TyperGroup):
    """recipectl's command group: the table's commands, each imported when it is looked up."""

    def __init__(self, **attrs: Any):
        super().__init__(**attrs)
        self.commands = _Commands(COMMANDS)  # type: ignore[assignment]


app = typer.Typer(
    cls=LazyGroup,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    help="Validate, render, launch and check disaggregated prefill/decode vLLM deployments of hybrid-attention models.",
)


@app.callback()
def _root() -> None:
    # recipectl's own options (--install-completion, --show-completion, --help) and no others;
    # a callback makes the app a group even while no command has been loaded
    pass


def main() -> None:
    """The console entry point: Typer parses the command line, prints help and usage errors (exit 2)
    and answers shell completion requests (COMPLETE_VAR); run_guarded maps what a command raises
    to its message and exit code."""
    run_guarded(lambda: app(complete_var=COMPLETE_VAR))


if __name__ == "__main__":
    main()
