"""The command line: parse -> call -> present -> exit code. Nothing else lives here.

Heavy modules (httpx, rich live displays, jinja2, the planner) are imported inside the command
that needs them. Plain `validate` and `render` command lines do not reach this module: entry.py
parses them and calls the same functions, without importing Typer.
"""

from __future__ import annotations

from enum import Enum
from typing import List, Optional

import typer
from typer.core import TyperGroup

from .commands import complete, echo
from .commands.options import COMMANDS, COMPLETE_VAR, Command
from .errors import RecipectlError

app = typer.Typer(no_args_is_help=True, pretty_exceptions_enable=False,
                  help="Validate, render, launch and check disaggregated prefill/decode vLLM deployments "
                       "of hybrid-attention models.")


class OutputFormat(str, Enum):
    text = "text"
    json = "json"


class RecipeFormat(str, Enum):
    """How `show` writes a recipe."""
    yaml = "yaml"
    json = "json"


class ExpandFormat(str, Enum):
    """How `expand` writes the recipes: whole, or their names only."""
    yaml = "yaml"
    json = "json"
    names = "names"


VARIANT_HELP = "one variant of a matrix recipe (its name, or the part after the recipe's name)"


def _variant() -> typer.models.OptionInfo:
    """--variant: every command that reads one recipe takes it (a matrix recipe is many)."""
    return typer.Option(None, "--variant", help=VARIANT_HELP, autocompletion=complete.variants)


def _recipe(default: object = ..., help: str | None = None) -> typer.models.ArgumentInfo:
    """A command's recipe argument: the shell completes recipe files."""
    return typer.Argument(default, help=help, autocompletion=complete.recipe_files)


def _from_spec(spec: Command) -> None:
    """Add the Typer command that `spec` (commands/options.py) declares: the same options, values
    and help that entry.py's fast parser reads from it. Its function's signature is built from
    the spec; it calls the spec's function with every value by its dest."""
    import importlib
    import inspect

    params, annotations = [], {}
    for dest, ann, default in _typer_params(spec):
        params.append(inspect.Parameter(dest, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=ann))
        annotations[dest] = ann

    def command(**values: object) -> None:
        module, _, function = spec.run.partition(":")
        run = getattr(importlib.import_module(module), function)
        raise typer.Exit(run(**{k: v.value if isinstance(v, Enum) else v for k, v in values.items()}))

    command.__name__ = spec.name
    command.__doc__ = spec.help
    command.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
    command.__annotations__ = annotations
    app.command(spec.name)(command)


def _typer_params(spec: Command) -> list[tuple[str, object, object]]:
    """(dest, annotation, typer.Argument/Option) of each parameter of a spec'd command."""
    out: list[tuple[str, object, object]] = [
        (spec.argument, List[str] if spec.many else str,
         typer.Argument(..., help=spec.argument_help, autocompletion=complete.SPEC_COMPLETERS.get(spec.argument)))]
    for o in spec.options:
        if o.flag:
            ann: object = bool
        elif o.choices:
            ann = Enum("".join(w.title() for w in (spec.name, o.dest)).replace("_", ""),  # type: ignore[misc]
                       [(c, c) for c in o.choices], type=str)
        elif o.repeatable:
            ann = Optional[List[str]]
        else:
            ann = Optional[str]
        default = ann(o.default) if o.choices else o.default  # type: ignore[operator]
        out.append((o.dest, ann, typer.Option(default, *o.names, help=o.help, metavar=o.metavar,
                                              autocompletion=complete.SPEC_COMPLETERS.get(o.dest))))
    return out


for _spec in COMMANDS.values():
    _from_spec(_spec)


@app.command("rules")
def list_rules(format: OutputFormat = typer.Option(OutputFormat.text, "--format", "-f")) -> None:
    """List every rule: code, severity, category, title."""
    from .ruledocs import rules_json
    from .rules import all_rules

    if format is OutputFormat.json:
        echo(rules_json())
        return
    for r in all_rules():
        echo(f"{r.code}  {r.severity.value:<7}  {r.category.value:<17}  {r.name:<38} {r.title}")


@app.command()
def explain(code: str = typer.Argument(..., help="rule code or name, e.g. HYB001",
                                       autocompletion=complete.rule_codes)) -> None:
    """Print one rule's documentation: what it checks, why, example, fix, source."""
    from .ruledocs import rule_page
    from .rules import all_rules, get_rule

    r = get_rule(code)
    if r is None:
        import difflib

        names = [x.code for x in all_rules()] + [x.name for x in all_rules()]
        close = difflib.get_close_matches(code, names, n=1)
        raise RecipectlError(f"no rule {code!r}", fix=f"did you mean {close[0]}?" if close else "see: recipectl rules")
    echo(rule_page(r))


@app.command()
def show(
    recipe: str = _recipe(),
    resolved: bool = typer.Option(False, "--resolved", help="every default filled in"),
    format: RecipeFormat = typer.Option(RecipeFormat.yaml, "--format", "-f"),
    variant: Optional[str] = _variant(),
) -> None:
    """Print a recipe (with --resolved: exactly what will run, defaults included, and each role's
    effective engine configuration: value, source and, where the engine picks by host, each host's)."""
    from .validate import load_variant

    loaded = load_variant(recipe, variant)
    data = loaded.recipe.model_dump(mode="json", exclude_unset=not resolved, exclude_none=not resolved)
    if resolved:
        from .effective import resolve

        data["effective"] = {role: eff.to_json() for role, eff in resolve(loaded.recipe).items()}
    from .secretscan import redact_data

    _dump(redact_data(data), format)  # pasted into tickets and chats: no literal credential


@app.command()
def expand(
    recipe: str = _recipe(),
    format: ExpandFormat = typer.Option(ExpandFormat.yaml, "--format", "-f"),
) -> None:
    """Expand a recipe's matrix into its concrete recipes."""
    from pathlib import Path

    from .validate import validate_file

    report, recipes = validate_file(Path(recipe))
    if not report.valid:
        from .diagnostics import format_reports_text

        raise RecipectlError(format_reports_text([report]).rstrip())
    if format is ExpandFormat.names:
        for r in recipes:
            echo(r.recipe.name)
        return
    docs = [r.recipe.model_dump(mode="json", exclude_none=True) for r in recipes]
    if format is ExpandFormat.json:
        import json

        echo(json.dumps(docs, indent=2))
    else:
        import yaml

        echo(yaml.safe_dump_all(docs, sort_keys=False))


@app.command("import")
def import_cmd(
    file: str = typer.Argument(..., help="an srt-slurm recipe, a Dynamo DynamoGraphDeployment or vllm serve lines",
                               autocompletion=complete.import_files),
    out: Optional[str] = typer.Option(None, "--out", "-o", help="write the recipe here (default: stdout); "
                                      "never an existing file without --force, a symlink, or FILE itself"),
    force: bool = typer.Option(False, "--force", help="let -o replace an existing file"),
) -> None:
    """Write the equivalent recipectl recipe: each value with the original line it came from, and
    what could not be carried. Exit 2: not a format recipectl reads, or an -o it will not write."""
    from .commands.import_ import import_recipe

    raise typer.Exit(import_recipe(file, out=out, force=force))


@app.command()
def launch(
    recipe: str = _recipe(),
    target: str = typer.Option("local", "--target", "-t", help="local (this host) or slurm",
                               autocompletion=complete.launch_targets),
    dry_run: bool = typer.Option(False, "--dry-run", help="print every process (host, env, command); start nothing"),
    detach: bool = typer.Option(False, "--detach", "-d", help="return once ready; stop later with recipectl stop"),
    timeout: Optional[float] = typer.Option(None, "--timeout", help="seconds to wait for readiness"),
    variant: Optional[str] = _variant(),
    format: OutputFormat = typer.Option(OutputFormat.text, "--format", "-f", help="json: the run state on stdout"),
    preflight: bool = typer.Option(True, "--preflight/--no-preflight",
                                   help="refuse to start when the host checks find a problem (local target)"),
    locked: bool = typer.Option(False, "--locked", help="refuse to start when the recipe no longer resolves to "
                                                        "its lock (recipectl lock)"),
) -> None:
    """Start the deployment: endpoints in parallel, the router once they are up; supervise it."""
    from .validate import load_variant

    loaded = load_variant(recipe, variant, refuse_errors=not dry_run)
    if locked:
        from .commands.lock import refuse_drift

        refuse_drift(recipe, variant)
    if dry_run:
        from .commands.launch import print_dry_run

        print_dry_run(loaded.recipe, as_json=format is OutputFormat.json)
        return
    from .commands.launch import launch_target

    raise typer.Exit(launch_target(target, recipe, loaded.recipe, detach=detach, timeout=timeout,
                                   as_json=format is OutputFormat.json, preflight=preflight))


@app.command("lock")
def lock_cmd(
    paths: List[str] = typer.Argument(..., metavar="RECIPE | LOCK_A LOCK_B",
                                      help="the recipe to lock or check; with --diff, two lock files",
                                      autocompletion=complete.recipe_files),
    check: bool = typer.Option(False, "--check", help="exit 1 when the recipe no longer resolves to its lock"),
    diff: bool = typer.Option(False, "--diff", help="compare two lock files"),
    out: Optional[str] = typer.Option(None, "--out", "-o", help="the lock file (default: beside the recipe, "
                                                                  "NAME.lock.json)"),
    host_cpu: str = typer.Option("this-host", "--host-cpu",
                                 help="resolve for this kind of host: this-host, avx512-bf16, no-avx512-bf16"),
    variant: Optional[str] = _variant(),
    format: OutputFormat = typer.Option(OutputFormat.text, "--format", "-f"),
) -> None:
    """Pin what a recipe resolves to (each role's effective settings and their origin, the page geometry,
    the engine build, the model config, the image, each rendered command's hash) and check it later.

    Exit 0: written, or no drift; 1: drift (each field named, with why it matters); 2: no readable lock."""
    from .commands import lock as locks

    as_json = format is OutputFormat.json
    if diff:
        if len(paths) != 2 or check:
            raise RecipectlError("--diff compares two lock files", fix="recipectl lock --diff LOCK_A LOCK_B")
        raise typer.Exit(locks.diff(paths[0], paths[1], as_json=as_json))
    if len(paths) != 1:
        raise RecipectlError("lock takes one recipe", fix="recipectl lock RECIPE, or --diff LOCK_A LOCK_B")
    if check:
        raise typer.Exit(locks.check(paths[0], variant=variant, lock_file=out, host_cpu=host_cpu, as_json=as_json))
    raise typer.Exit(locks.write(paths[0], variant=variant, out=out, host_cpu=host_cpu, as_json=as_json))


RUN_DIR_HELP = ("where runs are kept (a recipe's launch.run_dir); given a recipe file, its own launch.run_dir "
                "is used without this")


@app.command()
def status(
    run: Optional[str] = typer.Argument(None, help="run id, recipe or run directory (default: the latest run)",
                                        autocompletion=complete.runs),
    format: OutputFormat = typer.Option(OutputFormat.text, "--format", "-f"),
    run_dir: Optional[str] = typer.Option(None, "--run-dir", help=RUN_DIR_HELP),
    variant: Optional[str] = _variant(),
) -> None:
    """Show a run's processes: alive, healthy, ports, logs."""
    from .commands.launch import show_status

    raise typer.Exit(show_status(run, as_json=format is OutputFormat.json, run_dir=run_dir, variant=variant))


@app.command()
def stop(
    run: Optional[str] = typer.Argument(None, help="run id, recipe or run directory (default: the latest)",
                                        autocompletion=complete.runs),
    run_dir: Optional[str] = typer.Option(None, "--run-dir", help=RUN_DIR_HELP),
    variant: Optional[str] = _variant(),
) -> None:
    """Stop a run: SIGTERM to every process group, SIGKILL after the grace period."""
    from .commands.launch import stop_run

    raise typer.Exit(stop_run(run, run_dir=run_dir, variant=variant))


app.command("down", help="Alias of stop.")(stop)


@app.command()
def logs(
    process: Optional[str] = typer.Argument(None, help="prefill, decode, router or a process name (default: all)"),
    follow: bool = typer.Option(False, "--follow", help="keep printing new lines (-f is --format elsewhere)"),
    lines: int = typer.Option(40, "--lines", "-n"),
    run: Optional[str] = typer.Option(None, "--run", help="run id, recipe or run directory",
                                      autocompletion=complete.runs),
    run_dir: Optional[str] = typer.Option(None, "--run-dir", help=RUN_DIR_HELP),
    variant: Optional[str] = _variant(),
) -> None:
    """Print the logs of a run's processes."""
    from .commands.launch import show_logs

    raise typer.Exit(show_logs(run, process, follow=follow, lines=lines, run_dir=run_dir, variant=variant))


@app.command()
def plan(
    recipe: str = _recipe(),
    format: OutputFormat = typer.Option(OutputFormat.text, "--format", "-f"),
    variant: Optional[str] = _variant(),
    sla: Optional[str] = typer.Option(None, "--sla", help="rank P/D configurations that meet e.g. ttft=2s,itl=50ms"),
    calibration: Optional[str] = typer.Option(None, "--calibration", help="with --sla: a file of recipectl calibrate"),
    gpus: Optional[int] = typer.Option(None, "--gpus", min=2, help="with --sla: devices to split (default: recipe's)"),
    isl: Optional[int] = typer.Option(None, "--isl", min=1, help="with --sla: prompt tokens (default: the workload's)"),
    osl: Optional[int] = typer.Option(None, "--osl", min=1, help="with --sla: output tokens (default: the workload's)"),
) -> None:
    """Capacity plan: KV cache + GDN state per GPU, concurrency at which decode saturates; with --sla,
    the P/D configurations that meet a TTFT/ITL target, ranked."""
    from .commands.plan import plan_command

    raise typer.Exit(plan_command(recipe, as_json=format is OutputFormat.json, variant=variant, sla=sla,
                                  calibration=calibration, gpus=gpus, isl=isl, osl=osl))


@app.command()
def calibrate(
    recipe: str = _recipe(help="the recipe to launch and measure"),
    out: str = typer.Option(..., "--out", "-o", help="the calibration file to write (JSON)"),
    run: Optional[str] = typer.Option(None, "--run", help="measure this running deployment (run id, or the recipe "
                                                         "file for its newest run) instead of launching one"),
    force: bool = typer.Option(False, "--force", help="replace OUT if it exists"),
    variant: Optional[str] = _variant(),
) -> None:
    """Measure the deployment at the few points that pin plan --sla's performance model; write them and the fit."""
    from .commands.calibrate import calibrate as run_calibrate

    raise typer.Exit(run_calibrate(recipe, out=out, variant=variant, attach=run, force=force))


@app.command()
def doctor(
    recipe: Optional[str] = _recipe(None, help="the recipe (its latest run is checked when running)"),
    run: Optional[str] = typer.Option(None, "--run", help="run id or directory instead of the recipe's latest"),
    router: Optional[str] = typer.Option(None, "--router", help="router URL (a deployment not started here)"),
    prefill: List[str] = typer.Option([], "--prefill", help="prefill endpoint URL (repeatable)"),
    decode: List[str] = typer.Option([], "--decode", help="decode endpoint URL (repeatable)"),
    env: bool = typer.Option(True, "--env/--no-env", help="environment checks"),
    proofs: bool = typer.Option(True, "--proofs/--no-proofs", help="P/D transfer proof, parity, GSM8K"),
    parity: bool = typer.Option(True, "--parity/--no-parity"),
    gsm8k: bool = typer.Option(True, "--gsm8k/--no-gsm8k"),
    gsm8k_questions: Optional[int] = typer.Option(None, "--gsm8k-questions", help="override the recipe's sample size"),
    reference: Optional[str] = typer.Option(None, "--reference", help="parity reference URL (default: prefill)"),
    timeout: Optional[float] = typer.Option(None, "--timeout", help="seconds per endpoint check"),
    format: OutputFormat = typer.Option(OutputFormat.text, "--format", "-f"),
    variant: Optional[str] = _variant(),
) -> None:
    """Environment, endpoint health, proof that KV moved over NIXL, parity and a gated GSM8K check.

    Exit 0: every check passed; 1: a check failed; 2: doctor could not run."""
    from .commands.doctor import doctor as run_doctor

    raise typer.Exit(run_doctor(recipe, run=run, router=router, prefill=prefill, decode=decode, env=env,
                                proofs=proofs, parity=parity, gsm8k=gsm8k, gsm8k_questions=gsm8k_questions,
                                reference=reference, timeout=timeout, as_json=format is OutputFormat.json,
                                variant=variant))


class _RunByDefault(TyperGroup):
    """A command group whose `run` subcommand may go unnamed: `recipectl bench RECIPE` is
    `recipectl bench run RECIPE`."""

    def parse_args(self, ctx, args: list[str]) -> list[str]:
        if args and args[0] not in self.commands and args[0] not in ctx.help_option_names:
            args = ["run", *args]
        return super().parse_args(ctx, args)

    def shell_complete(self, ctx, incomplete: str) -> list:
        """`recipectl bench <TAB>`: the subcommands, and the recipe files `bench RECIPE` takes."""
        from click.shell_completion import CompletionItem

        return [*super().shell_complete(ctx, incomplete),
                *(CompletionItem(path) for path in complete.recipe_files(incomplete))]


bench_app = typer.Typer(cls=_RunByDefault, no_args_is_help=True,
                        help="The concurrency sweep (`bench RECIPE`, `bench run RECIPE`) and comparing two sweeps.")
app.add_typer(bench_app, name="bench")


@bench_app.command("run")
def bench_run(
    recipe: str = _recipe(help="the recipe whose deployment to measure"),
    out: Optional[str] = typer.Option(None, "--out", "-o", help="output directory (default: in the run directory)"),
    run: Optional[str] = typer.Option(None, "--run", help="run id or directory (default: the recipe's latest)"),
    router: Optional[str] = typer.Option(None, "--router", help="router URL of a deployment not started here"),
    max_failed_ratio: float = typer.Option(0.0, "--max-failed-ratio", help="failed requests tolerated per level"),
    format: OutputFormat = typer.Option(OutputFormat.text, "--format", "-f"),
    variant: Optional[str] = _variant(),
) -> None:
    """The concurrency sweep with `vllm bench serve`: TPS/GPU, latencies, CSV/JSON/plots, validity gates."""
    from .commands.bench import bench as run_bench

    raise typer.Exit(run_bench(recipe, out=out, run=run, router=router, max_failed_ratio=max_failed_ratio,
                               as_json=format is OutputFormat.json, variant=variant))


@bench_app.command("compare")
def bench_compare(
    run_a: str = typer.Argument(..., metavar="RUN_A", help="a bench directory (its summary.json)"),
    run_b: str = typer.Argument(..., metavar="RUN_B", help="the bench directory to compare with RUN_A"),
    format: OutputFormat = typer.Option(OutputFormat.text, "--format", "-f"),
) -> None:
    """Level-by-level ratios B / A of two bench runs."""
    from .commands.bench import bench_compare as compare

    raise typer.Exit(compare(run_a, run_b, as_json=format is OutputFormat.json))


@app.command()
def top(
    recipe: Optional[str] = _recipe(None, help="the recipe whose latest run to watch"),
    run: Optional[str] = typer.Option(None, "--run"),
    interval: float = typer.Option(2.0, "--interval", "-i", help="seconds between refreshes"),
    once: bool = typer.Option(False, "--once", help="one snapshot, then exit"),
    format: OutputFormat = typer.Option(OutputFormat.text, "--format", "-f", help="json: one snapshot"),
    variant: Optional[str] = _variant(),
) -> None:
    """Live KV-cache use, running/waiting requests and throughput of every endpoint (from /metrics)."""
    from .commands.top import top as run_top

    raise typer.Exit(run_top(recipe, run=run, interval=interval, once=once, as_json=format is OutputFormat.json,
                             variant=variant))


def _dump(data: dict, format: RecipeFormat) -> None:
    if format is RecipeFormat.json:
        import json

        echo(json.dumps(data, indent=2))
    else:
        import yaml

        echo(yaml.safe_dump(data, sort_keys=False))


def main() -> None:
    """The Typer app as the entry point (entry.main calls it for what its fast path leaves)."""
    from .guard import run_guarded

    # app returns the code of a typer.Exit; a shell-completion request (COMPLETE_VAR) exits in it
    run_guarded(lambda: app(standalone_mode=False, complete_var=COMPLETE_VAR))


if __name__ == "__main__":
    main()
