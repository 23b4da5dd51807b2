"""The commands that start, watch, measure and stop a deployment, and pin what it resolves to:
launch, lock, status, stop (and its alias down), logs, plan, calibrate, doctor, bench, top. Each function
declares its command line (Typer reads the annotations) and returns the exit code; the command
table in cli.py names it. What each prints lives in its own module (launch, lock, plan, doctor,
bench, top)."""

from __future__ import annotations

from typing import Annotated, Any

import typer
from click.shell_completion import CompletionItem
from typer.core import TyperGroup

from ..errors import RecipectlError
from ..runs.state import STATE_FILE, runs_root
from ..validate import load_variant
from . import bench as benches
from . import complete
from . import lock as locks
from .calibrate import calibrate as run_calibrate
from .check import plan_extras
from .doctor import doctor as run_doctor
from .launch import launch_target, print_dry_run, show_logs, show_status, stop_run
from .options import RunDir, TextOrJson, TextOrJsonValue, Variant, recipe_argument
from .plan import plan_command
from .top import top as run_top


@complete.quietly
def run_refs(ctx: Any, incomplete: str) -> complete.Candidates:
    """status, stop, logs --run: the run ids under the run directory, and recipe files."""
    params = getattr(ctx, "params", None) or {}
    root = runs_root(params.get("run_dir"))
    ids: complete.Candidates = []
    if "/" not in incomplete and root.is_dir():
        ids = sorted(d.name for d in root.iterdir() if d.name.startswith(incomplete) and (d / STATE_FILE).is_file())
    return ids + complete.paths(incomplete)


RunRef = Annotated[
    str | None,
    typer.Argument(help="run id, recipe or run directory (default: the latest run)", autocompletion=run_refs),
]


def launch(
    recipe: Annotated[str, recipe_argument()],
    target: Annotated[
        str, typer.Option("--target", "-t", help="local (this host) or slurm", autocompletion=complete.launch_targets)
    ] = "local",
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="print every process (host, env, command); start nothing")
    ] = False,
    detach: Annotated[
        bool, typer.Option("--detach", "-d", help="return once ready; stop later with recipectl stop")
    ] = False,
    timeout: Annotated[float | None, typer.Option("--timeout", help="seconds to wait for readiness")] = None,
    variant: Variant = None,
    format: Annotated[TextOrJsonValue, typer.Option("--format", "-f", help="json: the run state on stdout")] = "text",
    preflight: Annotated[
        bool,
        typer.Option(
            "--preflight/--no-preflight", help="refuse to start when the host checks find a problem (local target)"
        ),
    ] = True,
    locked: Annotated[
        bool,
        typer.Option(
            "--locked", help="refuse to start when the recipe no longer resolves to its lock (recipectl lock)"
        ),
    ] = False,
) -> int:
    loaded = load_variant(recipe, variant, refuse_errors=not dry_run)
    if locked:
        locks.refuse_drift(recipe, variant)
    if dry_run:
        print_dry_run(loaded.recipe, as_json=format == "json")
        return 0
    return launch_target(
        target, recipe, loaded.recipe, detach=detach, timeout=timeout, as_json=format == "json", preflight=preflight
    )


def lock(
    paths: Annotated[
        list[str],
        typer.Argument(
            metavar="RECIPE | LOCK_A LOCK_B",
            help="the recipe to lock or check; with --diff, two lock files",
            autocompletion=complete.recipe_files,
        ),
    ],
    check: Annotated[
        bool, typer.Option("--check", help="exit 1 when the recipe no longer resolves to its lock")
    ] = False,
    diff: Annotated[bool, typer.Option("--diff", help="compare two lock files")] = False,
    out: Annotated[
        str | None, typer.Option("--out", "-o", help="the lock file (default: beside the recipe, NAME.lock.json)")
    ] = None,
    host_cpu: Annotated[
        str, typer.Option("--host-cpu", help="resolve for this kind of host: this-host, avx512-bf16, no-avx512-bf16")
    ] = "this-host",
    variant: Variant = None,
    format: TextOrJson = "text",
) -> int:
    as_json = format == "json"
    if diff:
        if len(paths) != 2 or check:
            raise RecipectlError("--diff compares two lock files", fix="recipectl lock --diff LOCK_A LOCK_B")
        return locks.diff(paths[0], paths[1], as_json=as_json)
    if len(paths) != 1:
        raise RecipectlError("lock takes one recipe", fix="recipectl lock RECIPE, or --diff LOCK_A LOCK_B")
    if check:
        return locks.check(paths[0], variant=variant, lock_file=out, host_cpu=host_cpu, as_json=as_json)
    return locks.write(paths[0], variant=variant, out=out, host_cpu=host_cpu, as_json=as_json)


def status(run: RunRef = None, format: TextOrJson = "text", run_dir: RunDir = None, variant: Variant = None) -> int:
    return show_status(run, as_json=format == "json", run_dir=run_dir, variant=variant)


def stop(
    run: Annotated[
        str | None,
        typer.Argument(help="run id, recipe or run directory (default: the latest)", autocompletion=run_refs),
    ] = None,
    run_dir: RunDir = None,
    variant: Variant = None,
) -> int:
    return stop_run(run, run_dir=run_dir, variant=variant)


def logs(
    process: Annotated[
        str | None, typer.Argument(help="prefill, decode, router or a process name (default: all)")
    ] = None,
    follow: Annotated[
        bool, typer.Option("--follow", help="keep printing new lines (-f is --format elsewhere)")
    ] = False,
    lines: Annotated[int, typer.Option("--lines", "-n")] = 40,
    run: Annotated[
        str | None, typer.Option("--run", help="run id, recipe or run directory", autocompletion=run_refs)
    ] = None,
    run_dir: RunDir = None,
    variant: Variant = None,
) -> int:
    return show_logs(run, process, follow=follow, lines=lines, run_dir=run_dir, variant=variant)


def plan(
    recipe: Annotated[str, recipe_argument()],
    format: TextOrJson = "text",
    variant: Variant = None,
    sla: Annotated[
        str | None, typer.Option("--sla", help="rank P/D configurations that meet e.g. ttft=2s,itl=50ms")
    ] = None,
    calibration: Annotated[
        str | None, typer.Option("--calibration", help="with --sla: a file of recipectl calibrate")
    ] = None,
    gpus: Annotated[
        int | None, typer.Option("--gpus", min=2, help="with --sla: devices to split (default: the recipe's)")
    ] = None,
    isl: Annotated[
        int | None, typer.Option("--isl", min=1, help="with --sla: prompt tokens (default: the workload's)")
    ] = None,
    osl: Annotated[
        int | None, typer.Option("--osl", min=1, help="with --sla: output tokens (default: the workload's)")
    ] = None,
    keep_layout: Annotated[
        bool, typer.Option("--keep-layout", help="with --sla: each role at its recipe's TP only (no other TPs)")
    ] = False,
    plot: Annotated[
        str | None,
        typer.Option("--plot", help="with --sla: draw TPS/device vs tokens/s per user to this PNG (matplotlib)"),
    ] = None,
    write_recipe: Annotated[
        str | None,
        typer.Option(
            "--write-recipe",
            help="with --sla: write the chosen configuration as a recipe here (never over a file without "
            "--force, a symlink, or RECIPE itself)",
        ),
    ] = None,
    force: Annotated[bool, typer.Option("--force", help="let --write-recipe replace an existing file")] = False,
    check: Annotated[
        bool,
        typer.Option(
            "--check",
            help="with --sla: launch the recipe (or use --run), measure one point, report predicted against measured",
        ),
    ] = False,
    run: Annotated[
        str | None,
        typer.Option("--run", help="with --check: measure this running deployment (run id, or the recipe file)"),
    ] = None,
    concurrency: Annotated[
        int | None,
        typer.Option(
            "--concurrency", min=1, help="with --check: the point's users (default: the most predicted to meet the SLA)"
        ),
    ] = None,
    out_of_step: Annotated[
        bool,
        typer.Option(
            "--out-of-step",
            help="with --check: the users start spread over one of their cycles, not all at once, and the point is "
            "measured while all of them are sending (the model predicts users who start together)",
        ),
    ] = False,
    ledger: Annotated[
        bool, typer.Option("--ledger", help="the recipe's measured points (plan --check, bench) against the plan")
    ] = False,
) -> int:
    extra = plan_extras(
        recipe,
        variant=variant,
        as_json=format == "json",
        sla=sla,
        calibration=calibration,
        gpus=gpus,
        isl=isl,
        osl=osl,
        check=check,
        run=run,
        concurrency=concurrency,
        ledger=ledger,
        out_of_step=out_of_step,
    )
    if extra is not None:
        return extra
    return plan_command(
        recipe,
        as_json=format == "json",
        variant=variant,
        sla=sla,
        calibration=calibration,
        gpus=gpus,
        isl=isl,
        osl=osl,
        keep_layout=keep_layout,
        plot=plot,
        write_recipe_to=write_recipe,
        force=force,
    )


def calibrate(
    recipe: Annotated[str, recipe_argument("the recipe to launch and measure")],
    out: Annotated[str, typer.Option("--out", "-o", help="the calibration file to write (JSON)")],
    run: Annotated[
        str | None,
        typer.Option(
            "--run",
            help="measure this running deployment (run id, or the recipe "
            "file for its newest run) instead of launching one",
        ),
    ] = None,
    force: Annotated[bool, typer.Option("--force", help="replace OUT if it exists")] = False,
    variant: Variant = None,
) -> int:
    return run_calibrate(recipe, out=out, variant=variant, attach=run, force=force)


def doctor(
    recipe: Annotated[str | None, recipe_argument("the recipe (its latest run is checked when running)")] = None,
    run: Annotated[str | None, typer.Option("--run", help="run id or directory instead of the recipe's latest")] = None,
    router: Annotated[str | None, typer.Option("--router", help="router URL (a deployment not started here)")] = None,
    prefill: Annotated[list[str], typer.Option("--prefill", help="prefill endpoint URL (repeatable)")] = [],  # noqa: B006 - Typer copies it
    decode: Annotated[list[str], typer.Option("--decode", help="decode endpoint URL (repeatable)")] = [],  # noqa: B006 - Typer copies it
    env: Annotated[bool, typer.Option("--env/--no-env", help="environment checks")] = True,
    proofs: Annotated[bool, typer.Option("--proofs/--no-proofs", help="P/D transfer proof, parity, GSM8K")] = True,
    parity: Annotated[bool, typer.Option("--parity/--no-parity")] = True,
    gsm8k: Annotated[bool, typer.Option("--gsm8k/--no-gsm8k")] = True,
    gsm8k_questions: Annotated[
        int | None, typer.Option("--gsm8k-questions", help="override the recipe's sample size")
    ] = None,
    reference: Annotated[
        str | None, typer.Option("--reference", help="parity reference URL (default: prefill)")
    ] = None,
    timeout: Annotated[float | None, typer.Option("--timeout", help="seconds per endpoint check")] = None,
    format: TextOrJson = "text",
    variant: Variant = None,
) -> int:
    return run_doctor(
        recipe,
        run=run,
        router=router,
        prefill=prefill,
        decode=decode,
        env=env,
        proofs=proofs,
        parity=parity,
        gsm8k=gsm8k,
        gsm8k_questions=gsm8k_questions,
        reference=reference,
        timeout=timeout,
        as_json=format == "json",
        variant=variant,
    )


def top(
    recipe: Annotated[str | None, recipe_argument("the recipe whose latest run to watch")] = None,
    run: Annotated[str | None, typer.Option("--run")] = None,
    interval: Annotated[float, typer.Option("--interval", "-i", help="seconds between refreshes")] = 2.0,
    once: Annotated[bool, typer.Option("--once", help="one snapshot, then exit")] = False,
    format: Annotated[TextOrJsonValue, typer.Option("--format", "-f", help="json: one snapshot")] = "text",
    variant: Variant = None,
) -> int:
    return run_top(recipe, run=run, interval=interval, once=once, as_json=format == "json", variant=variant)


class _RunByDefault(TyperGroup):
    """A command group whose `run` subcommand may go unnamed: `recipectl bench RECIPE` is
    `recipectl bench run RECIPE`."""

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        if args and args[0] not in self.commands and args[0] not in ctx.help_option_names:
            args = ["run", *args]
        return super().parse_args(ctx, args)

    def shell_complete(self, ctx: Any, incomplete: str) -> list:
        """`recipectl bench <TAB>`: the subcommands, and the recipe files `bench RECIPE` takes."""
        return [
            *super().shell_complete(ctx, incomplete),
            *(CompletionItem(path) for path in complete.recipe_files(incomplete)),
        ]


bench_app = typer.Typer(cls=_RunByDefault, no_args_is_help=True, add_completion=False)


@bench_app.command("run")
def bench_run(
    recipe: Annotated[str, recipe_argument("the recipe whose deployment to measure")],
    out: Annotated[
        str | None, typer.Option("--out", "-o", help="output directory (default: in the run directory)")
    ] = None,
    run: Annotated[str | None, typer.Option("--run", help="run id or directory (default: the recipe's latest)")] = None,
    router: Annotated[str | None, typer.Option("--router", help="router URL of a deployment not started here")] = None,
    max_failed_ratio: Annotated[
        float, typer.Option("--max-failed-ratio", help="failed requests tolerated per level")
    ] = 0.0,
    calibration: Annotated[
        str | None,
        typer.Option("--calibration", help="the model the plan ledger compares each level with (recipectl calibrate)"),
    ] = None,
    format: TextOrJson = "text",
    variant: Variant = None,
) -> None:
    """The concurrency sweep with `vllm bench serve`: TPS/GPU, latencies, CSV/JSON/plots, validity gates."""
    raise typer.Exit(
        benches.bench(
            recipe,
            out=out,
            run=run,
            router=router,
            max_failed_ratio=max_failed_ratio,
            calibration=calibration,
            as_json=format == "json",
            variant=variant,
        )
    )


@bench_app.command("compare")
def bench_compare(
    run_a: Annotated[str, typer.Argument(metavar="RUN_A", help="a bench directory (its summary.json)")],
    run_b: Annotated[str, typer.Argument(metavar="RUN_B", help="the bench directory to compare with RUN_A")],
    format: TextOrJson = "text",
) -> None:
    """Level-by-level ratios B / A of two bench runs."""
    raise typer.Exit(benches.bench_compare(run_a, run_b, as_json=format == "json"))
