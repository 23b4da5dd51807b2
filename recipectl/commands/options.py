"""The options several commands share, declared once as annotated types that Typer reads, and the
values they accept. A command's own options are declared on its function, in its module; the
command table (cli.py) names the function.
"""

from __future__ import annotations

from typing import Annotated, Literal

import typer

from ..render.registry import TARGETS as RENDER_TARGETS
from . import complete

FORMATS = ("text", "json", "sarif", "github")
TARGETS = tuple(RENDER_TARGETS)  # the render targets' registry, in its order (the first is the default)

ReportFormat = Literal[FORMATS]  # type: ignore[valid-type]
TargetName = Literal[TARGETS]  # type: ignore[valid-type]

VARIANT_HELP = "one variant of a matrix recipe (its name, or the part after the recipe's name)"
RUN_DIR_HELP = (
    "where runs are kept (a recipe's launch.run_dir); given a recipe file, its own launch.run_dir is used without this"
)

# --format of the commands that print either text or JSON
TextOrJsonValue = Literal["text", "json"]
TextOrJson = Annotated[TextOrJsonValue, typer.Option("--format", "-f")]

# --variant: every command that reads one recipe takes it (a matrix recipe is many)
Variant = Annotated[str | None, typer.Option("--variant", help=VARIANT_HELP, autocompletion=complete.variants)]

RunDir = Annotated[str | None, typer.Option("--run-dir", help=RUN_DIR_HELP)]

# Rule selection, the same for every command that runs the rules (validate, fix).
Select = Annotated[
    list[str] | None,
    typer.Option(
        "--select",
        metavar="CODES",
        autocompletion=complete.rule_selectors,
        help="only these rules: codes, prefixes (HYB, VER0) or names; replaces the configured selection "
        "(repeatable, or comma-separated)",
    ),
]
ExtendSelect = Annotated[
    list[str] | None,
    typer.Option(
        "--extend-select",
        metavar="CODES",
        autocompletion=complete.rule_selectors,
        help="these rules as well as the selected ones",
    ),
]
Config = Annotated[
    str | None,
    typer.Option(
        "--config",
        metavar="FILE",
        help="read settings from this pyproject.toml or recipectl.toml instead of the nearest one",
    ),
]


def ignore_option(help: str) -> typer.models.OptionInfo:
    """--ignore: rules turned off (what that means differs between validate and fix)."""
    return typer.Option("--ignore", metavar="CODES", autocompletion=complete.rule_selectors, help=help)


def recipe_argument(help: str | None = None) -> typer.models.ArgumentInfo:
    """A command's recipe argument: the shell completes recipe files."""
    return typer.Argument(help=help, autocompletion=complete.recipe_files)
