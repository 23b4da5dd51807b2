"""Presentation of the commands: what each prints and the exit code it returns. cli.py (and, for
validate and render, entry.py) parse the command line and call these."""

from __future__ import annotations

import sys


def echo(text: str) -> None:
    """Write `text` to stdout, ending it with one newline."""
    sys.stdout.write(text if text.endswith("\n") else text + "\n")


def load_recipe_or_none(recipe_path: str | None, variant: str | None, command: str):
    """The recipe a command that may run without one was given (one variant of a matrix recipe:
    --variant); None without one. --variant without a recipe is a usage error."""
    from ..errors import RecipectlError

    if recipe_path:
        from ..validate import load_variant

        return load_variant(recipe_path, variant).recipe
    if variant:
        raise RecipectlError("--variant picks one variant of a matrix recipe, and no recipe was given",
                             fix=f"recipectl {command} RECIPE --variant NAME")
    return None
