"""`recipectl doctor` and `recipectl top`: presentation; the checks are in recipectl.checks."""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

from ..checks.catalog import all_checks
from ..checks.client import endpoint
from ..checks.doctor import DoctorRun, Subject, Targets, check, found, run_checks
from ..checks.doctor import Progress as OnProgress
from ..checks.endpoints import HEALTH
from ..diagnostics import CheckResult, Status
from ..errors import RecipectlError
from ..launch.slurm import job_state
from ..lock import CACHE_CONFIG_INFO, cache_config_labels, read_lock, server_drift
from ..runs.processes import is_ours, recorded_start
from ..runs.state import find_run, runs_root
from ..schema import Recipe
from . import load_recipe_or_none
from .lock import variant_lock_path

PASS, FAIL, WARN, SKIP = Status.PASS, Status.FAIL, Status.WARN, Status.SKIP


def resolve_targets(
    recipe: Recipe | None,
    recipe_path: str | None,
    run: str | None,
    router: str | None,
    prefill: list[str],
    decode: list[str],
) -> Targets:
    """URLs given on the command line win; else the run state of the recipe (or --run)."""
    t = Targets(router=router, prefill=list(prefill), decode=list(decode), model=recipe.served_name if recipe else None)
    if router or prefill or decode:
        return t
    try:
        state = find_run(
            run or recipe_path,
            runs_root(recipe.launch.run_dir if recipe else None),
            (lambda _: (recipe.name, recipe.launch.run_dir)) if recipe else None,
        )
    except RecipectlError:
        if run:
            raise
        return t
    if state.target == "local" and not any(is_ours(p.pid, recorded_start(p)) for p in state.processes):
        return t  # a finished run: nothing to check
    if state.target == "slurm":
        if state.job_id and job_state(state.job_id) != "RUNNING":
            return t
    t.run_state = state
    t.router = state.router_url
    t.prefill = state.endpoint_urls("prefill")
    t.decode = state.endpoint_urls("decode")
    t.model = t.model or state.served_model_name
    return t


class RichDisplay:
    """Doctor at work, on stderr: a spinner per stage, a bar for a check that counts."""

    def __init__(self, console: Console):
        self.console = console

    def status(self, text: str) -> contextlib.AbstractContextManager:
        return self.console.status(text)

    @contextlib.contextmanager
    def progress(self, name: str, total: int) -> Iterator[OnProgress]:
        with Progress(
            TextColumn(name),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.description}"),
            TimeElapsedColumn(),
            console=self.console,
            transient=True,
        ) as bar:
            task = bar.add_task("", total=total)

            def progress(done: int, total: int, correct: int) -> None:
                bar.update(task, completed=done, total=total, description=f"{correct} correct")

            yield progress


async def run_doctor(
    recipe: Recipe | None,
    targets: Targets,
    *,
    env: bool,
    proofs: bool,
    parity: bool,
    gsm8k: bool,
    gsm8k_questions: int | None,
    reference: str | None,
    timeout: float,
    console,
    lock_file: Path | None = None,
) -> list[CheckResult]:
    run = DoctorRun(
        recipe,
        targets,
        timeout,
        env=env,
        proofs=proofs,
        parity=parity,
        gsm8k=gsm8k,
        gsm8k_questions=gsm8k_questions,
        reference=reference,
        # read once: every endpoint is held against the same lock
        lock=read_lock(lock_file) if lock_file is not None and targets.any else None,
        lock_name=lock_file.name if lock_file is not None else "",
    )
    return await run_checks(run, all_checks(), RichDisplay(console))


def _lock_wanted(run: DoctorRun) -> bool:
    return run.targets.any and run.lock is not None


def _endpoints(run: DoctorRun) -> list[Subject]:
    return run.targets.endpoints()


# Registered here, not in checks/: the lock (recipectl.lock) sits above the checks' layer.
@check(
    key="endpoints.lock",
    name="lock ({label})",
    stage="lock",
    timeout=lambda run: run.timeout,
    subjects=_endpoints,
    wanted=_lock_wanted,
    needs=(HEALTH,),
    explained_by_logs=True,
)
async def _lock(run: DoctorRun, on: Subject) -> CheckResult:
    role, url = on[0].split(" ", 1)[0], on[1]
    return await lock_check(run.lock or {}, run.lock_name, role, url, run.client)


async def lock_check(lock: dict, lock_name: str, role: str, url: str, client) -> CheckResult:
    """The recipe's lock against the server's own word: its `vllm:cache_config_info` labels (block
    size, cache dtypes, prefix caching) and `/version`."""
    metrics = await client.get(endpoint(url, "/metrics"))
    labels = cache_config_labels(metrics.text) if metrics.status_code == 200 else None
    if labels is None:
        return found(WARN, f"{url}/metrics has no {CACHE_CONFIG_INFO}: nothing to compare")
    version_response = await client.get(endpoint(url, "/version"))
    version = version_response.json().get("version") if version_response.status_code == 200 else None
    drift = server_drift(lock, role, labels, version)
    if not drift:
        return found(
            PASS,
            f"as locked in {lock_name}: block size {labels.get('block_size')}, "
            f"SSM {labels.get('mamba_ssm_cache_dtype')}, vLLM {version}",
        )
    return found(
        FAIL,
        "; ".join(f"{d.field}: locked {d.locked}, the server runs {d.current} ({d.why})" for d in drift),
        f"the servers do not run what {lock_name} pinned: recipectl lock --check and relaunch",
    )


STYLE = {PASS: "green", FAIL: "red", WARN: "yellow", SKIP: "dim"}
LABEL = {PASS: "pass", FAIL: "FAIL", WARN: "warn", SKIP: "skip"}
TABLE_WIDTH = 120  # the table only from this many columns; narrower, one check to a line
INDENT = " " * 6  # under the check's name, past its status


def _wrapped(text: str, width: int, first: str = INDENT, rest: str = INDENT) -> list[str]:
    """`text` in lines of at most `width` columns: each of its own lines wrapped at spaces, a word
    longer than a line (a URL, a path) broken rather than cut."""
    out: list[str] = []
    for para in text.splitlines() or [""]:
        lines = textwrap.wrap(
            para,
            width=width,
            initial_indent=first if not out else rest,
            subsequent_indent=rest,
            break_long_words=True,
            break_on_hyphens=False,
        ) or [first if not out else rest]
        out += [ln.rstrip() for ln in lines]
    return out


def report_lines(results: list[CheckResult], width: int) -> list[str]:
    """The report for a narrow terminal, as pytest and ruff print one: a line per check, its
    status first, and beneath it, indented, what it found and the fix."""
    out: list[str] = []
    for r in results:
        out += _wrapped(f"{r.group}: {r.name}", width, first=f"{LABEL[r.status]}  ", rest=INDENT)
        if r.message:
            out += _wrapped(r.message, width)
        if r.fix:
            out += _wrapped(r.fix, width, first=INDENT + "fix: ", rest=INDENT + "     ")
    return out


def verdict(results: list[CheckResult]) -> tuple[str, str]:
    """The last line: its words, and the style of its first."""
    failed = sum(r.status == FAIL for r in results)
    counts = (
        f"{sum(r.status == PASS for r in results)} passed, {failed} failed, "
        f"{sum(r.status == WARN for r in results)} warnings, {sum(r.status == SKIP for r in results)} skipped"
    )
    return (f"FAILED: {counts}", "red") if failed else (f"all checks passed: {counts}", "green")


def present(results: list[CheckResult], *, as_json: bool, console) -> int:
    failed = [r for r in results if r.status == FAIL]
    if as_json:
        sys.stdout.write(json.dumps({"passed": not failed, "checks": [r.to_json() for r in results]}, indent=2) + "\n")
        return 1 if failed else 0
    out = Console(highlight=False)
    if out.width >= TABLE_WIDTH:
        t = Table(title="recipectl doctor", title_justify="left", show_lines=False)
        for col in ("group", "check", "status", "detail", "fix"):
            t.add_column(col, overflow="fold")
        for r in results:
            # a message may quote a recipe's value ("[/]"): text, never rich markup
            t.add_row(r.group, r.name, Text(LABEL[r.status], style=STYLE[r.status]), Text(r.message), Text(r.fix or ""))
        out.print(t)
    else:
        out.print("recipectl doctor")
        for line in report_lines(results, out.width):
            text = Text(line)
            status = next((s for s, label in LABEL.items() if line.startswith(label + "  ")), None)
            if status:
                text.stylize(STYLE[status], 0, 4)
            out.print(text, soft_wrap=True)
    words, style = verdict(results)
    head = words.index(":")
    text = Text(words)
    text.stylize(style, 0, head)
    out.print(text, soft_wrap=True)
    return 1 if failed else 0


def doctor(
    recipe_path: str | None,
    *,
    run: str | None,
    router: str | None,
    prefill: list[str],
    decode: list[str],
    env: bool,
    proofs: bool,
    parity: bool,
    gsm8k: bool,
    gsm8k_questions: int | None,
    reference: str | None,
    timeout: float | None,
    as_json: bool,
    variant: str | None = None,
) -> int:
    console = Console(stderr=True)
    recipe = load_recipe_or_none(recipe_path, variant, "doctor")
    timeout = timeout or (recipe.checks.timeout_s if recipe else 30)
    targets = resolve_targets(recipe, recipe_path, run, router, prefill, decode)
    lock_file = variant_lock_path(recipe_path, variant) if recipe_path else None
    if lock_file is not None and not lock_file.exists():
        lock_file = None  # no lock beside the recipe: nothing pinned to compare
    results = asyncio.run(
        run_doctor(
            recipe,
            targets,
            env=env,
            proofs=proofs,
            parity=parity,
            gsm8k=gsm8k,
            gsm8k_questions=gsm8k_questions,
            reference=reference,
            timeout=timeout,
            console=console,
            lock_file=lock_file,
        )
    )
    return present(results, as_json=as_json, console=console)
