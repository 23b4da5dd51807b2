"""The commands: each declares its command line (Typer reads its annotations), prints what it
found and returns its exit code. The command table in cli.py names them."""

from __future__ import annotations

import contextlib
import functools
import sys
from collections.abc import Callable, Iterator
from typing import ParamSpec, TypeVar

from ..diagnostics import error_to_json
from ..errors import RecipectlError
from ..validate import load_variant

P = ParamSpec("P")
R = TypeVar("R")


def echo(text: str) -> None:
    """Write `text` to stdout, ending it with one newline."""
    sys.stdout.write(text if text.endswith("\n") else text + "\n")


@contextlib.contextmanager
def errors_as_json(as_json: bool) -> Iterator[None]:
    """Under `--format json`, a command that fails still prints one JSON document on stdout: the
    error (message, fix, exit code) and, where it is a recipe's findings, validate's report of them
    (docs/json-output.md). The error goes on to stderr and the exit code as in text mode."""
    watched = _Watched(sys.stdout)
    sys.stdout = watched
    try:
        yield
    except RecipectlError as e:
        # a command that printed its document before it failed (plan's report, then --write-recipe
        # refused) has said its one: a second would make stdout no JSON a script can read
        if as_json and not watched.written:
            echo(error_to_json(e.message, e.fix, int(e.exit_code), e.reports))
        raise
    finally:
        sys.stdout = watched.stream


class _Watched:
    """stdout, noting whether anything was written to it."""

    def __init__(self, stream) -> None:
        self.stream = stream
        self.written = False

    def write(self, text: str) -> int:
        self.written = self.written or bool(text)
        return self.stream.write(text)

    def __getattr__(self, name: str):
        return getattr(self.stream, name)


def json_errors_of(command: Callable[P, R]) -> Callable[P, R]:
    """errors_as_json around a command function called with `as_json=`."""

    @functools.wraps(command)
    def run(*args: P.args, **kwargs: P.kwargs) -> R:
        with errors_as_json(bool(kwargs.get("as_json"))):
            return command(*args, **kwargs)

    return run


def load_recipe_or_none(recipe_path: str | None, variant: str | None, command: str):
    """The recipe a command that may run without one was given (one variant of a matrix recipe:
    --variant); None without one. --variant without a recipe is a usage error."""
    if recipe_path:
        return load_variant(recipe_path, variant).recipe
    if variant:
        raise RecipectlError(
            "--variant picks one variant of a matrix recipe, and no recipe was given",
            fix=f"recipectl {command} RECIPE --variant NAME",
        )
    return None
