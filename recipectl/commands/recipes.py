"""The commands that read a recipe or the rules and print something: render, rules, explain, show,
expand, import. Each function declares its command line (Typer reads the annotations) and returns
the exit code; the command table in cli.py names it."""

from __future__ import annotations

import difflib
import json
from pathlib import Path
from typing import Annotated, Literal

import typer
import yaml

from ..diagnostics import format_reports_text
from ..effective import resolve
from ..errors import RecipectlError
from ..render.registry import target_help
from ..ruledocs import rule_page, rules_json
from ..rules import all_rules, get_rule
from ..secretscan import redact_data, redact_text
from ..validate import load_variant, validate_file
from . import complete, echo, errors_as_json
from .import_ import import_recipe as write_imported
from .options import TargetName, TextOrJson, Variant, recipe_argument
from .render import render as render_files


def render(
    recipe: Annotated[str, recipe_argument("the recipe")],
    target: Annotated[TargetName, typer.Option("--target", "-t", help=target_help())] = "bash",
    out: Annotated[str | None, typer.Option("--out", "-o", help="directory to write; stdout when omitted")] = None,
    variant: Variant = None,
    force: Annotated[bool, typer.Option("--force", help="replace files that already exist in --out")] = False,
) -> int:
    return render_files(recipe, target=target, out=out, variant=variant, force=force)


def list_rules(format: TextOrJson = "text") -> int:
    if format == "json":
        echo(rules_json())
        return 0
    for r in all_rules():
        echo(f"{r.code}  {r.severity.value:<7}  {r.category.value:<17}  {r.name:<38} {r.title}")
    return 0


def explain(
    code: Annotated[str, typer.Argument(help="rule code or name, e.g. HYB001", autocompletion=complete.rule_codes)],
) -> int:
    r = get_rule(code)
    if r is None:
        names = [x.code for x in all_rules()] + [x.name for x in all_rules()]
        close = difflib.get_close_matches(code, names, n=1)
        raise RecipectlError(f"no rule {code!r}", fix=f"did you mean {close[0]}?" if close else "see: recipectl rules")
    echo(rule_page(r))
    return 0


def show(
    recipe: Annotated[str, recipe_argument()],
    resolved: Annotated[bool, typer.Option("--resolved", help="every default filled in")] = False,
    format: Annotated[Literal["yaml", "json"], typer.Option("--format", "-f")] = "yaml",
    variant: Variant = None,
) -> int:
    with errors_as_json(format == "json"):
        loaded = load_variant(recipe, variant)
        data = loaded.recipe.model_dump(mode="json", exclude_unset=not resolved, exclude_none=not resolved)
        if resolved:
            data["effective"] = {role: eff.to_json() for role, eff in resolve(loaded.recipe).items()}
    data = redact_data(data)  # pasted into tickets and chats: no literal credential
    echo(json.dumps(data, indent=2) if format == "json" else yaml.safe_dump(data, sort_keys=False))
    return 0


def expand(
    recipe: Annotated[str, recipe_argument()],
    format: Annotated[Literal["yaml", "json", "names"], typer.Option("--format", "-f")] = "yaml",
) -> int:
    report, recipes = validate_file(Path(recipe))
    if not report.valid:
        raise RecipectlError(format_reports_text([report]).rstrip())
    # as show's: a recipe's literal credential is <redacted> (its name too, `name: hf_...`)
    if format == "names":
        for r in recipes:
            echo(redact_text(r.recipe.name))
        return 0
    docs = [redact_data(r.recipe.model_dump(mode="json", exclude_none=True)) for r in recipes]
    echo(json.dumps(docs, indent=2) if format == "json" else yaml.safe_dump_all(docs, sort_keys=False))
    return 0


def import_recipe(
    file: Annotated[
        str,
        typer.Argument(
            help="an srt-slurm recipe, a Dynamo DynamoGraphDeployment or vllm serve lines",
            autocompletion=complete.import_files,
        ),
    ],
    out: Annotated[
        str | None,
        typer.Option(
            "--out",
            "-o",
            help="write the recipe here (default: stdout); never an existing file without --force, a "
            "symlink, or FILE itself",
        ),
    ] = None,
    force: Annotated[bool, typer.Option("--force", help="let -o replace an existing file")] = False,
) -> int:
    return write_imported(file, out=out, force=force)
