"""The process entry point of `recipectl` and `python -m recipectl`.

A run of `recipectl validate` or `recipectl render` is mostly interpreter start-up and imports,
and importing Typer and building the pydantic TypeAdapters it makes for every parameter of the
command it parses took about 40 ms of a ~310 ms validate (2-core machine). So a command line of
those two commands (and of `fix`, which runs validate's rules) that uses only their plain forms
is parsed here, by a small parser that accepts a strict subset of what the Typer app in cli.py
accepts, and calls the same function (recipectl/commands/) the Typer command calls. Everything
else goes to the Typer app, which prints its own help, usage errors and suggestions: another
command, --help, an unknown or misspelt option, a missing or invalid value, an option value that
starts with '-', combined short options (-qf), `--`, shell completion. The options of these
commands are declared once, in commands/options.py: cli.py builds the Typer commands from those
specs and this parser reads them.
tests/test_entry.py runs command lines both ways and compares stdout, stderr and exit codes, and
checks the built Typer commands against the specs.
"""

from __future__ import annotations

import os
import sys
from typing import Any

from .guard import as_typer_would, run_guarded


def parse_fast(argv: list[str]) -> tuple[str, dict[str, Any]] | None:
    """(command, arguments) when the fast path handles `argv` exactly as the Typer app would;
    None to leave it to the Typer app. The options are those declared in commands/options.py,
    from which cli.py builds the Typer commands."""
    from .commands.options import COMMANDS, COMPLETE_VAR

    if not argv or argv[0] not in COMMANDS:
        return None
    if os.environ.get(COMPLETE_VAR):
        return None  # a shell-completion request: Typer answers it
    spec = COMMANDS[argv[0]]
    by_name = {name: opt for opt in spec.options for name in opt.names}
    values: dict[str, Any] = {}
    words: list[str] = []
    args = argv[1:]
    i = 0
    while i < len(args):
        arg = args[i]
        i += 1
        if arg == "-" or not arg.startswith("-"):
            words.append(arg)  # click: options may come between arguments
            continue
        name, eq, attached = arg.partition("=") if arg.startswith("--") else (arg, "", "")
        opt = by_name.get(name)
        if opt is None:
            return None
        if opt.flag:
            if eq:
                return None
            values[opt.dest] = True
            continue
        if eq:
            value = attached
        elif i < len(args):
            value = args[i]
            i += 1
        else:
            return None
        if value.startswith("-") or (opt.choices is not None and value not in opt.choices):
            return None
        if opt.repeatable:
            values.setdefault(opt.dest, []).append(value)
        else:
            values[opt.dest] = value  # click: the last one wins
    if not words or (not spec.many and len(words) > 1):
        return None
    values[spec.argument] = words if spec.many else words[0]
    return argv[0], values


# What each fast command imports before it reads a file: yaml, pydantic, the schema, the rules
# (and Jinja2 to render).
_FAST_IMPORTS = {
    "validate": ("recipectl.commands.validate", "recipectl.validate", "recipectl.rules"),
    "fix": ("recipectl.commands.fix", "recipectl.validate", "recipectl.rules"),
    "render": ("recipectl.commands.render", "recipectl.validate", "recipectl.render.processes",
               "recipectl.render.targets"),
}


def _import_without_gc(command: str) -> None:
    """Import what `command` needs with the cyclic garbage collector paused, then freeze it.

    Those imports create objects that all live until the process exits, and the collector would
    walk them again and again for almost nothing to free. It stays because it is worth more than
    the 15% of validate's median that a start-up workaround must buy (benchmarks/validate_startup.py,
    with and without it in interleaved rounds), and it uses only the gc module's public API;
    tests/test_startup_imports.py checks that the collector runs again afterwards.
    gc.freeze() then moves them out of its sight, so the collections the command itself triggers
    look only at what the command allocates."""
    import gc
    import importlib

    gc.disable()
    try:
        for name in _FAST_IMPORTS[command]:
            importlib.import_module(name)
    finally:
        gc.freeze()
        gc.enable()


def _run_fast(command: str, values: dict[str, Any]) -> int:
    import importlib

    from .commands.options import COMMANDS

    _import_without_gc(command)
    spec = COMMANDS[command]
    module, _, function = spec.run.partition(":")
    return getattr(importlib.import_module(module), function)(**{**spec.defaults(), **values})


def main() -> None:
    fast = parse_fast(sys.argv[1:])
    if fast is None:
        from .cli import main as typer_main

        typer_main()
        return
    command, values = fast
    run_guarded(lambda: as_typer_would(lambda: _run_fast(command, values)))
