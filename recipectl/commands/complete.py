"""What the shell completes (`recipectl --install-completion`): recipe files, a matrix recipe's
variants, rule selectors (run ids: commands/deployments.run_refs). The commands' annotations
(commands/) hand these to Typer as `autocompletion` callbacks; each takes the word being completed
(`incomplete`) and, where the values depend on what came earlier on the command line, the parsed
context (`ctx`, whose `params` hold the values parsed so far). Each returns the candidates that
start with `incomplete`, as values or (value, help) pairs, and never raises: a completion that
fails offers nothing and the shell falls back to file names.

The environment variable that asks for a completion is pinned (COMPLETE_VAR in cli.py), so `python
-m recipectl` answers it as the `recipectl` script does.
"""

from __future__ import annotations

import os
from functools import wraps
from typing import Any, Callable

from ..formats import NATIVE, sniff
from ..loader import parse_yaml
from ..matrix import expand_matrix
from ..rules import all_rules
from ..yamlsource import read_recipe_text

RECIPE_SUFFIXES = (".yaml", ".yml")
IMPORT_SUFFIXES = (".yaml", ".yml", ".sh")  # srt-slurm and Dynamo YAML, `vllm serve` scripts
SEVERITIES = ("error", "warning", "info")

Candidates = list[Any]  # str or (value, help)


def quietly(fn: Callable[..., Candidates]) -> Callable[..., Candidates]:
    """A completer that breaks offers nothing rather than a traceback in the user's shell."""

    @wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Candidates:
        try:
            return fn(*args, **kwargs)
        except Exception:  # a completion is a suggestion; the command itself reports
            return []

    return wrapper


def paths(incomplete: str, suffixes: tuple[str, ...] = RECIPE_SUFFIXES) -> Candidates:
    """Files with one of `suffixes` and directories (ending in /) that start with `incomplete`.
    Hidden entries only when `incomplete` names them. A lone directory is left to the shell (an
    empty answer): its own file completion enters it without the space a completed word gets."""
    directory, prefix = os.path.split(incomplete)
    shown = incomplete[: len(incomplete) - len(prefix)]
    files, dirs = [], []
    with os.scandir(os.path.expanduser(directory) or ".") as entries:
        for e in entries:
            if not e.name.startswith(prefix) or (e.name.startswith(".") and not prefix.startswith(".")):
                continue
            if e.is_dir():
                dirs.append(shown + e.name + "/")
            elif e.name.endswith(suffixes):
                files.append(shown + e.name)
    if not files and len(dirs) == 1:
        return []
    return sorted(files) + sorted(dirs)


@quietly
def recipe_files(incomplete: str) -> Candidates:
    """A recipe argument: .yaml and .yml files, and directories to find them in."""
    return paths(incomplete)


@quietly
def import_files(incomplete: str) -> Candidates:
    """`import FILE`: the YAML of other tools, and `vllm serve` scripts."""
    return paths(incomplete, IMPORT_SUFFIXES)


def variant_names(path: str) -> list[tuple[str, str]]:
    """(short name, full name) of each variant of the matrix recipe at `path`; none for a recipe
    without a matrix (or in another tool's format). The short name is what follows the recipe's
    name (`prefill-endpoints-4`): --variant takes either. A file that cannot be read raises: the
    completer offers nothing then."""
    text = read_recipe_text(path)
    if sniff(text) != NATIVE:
        return []
    data, smap, _ = parse_yaml(text, path)
    if not isinstance(data, dict) or not data.get("matrix"):
        return []
    variants, _ = expand_matrix(data, smap)
    base = f"{data.get('name', 'recipe')}."
    return [(name[len(base) :] if name.startswith(base) else name, name) for name, _, _ in variants if name]


@quietly
def variants(ctx: Any, incomplete: str) -> Candidates:
    """--variant: the variants of the recipe given earlier on the command line (a command's recipe
    argument, or the recipe file that status, stop and logs were given as the run). The parsed
    values are in `ctx.params`, unless the parse stopped early (at `--variant` with no value yet,
    the positional words are left unparsed, in `ctx.args`)."""
    params = getattr(ctx, "params", None) or {}
    given = [params.get("recipe"), params.get("run"), *(getattr(ctx, "args", None) or [])]
    path = next((p for p in given if isinstance(p, str) and p.endswith(RECIPE_SUFFIXES) and os.path.isfile(p)), None)
    if path is None:
        return []
    found = variant_names(path)
    short = [(s, full) for s, full in found if s.startswith(incomplete)]
    return short + [(full, "") for _, full in found if incomplete and full.startswith(incomplete)]


def _rules():
    return all_rules()


def _selectors(word: str) -> Candidates:
    """Rule selectors that start with `word`: ALL, code prefixes (HYB), codes, and for a word in
    lower case the name families (hybrid) and names."""
    rules = _rules()
    out: Candidates = []
    if word == "" or word[0].isupper():
        families = sorted({r.code[:3] for r in rules})
        out += [("ALL", "every rule")] if "ALL".startswith(word) else []
        out += [(f, f"every {f} rule") for f in families if f.startswith(word)]
        out += [(r.code, r.title) for r in rules if r.code.startswith(word)]
    else:
        families = sorted({r.name.split(".")[0] for r in rules})
        out += [(f, f"every {f}.* rule") for f in families if f.startswith(word)]
        out += [(r.name, f"{r.code}: {r.title}") for r in rules if r.name.startswith(word)]
    return out


@quietly
def rule_selectors(incomplete: str) -> Candidates:
    """--select, --extend-select, --ignore: selectors, the last of a comma-separated list."""
    done, comma, word = incomplete.rpartition(",")
    head = done + comma
    return [(head + value, help_) for value, help_ in _selectors(word)]


@quietly
def severity_overrides(incomplete: str) -> Candidates:
    """--severity CODE=LEVEL: a code, then its level."""
    code, eq, level = incomplete.partition("=")
    if eq:
        return [f"{code}={s}" for s in SEVERITIES if s.startswith(level)]
    return [(r.code + "=", r.title) for r in _rules() if r.code.startswith(code)]


@quietly
def rule_codes(incomplete: str) -> Candidates:
    """`explain`: a rule code, or its name."""
    if incomplete and incomplete[0].islower():
        return [(r.name, r.code) for r in _rules() if r.name.startswith(incomplete)]
    return [(r.code, r.title) for r in _rules() if r.code.startswith(incomplete)]


@quietly
def launch_targets(incomplete: str) -> Candidates:
    return [(t, h) for t, h in (("local", "this host"), ("slurm", "an sbatch job")) if t.startswith(incomplete)]
