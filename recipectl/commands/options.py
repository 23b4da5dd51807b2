"""The command lines of `validate`, `fix` and `render`, declared once, as plain data.

cli.py builds the Typer commands from these specs, and entry.py's fast parser reads the same
specs, so the two cannot drift apart. This module imports nothing heavy (no Typer): entry.py
reads it before it decides whether Typer is needed at all. tests/test_entry.py runs command lines
both ways and checks the built Typer commands against these specs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..render.registry import TARGETS as RENDER_TARGETS
from ..render.registry import target_help


@dataclass(frozen=True)
class Opt:
    """One option: its spellings, where its value goes, and what it accepts."""
    dest: str
    names: tuple[str, ...]  # e.g. ("--format", "-f")
    help: str
    flag: bool = False  # takes no value; True when given, False otherwise
    choices: tuple[str, ...] | None = None  # the values it accepts (the first is the default)
    repeatable: bool = False  # may be given many times; the values are collected in a list
    metavar: str | None = None

    @property
    def default(self) -> Any:
        if self.flag:
            return False
        if self.choices:
            return self.choices[0]
        return None


@dataclass(frozen=True)
class Command:
    """A command: its one positional argument (one value or many), its options, the function
    that runs it ("module:function", called with every dest as a keyword) and its help."""
    name: str
    argument: str  # dest of the positional argument
    many: bool  # one or more positional values (a list), or exactly one
    argument_help: str
    options: tuple[Opt, ...]
    run: str
    help: str

    def defaults(self) -> dict[str, Any]:
        return {o.dest: o.default for o in self.options}


# The environment variable that asks for a shell completion (Typer answers it; entry.py leaves
# such a run to Typer). Pinned, not derived from the program's name: `python -m recipectl` too.
COMPLETE_VAR = "_RECIPECTL_COMPLETE"

FORMATS = ("text", "json", "sarif", "github")
TARGETS = tuple(RENDER_TARGETS)  # the render targets' registry, in its order (the first is the default)

# Rule selection, the same for every command that runs the rules (validate, fix).
SELECT = Opt("select", ("--select",), "only these rules: codes, prefixes (HYB, VER0) or names; replaces the "
             "configured selection (repeatable, or comma-separated)", repeatable=True, metavar="CODES")
EXTEND_SELECT = Opt("extend_select", ("--extend-select",), "these rules as well as the selected ones",
                    repeatable=True, metavar="CODES")
CONFIG = Opt("config", ("--config",), "read settings from this pyproject.toml or recipectl.toml instead of the "
             "nearest one", metavar="FILE")

VALIDATE = Command(
    name="validate",
    argument="recipes",
    many=True,
    argument_help="recipe files or directories; - reads one recipe from standard input",
    options=(
        Opt("format", ("--format", "-f"), "text, json, sarif (SARIF 2.1.0) or github (workflow annotations)",
            choices=FORMATS),
        Opt("strict", ("--strict",), "warnings fail too (exit 1)", flag=True),
        SELECT, EXTEND_SELECT,
        Opt("ignore", ("--ignore",), "turn these rules off (the summary names them)", repeatable=True,
            metavar="CODES"),
        Opt("severity", ("--severity",), "report a rule at another severity: CODE=error|warning|info",
            repeatable=True, metavar="CODE=LEVEL"),
        Opt("show_ignored", ("--show-ignored",),
            "run the ignored rules too and list their findings, with the reason each was ignored", flag=True),
        CONFIG,
        Opt("stdin_filename", ("--stdin-filename",), "the name of the recipe read from standard input (-), in "
            "messages and for finding the configuration", metavar="PATH"),
        Opt("quiet", ("--quiet", "-q"), "text: errors and warnings only", flag=True),
    ),
    run="recipectl.commands.validate:validate",
    help="Check recipes against the schema and the hybrid P/D rules.\n\n"
         "Exit 0: clean; 1: rule errors (or warnings with --strict); 2: a file is invalid or a usage error.",
)

FIX = Command(
    name="fix",
    argument="recipes",
    many=True,
    argument_help="recipe files or directories (recipectl's own recipes; other formats are refused)",
    options=(
        Opt("diff", ("--diff",), "print a unified diff of the fixes and change no file", flag=True),
        Opt("unsafe_fixes", ("--unsafe-fixes",), "also apply the fixes that change more than the finding "
            "(memory, numerics, a feature turned off); docs/rules.md says which", flag=True),
        Opt("format", ("--format", "-f"), "text or json (what was fixed, what remains)", choices=("text", "json")),
        Opt("strict", ("--strict",), "remaining warnings fail too (exit 1)", flag=True),
        SELECT, EXTEND_SELECT,
        Opt("ignore", ("--ignore",), "turn these rules off: neither fixed nor reported", repeatable=True,
            metavar="CODES"),
        CONFIG,
        Opt("quiet", ("--quiet", "-q"), "text: the summary and remaining errors and warnings only", flag=True),
    ),
    run="recipectl.commands.fix:fix",
    help="Apply the rules' mechanical fixes to recipe files, keeping comments, key order and formatting.\n\n"
         "Safe fixes by default; --unsafe-fixes for those that change more than the finding. "
         "Exit 0: nothing remains that validate fails on; 1: findings remain (or, with --diff, a fix would "
         "change a file); 2: a file is invalid or not a recipectl recipe, or a usage error.",
)

RENDER = Command(
    name="render",
    argument="recipe",
    many=False,
    argument_help="the recipe",
    options=(
        Opt("target", ("--target", "-t"), target_help(), choices=TARGETS),
        Opt("out", ("--out", "-o"), "directory to write; stdout when omitted"),
        Opt("variant", ("--variant",), "one variant of a matrix recipe"),
        Opt("force", ("--force",), "replace files that already exist in --out", flag=True),
    ),
    run="recipectl.commands.render:render",
    help="Render the deployment (every vllm serve process and the router) for a target.",
)

COMMANDS: dict[str, Command] = {c.name: c for c in (VALIDATE, FIX, RENDER)}
