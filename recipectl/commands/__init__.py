"""The commands: each declares its command line (Typer reads its annotations), prints what it
found and returns its exit code. The command table in cli.py names them."""

from __future__ import annotations

import sys

from ..errors import RecipectlError
from ..validate import load_variant


def echo(text: str) -> None:
    """Write `text` to stdout, ending it with one newline."""
    sys.stdout.write(text if text.endswith("\n") else text + "\n")


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
