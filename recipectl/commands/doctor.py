"""`recipectl doctor` and `recipectl top`: presentation; the checks are in recipectl.checks."""

from __future__ import annotations

import asyncio
import json
import sys
from dataclasses import asdict
from pathlib import Path

from ..checks.doctor import FAIL, PASS, SKIP, WARN, CheckResult, Targets, timed
from ..checks.environment import cpu_core_check, environment_checks
from ..errors import RecipectlError
from ..lock import CACHE_CONFIG_INFO, cache_config_labels, lock_path, read_lock, server_drift
from ..schema import Recipe
from . import load_recipe_or_none


def resolve_targets(recipe: Recipe | None, recipe_path: str | None, run: str | None, router: str | None,
                    prefill: list[str], decode: list[str]) -> Targets:
    """URLs given on the command line win; else the run state of the recipe (or --run)."""
    from ..runs.processes import is_ours
    from ..runs.state import find_run, runs_root

    t = Targets(router=router, prefill=list(prefill), decode=list(decode),
                model=recipe.served_name if recipe else None)
    if router or prefill or decode:
        return t
    try:
        state = find_run(run or recipe_path, runs_root(recipe.launch.run_dir if recipe else None),
                         (lambda _: (recipe.name, recipe.launch.run_dir)) if recipe else None)
    except RecipectlError:
        if run:
            raise
        return t
    if state.target == "local" and not any(is_ours(p.pid, p.start_time) for p in state.processes):
        return t  # a finished run: nothing to check
    if state.target == "slurm":
        from ..launch.slurm import job_state

        if state.job_id and job_state(state.job_id) != "RUNNING":
            return t
    t.run_state = state
    t.router = state.router_url
    t.prefill = state.endpoint_urls("prefill")
    t.decode = state.endpoint_urls("decode")
    t.model = t.model or state.served_model_name
    return t


async def run_doctor(recipe: Recipe | None, targets: Targets, *, env: bool, proofs: bool, parity: bool,
                     gsm8k: bool, gsm8k_questions: int | None, reference: str | None, timeout: float,
                     console, lock_file: Path | None = None) -> list[CheckResult]:
    from ..checks import endpoints as ep
    from ..checks.client import make_client

    results: list[CheckResult] = []
    if env:
        checks = environment_checks(recipe, targets) + [cpu_core_check(recipe, targets)]
        with console.status("environment checks ..."):
            results += await asyncio.gather(*(timed("environment", n, f, t) for n, f, t in checks))
    if not (targets.router or targets.prefill or targets.decode):
        results.append(CheckResult("endpoints", "deployment", SKIP, "no running deployment found",
                                   "recipectl launch RECIPE --detach, or give --router/--prefill/--decode URLs"))
        return results
    client = make_client(concurrency=64, timeout_s=max(timeout, 600), connect_timeout_s=min(timeout, 10),
                         connect_retries=1)
    async with client:
        checks = ep.endpoint_checks(recipe, targets, client, timeout)
        with console.status("endpoint checks ..."):
            endpoint_results = await asyncio.gather(*(timed("endpoints", n, f, t) for n, f, t in checks))
        results += endpoint_results
        down = [r for r in endpoint_results if r.name.startswith("health") and r.status == FAIL]
        if lock_file is not None and not down:
            with console.status("the lock against what the servers report ..."):
                lock = read_lock(lock_file)  # once: every endpoint is held against the same lock
                results += await asyncio.gather(*(
                    timed("endpoints", f"lock ({role} {url})",
                          lambda r=role, u=url: lock_check(lock, lock_file.name, r, u, client), timeout)
                    for role, url in _roles_urls(targets)))
        if not proofs:
            return results
        if down:
            results.append(CheckResult("proofs", "P/D transfer", SKIP, "skipped: an endpoint is down"))
            return results
        with console.status("P/D proof: one request through the router ..."):
            results.append(await timed("proofs", "P/D transfer (NIXL)",
                                       lambda: ep.pd_proof(targets, client, timeout * 4), timeout * 6))
        with console.status("NIXL path: prefill's side channel to decode ..."):
            results.append(await timed("proofs", ep.NIXL_PATH,
                                       lambda: ep.nixl_path(targets, client, timeout * 4), timeout * 6))
        if parity:
            with console.status("parity: P/D against the aggregated reference ..."):
                results.append(await timed("proofs", "parity (P/D vs reference)",
                                           lambda: ep.parity(recipe, targets, client, reference, timeout * 10),
                                           timeout * 40))
        if gsm8k:
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

            name = ep.gsm8k_check_name(recipe)
            with Progress(TextColumn(name), BarColumn(), MofNCompleteColumn(),
                          TextColumn("{task.description}"),
                          TimeElapsedColumn(), console=console, transient=True) as bar:
                task = bar.add_task("", total=gsm8k_questions or (recipe.checks.gsm8k.num_questions if recipe else 200))

                def progress(done, total, correct):
                    bar.update(task, completed=done, total=total, description=f"{correct} correct")

                budget = (recipe.checks.gsm8k.timeout_s if recipe else 600) * 3
                results.append(await timed(
                    "proofs", name,
                    lambda: ep.gsm8k(recipe, targets, client, progress, gsm8k_questions), budget))
    explain_from_logs(results, targets)
    return results


def _roles_urls(targets: Targets) -> list[tuple[str, str]]:
    return [("prefill", u) for u in targets.prefill] + [("decode", u) for u in targets.decode]


async def lock_check(lock: dict, lock_name: str, role: str, url: str, client) -> CheckResult:
    """The recipe's lock against the server's own word: its `vllm:cache_config_info` labels (block
    size, cache dtypes, prefix caching) and `/version`."""
    from ..checks.client import endpoint

    metrics = await client.get(endpoint(url, "/metrics"))
    labels = cache_config_labels(metrics.text) if metrics.status_code == 200 else None
    if labels is None:
        return CheckResult("endpoints", "", WARN, f"{url}/metrics has no {CACHE_CONFIG_INFO}: nothing to compare")
    version_response = await client.get(endpoint(url, "/version"))
    version = version_response.json().get("version") if version_response.status_code == 200 else None
    drift = server_drift(lock, role, labels, version)
    if not drift:
        return CheckResult("endpoints", "", PASS,
                           f"as locked in {lock_name}: block size {labels.get('block_size')}, "
                           f"SSM {labels.get('mamba_ssm_cache_dtype')}, vLLM {version}")
    return CheckResult("endpoints", "", FAIL,
                       "; ".join(f"{d.field}: locked {d.locked}, the server runs {d.current} ({d.why})" for d in drift),
                       f"the servers do not run what {lock_name} pinned: recipectl lock --check and relaunch")


def explain_from_logs(results: list[CheckResult], targets: Targets) -> None:
    """A failed request check says only "HTTP 500"; the server's log usually says why. Known
    causes found in the run's logs become the check's cause and fix."""
    failed = [r for r in results if r.status == FAIL and r.group in ("proofs", "endpoints")
              and not r.name.startswith("health")]
    state = targets.run_state
    if not failed or state is None:
        return
    from pathlib import Path

    from ..runs.diagnose import diagnose_endpoints

    hit = diagnose_endpoints(state.processes)
    if hit is None:
        return
    process, found = hit
    for r in failed:
        r.detail = f"{r.detail}; cause (from {Path(process.log).name}): {found.cause}"
        r.fix = found.fix


STYLE = {PASS: "green", FAIL: "red", WARN: "yellow", SKIP: "dim"}
LABEL = {PASS: "pass", FAIL: "FAIL", WARN: "warn", SKIP: "skip"}
TABLE_WIDTH = 120  # the table only from this many columns; narrower, one check to a line
INDENT = " " * 6  # under the check's name, past its status


def _wrapped(text: str, width: int, first: str = INDENT, rest: str = INDENT) -> list[str]:
    """`text` in lines of at most `width` columns: each of its own lines wrapped at spaces, a word
    longer than a line (a URL, a path) broken rather than cut."""
    import textwrap

    out: list[str] = []
    for para in text.splitlines() or [""]:
        lines = textwrap.wrap(para, width=width, initial_indent=first if not out else rest, subsequent_indent=rest,
                              break_long_words=True, break_on_hyphens=False) or [first if not out else rest]
        out += [ln.rstrip() for ln in lines]
    return out


def report_lines(results: list[CheckResult], width: int) -> list[str]:
    """The report for a narrow terminal, as pytest and ruff print one: a line per check, its
    status first, and beneath it, indented, what it found and the fix."""
    out: list[str] = []
    for r in results:
        out += _wrapped(f"{r.group}: {r.name}", width, first=f"{LABEL[r.status]}  ", rest=INDENT)
        if r.detail:
            out += _wrapped(r.detail, width)
        if r.fix:
            out += _wrapped(r.fix, width, first=INDENT + "fix: ", rest=INDENT + "     ")
    return out


def verdict(results: list[CheckResult]) -> tuple[str, str]:
    """The last line: its words, and the style of its first."""
    failed = sum(r.status == FAIL for r in results)
    counts = (f"{sum(r.status == PASS for r in results)} passed, {failed} failed, "
              f"{sum(r.status == WARN for r in results)} warnings, {sum(r.status == SKIP for r in results)} skipped")
    return (f"FAILED: {counts}", "red") if failed else (f"all checks passed: {counts}", "green")


def present(results: list[CheckResult], *, as_json: bool, console) -> int:
    failed = [r for r in results if r.status == FAIL]
    if as_json:
        sys.stdout.write(json.dumps({"passed": not failed, "checks": [asdict(r) for r in results]}, indent=2) + "\n")
        return 1 if failed else 0
    from rich.console import Console
    from rich.text import Text

    out = Console(highlight=False)
    if out.width >= TABLE_WIDTH:
        from rich.table import Table

        t = Table(title="recipectl doctor", title_justify="left", show_lines=False)
        for col in ("group", "check", "status", "detail", "fix"):
            t.add_column(col, overflow="fold")
        for r in results:
            t.add_row(r.group, r.name, Text(LABEL[r.status], style=STYLE[r.status]), r.detail, r.fix)
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


def doctor(recipe_path: str | None, *, run: str | None, router: str | None, prefill: list[str], decode: list[str],
           env: bool, proofs: bool, parity: bool, gsm8k: bool, gsm8k_questions: int | None, reference: str | None,
           timeout: float | None, as_json: bool, variant: str | None = None) -> int:
    from rich.console import Console

    console = Console(stderr=True)
    recipe = load_recipe_or_none(recipe_path, variant, "doctor")
    timeout = timeout or (recipe.checks.timeout_s if recipe else 30)
    targets = resolve_targets(recipe, recipe_path, run, router, prefill, decode)
    lock_file = lock_path(recipe_path, variant) if recipe_path else None
    if lock_file is not None and not lock_file.exists():
        lock_file = None  # no lock beside the recipe: nothing pinned to compare
    results = asyncio.run(run_doctor(recipe, targets, env=env, proofs=proofs, parity=parity, gsm8k=gsm8k,
                                     gsm8k_questions=gsm8k_questions, reference=reference, timeout=timeout,
                                     console=console, lock_file=lock_file))
    return present(results, as_json=as_json, console=console)
