"""`recipectl doctor`: checks with a verdict and a fix, declared in one registry. Every check is
bounded in time and the independent ones run concurrently; a check that cannot finish fails, it
never hangs.

Three groups: environment (no deployment needed: checks/environment.py), endpoints (a running
deployment, found from the run state or given as URLs: checks/endpoints.py), and proofs (P/D
transfer, parity, GSM8K: an accuracy gate, or the pipeline alone where the recipe's bar is 0).

A check is registered with `@check(...)`: its key (``group.slug``), the name shown, its time limit,
what it is run on (one row per endpoint, or one row), when it is wanted (the options, a running
deployment), the checks it needs to have passed (a proof needs healthy endpoints: where one failed
it is skipped, and says which), and its stage. Stages run in order (STAGES); within one, checks run
concurrently or one after another, and their rows keep registration order. A duplicate or malformed
check fails at import, as a rule does.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field, replace
from functools import cached_property
from pathlib import Path
from typing import Any, ContextManager, Protocol

import httpx

from ..diagnostics import CheckResult, Status
from ..engine_env import engine_venv
from ..runs.diagnose import diagnose_endpoints
from ..schema import Recipe
from .client import make_client

GROUPS = ("environment", "endpoints", "proofs")


@dataclass(frozen=True)
class Stage:
    name: str
    concurrent: bool
    status: str | None = None  # what the terminal shows while the stage runs (else each check's own)


#: In this order; rows keep it.
STAGES = (
    Stage("environment", True, "environment checks ..."),
    Stage("endpoints", True, "endpoint checks ..."),
    Stage("lock", True, "the lock against what the servers report ..."),
    Stage("proofs", False),
)


@dataclass
class Targets:
    """The deployment under test."""

    router: str | None = None
    prefill: list[str] = field(default_factory=list)
    decode: list[str] = field(default_factory=list)
    model: str | None = None
    run_state: object | None = None  # RunState when found

    @property
    def any(self) -> bool:
        return bool(self.router or self.prefill or self.decode)

    def endpoints(self) -> list[Subject]:
        """(label, url) of each prefill and decode endpoint."""
        return [(f"prefill {u}", u) for u in self.prefill] + [(f"decode {u}", u) for u in self.decode]

    def everything(self) -> list[Subject]:
        """The endpoints, then the router."""
        return self.endpoints() + ([(f"router {self.router}", self.router)] if self.router else [])


Subject = tuple[str, str]  # (label, url) a check runs on; ("", "") for a check of the whole
ONE: list[Subject] = [("", "")]
Progress = Callable[[int, int, int], None]  # (done, total, correct)


@dataclass(frozen=True)
class DoctorRun:
    """What one `recipectl doctor` is asked: the recipe, the deployment and the options."""

    recipe: Recipe | None
    targets: Targets
    timeout: float
    env: bool = True
    proofs: bool = True
    parity: bool = False
    gsm8k: bool = False
    gsm8k_questions: int | None = None
    reference: str | None = None
    lock: dict | None = None  # the recipe's lock, read once, when there is one
    lock_name: str = ""
    client: httpx.AsyncClient | None = None
    progress: Progress | None = None  # a check that reports progress gets it

    @cached_property
    def venv(self) -> Path:
        return engine_venv(self.recipe.engine.venv if self.recipe else None)


CheckFn = Callable[[DoctorRun, Subject], Awaitable[CheckResult]]


@dataclass(frozen=True)
class Check:
    """A registered check."""

    key: str  # group.slug, stable: the result's code
    group: str
    name: str  # the row's name; "{label}" stands for what it runs on ("health {label}")
    stage: str
    timeout: Callable[[DoctorRun], float]
    run: CheckFn
    subjects: Callable[[DoctorRun], list[Subject]]
    wanted: Callable[[DoctorRun], bool]
    needs: tuple[str, ...] = ()  # keys of checks that must not have failed; else this one is skipped
    title: Callable[[DoctorRun], str] | None = None  # a name that depends on the recipe
    status: str | None = None  # what the terminal shows while it runs, in a sequential stage
    progress_total: Callable[[DoctorRun], int] | None = None  # it reports progress: a bar of this many
    interleave: str | None = None  # checks with one tag are listed subject by subject
    explained_by_logs: bool = False  # a failure may name its cause from the run's logs

    def row_name(self, run: DoctorRun, subject: Subject) -> str:
        name = self.title(run) if self.title else self.name
        return name.format(label=subject[0]) if "{label}" in name else name


REGISTRY: dict[str, Check] = {}
_KEY_RE = re.compile(r"^(environment|endpoints|proofs)\.[a-z0-9][a-z0-9-]*$")


def _always(run: DoctorRun) -> bool:
    return True


def _one(run: DoctorRun) -> list[Subject]:
    return ONE


def check(
    *,
    key: str,
    name: str,
    stage: str,
    timeout: float | Callable[[DoctorRun], float],
    subjects: Callable[[DoctorRun], list[Subject]] = _one,
    wanted: Callable[[DoctorRun], bool] = _always,
    needs: tuple[str, ...] = (),
    title: Callable[[DoctorRun], str] | None = None,
    status: str | None = None,
    progress_total: Callable[[DoctorRun], int] | None = None,
    interleave: str | None = None,
    explained_by_logs: bool = False,
) -> Callable[[CheckFn], CheckFn]:
    """Register a check; a duplicate key or name, or a malformed one, is refused at import."""

    def register(fn: CheckFn) -> CheckFn:
        if not _KEY_RE.match(key):
            raise TypeError(f"doctor check {key!r}: the key must look like group.slug, group one of {GROUPS}")
        if key in REGISTRY:
            raise TypeError(f"doctor check {key!r} registered twice")
        if not name.strip() or any(c.name == name and c.title is None and title is None for c in REGISTRY.values()):
            raise TypeError(f"doctor check {key!r}: its name {name!r} is empty or taken")
        if stage not in {s.name for s in STAGES}:
            raise TypeError(f"doctor check {key!r}: stage {stage!r} is not one of {[s.name for s in STAGES]}")
        if not callable(timeout) and not (isinstance(timeout, int | float) and timeout > 0):
            raise TypeError(f"doctor check {key!r}: timeout must be seconds > 0, or a function of the run")
        unknown = [n for n in needs if n not in REGISTRY]
        if unknown:  # what it needs is registered first: the order of checks runs with what they need
            raise TypeError(f"doctor check {key!r} needs {unknown}, not registered before it")
        order = [s.name for s in STAGES]
        for n in needs:  # and has run when this one starts: an earlier stage, or earlier in a sequential one
            there = order.index(REGISTRY[n].stage)
            if there > order.index(stage) or there == order.index(stage) and STAGES[there].concurrent:
                raise TypeError(f"doctor check {key!r} needs {n!r}, which runs beside or after it")
        if not asyncio.iscoroutinefunction(fn):
            raise TypeError(f"doctor check {key!r}: {fn.__name__} must be an async function")
        limit = timeout if callable(timeout) else (lambda _run, t=float(timeout): t)
        REGISTRY[key] = Check(
            key=key,
            group=key.split(".", 1)[0],
            name=name,
            stage=stage,
            timeout=limit,
            run=fn,
            subjects=subjects,
            wanted=wanted,
            needs=tuple(needs),
            title=title,
            status=status,
            progress_total=progress_total,
            interleave=interleave,
            explained_by_logs=explained_by_logs,
        )
        return fn

    return register


def found(status: Status, message: str, fix: str | None = None, data: dict | None = None) -> CheckResult:
    """What a check's function returns; the runner adds the check's key, group, name and time."""
    return CheckResult(code="", status=status, message=message, fix=fix, data=data or {})


async def timed(check_: Check, run: DoctorRun, subject: Subject) -> CheckResult:
    """The check on `subject` within its time limit: one that hangs or breaks is a failed check."""
    timeout = check_.timeout(run)
    t0 = time.monotonic()
    try:
        r = await asyncio.wait_for(check_.run(run, subject), timeout)
    except asyncio.TimeoutError:
        r = found(
            Status.FAIL, f"no answer within {timeout:.0f}s", "the endpoint hangs or is overloaded: recipectl logs"
        )
    except Exception as e:  # a check that breaks is a failed check, reported
        r = found(Status.FAIL, f"{type(e).__name__}: {e}")
    return replace(
        r, code=check_.key, group=check_.group, name=check_.row_name(run, subject), seconds=time.monotonic() - t0
    )


class Display(Protocol):
    """How the terminal shows doctor at work (commands/doctor.py); `quiet` shows nothing."""

    def status(self, text: str) -> ContextManager[None]: ...

    def progress(self, name: str, total: int) -> ContextManager[Progress]: ...


class Quiet:
    @contextlib.contextmanager
    def status(self, text: str) -> Iterator[None]:
        yield

    @contextlib.contextmanager
    def progress(self, name: str, total: int) -> Iterator[Progress]:
        yield lambda done, total, correct: None


def planned(run: DoctorRun, stage: Stage, checks: list[Check]) -> list[tuple[Check, Subject]]:
    """The stage's rows, in order: by check in registration order, except that checks sharing an
    `interleave` tag are listed together, subject by subject (each endpoint's models, version,
    metrics)."""
    mine = [c for c in checks if c.stage == stage.name and c.wanted(run)]
    rows: list[tuple[Check, Subject]] = []
    done: set[str] = set()
    for c in mine:
        if c.interleave is None:
            rows += [(c, s) for s in c.subjects(run)]
        elif c.interleave not in done:
            done.add(c.interleave)
            tagged = [(t, t.subjects(run)) for t in mine if t.interleave == c.interleave]
            order = list(dict.fromkeys(s for _, subs in tagged for s in subs))
            rows += [(t, s) for s in order for t, subs in tagged if s in subs]
    return rows


def _unmet(c: Check, results: list[CheckResult]) -> list[str]:
    return [r.name for r in results if r.code in c.needs and r.status is Status.FAIL]


def _skipped(c: Check, run: DoctorRun, subject: Subject, failed: list[str]) -> CheckResult:
    return CheckResult(
        code=c.key,
        group=c.group,
        name=c.row_name(run, subject),
        status=Status.SKIP,
        message=f"skipped: {', '.join(failed)} failed",
    )


async def run_checks(run: DoctorRun, checks: list[Check], display: Display) -> list[CheckResult]:
    """Every wanted check, stage by stage; then failures explained from the run's logs."""
    results: list[CheckResult] = []
    client = (
        make_client(
            concurrency=64, timeout_s=max(run.timeout, 600), connect_timeout_s=min(run.timeout, 10), connect_retries=1
        )
        if run.targets.any
        else None
    )
    async with client if client is not None else contextlib.nullcontext():
        run = replace(run, client=client)
        for stage in STAGES:
            rows = planned(run, stage, checks)
            if not rows:
                continue
            if stage.concurrent:
                with display.status(stage.status or stage.name):
                    results += await asyncio.gather(*(_one_row(c, run, s, results, display) for c, s in rows))
            else:
                for c, s in rows:
                    results.append(await _one_row(c, run, s, results, display))
    return explain_from_logs(results, checks, run.targets)


async def _one_row(
    c: Check, run: DoctorRun, subject: Subject, before: list[CheckResult], display: Display
) -> CheckResult:
    failed = _unmet(c, before)
    if failed:
        return _skipped(c, run, subject, failed)
    if c.progress_total is not None:
        with display.progress(c.row_name(run, subject), c.progress_total(run)) as progress:
            return await timed(c, replace(run, progress=progress), subject)
    with display.status(c.status) if c.status else contextlib.nullcontext():
        return await timed(c, run, subject)


def explain_from_logs(results: list[CheckResult], checks: list[Check], targets: Targets) -> list[CheckResult]:
    """A failed request check says only "HTTP 500"; the server's log usually says why. A known
    cause found in the run's logs becomes the cause and fix of each failed check that may be
    explained so."""
    explained = {c.key for c in checks if c.explained_by_logs}
    failed = [r for r in results if r.status is Status.FAIL and r.code in explained]
    state: Any = targets.run_state
    if not failed or state is None:
        return results
    hit = diagnose_endpoints(state.processes)
    if hit is None:
        return results
    process, cause = hit
    ids = {id(r) for r in failed}
    return [
        replace(r, message=f"{r.message}; cause (from {Path(process.log).name}): {cause.message}", fix=cause.fix)
        if id(r) in ids
        else r
        for r in results
    ]
