"""The deployment a measuring command (calibrate, plan --check) measures: one it launches and stops
after, whatever ends the measurement (an error, Ctrl-C), or a running one (`--run RUN`), refused
where it runs another configuration than the recipe describes, since what is measured would be
filed under the recipe's."""

from __future__ import annotations

import hashlib
import json
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from ..effective import detect_host_cpu
from ..errors import ExitCode, RecipectlError
from ..launch.display import Display
from ..launch.local import launch
from ..loader import LoadedRecipe
from ..lock import build_lock, flatten
from ..runs.state import RunState, find_run, runs_root
from ..secretscan import redact_env
from ..validate import load_variant
from .launch import stop_run

RECIPE_COPY = "recipe.yaml"  # what launch copies into the run directory: the recipe it started


def describe(loaded, recipe_path: str) -> dict:
    """The engine release, device, model and the effective configuration a calibration of this
    recipe on this host is valid for, with its fingerprint: sha256 of the configuration as the
    lock records it (recipectl/lock.py: every effective setting per role, the page geometry, the
    engine's packages, the model's config) and what else sets a server's speed (each role's
    environment, credentials redacted; the CPU cores an endpoint is bound to), but not where the
    servers listen nor how many endpoints there are (what `plan --sla` varies)."""

    recipe = loaded.recipe
    host = detect_host_cpu() if recipe.cluster.is_cpu else None
    lock = build_lock(loaded, recipe_path, host=host)
    config = {
        "engine_packages": lock["engine"]["packages"],
        "model": {"spec": lock["model"]["spec"], "config_sha256": lock["model"]["config_sha256"]},
        "device": recipe.cluster.gpu.value,
        "host_cpu": host.label if host else None,
        "roles": {
            role: {
                "settings": {k: v["value"] for k, v in r["settings"].items()},
                "pages": r["pages"],
                "env": redact_env(recipe.role_env(role)),
                "cores_per_endpoint": sorted({_cores(c) for c in recipe.roles[role].cpu_cores or ()}),
            }
            for role, r in lock["roles"].items()
        },
    }
    text = json.dumps(config, sort_keys=True, default=str)
    return {
        "engine_release": lock["engine"]["packages"].get("vllm") or recipe.engine.vllm_version,
        "device": recipe.cluster.gpu.value,
        "host_cpu": config["host_cpu"],
        "model_spec": lock["model"]["spec"],
        "fingerprint": hashlib.sha256(text.encode()).hexdigest(),
        "configuration": json.loads(text),
    }


def _cores(spec: str) -> int:
    """How many cores a cpu_cores entry names ("0", "0-3", "0,2,4-5")."""
    n = 0
    for part in spec.split(","):
        lo, _, hi = part.strip().partition("-")
        try:
            n += int(hi) - int(lo) + 1 if hi else 1
        except ValueError:  # not a list of cores: the entry itself then is what the fingerprint holds
            return -1
    return n


def config_differences(theirs: dict, ours: dict, *, then: str, limit: int = 5) -> str:
    """The settings two configurations (describe()'s ``configuration``) differ in, as
    "key: THEN 'x', now 'y'" for up to ``limit`` of them ('' where none does)."""
    a, b = dict(flatten(theirs or {})), dict(flatten(ours))
    diff = sorted(k for k in a.keys() | b.keys() if a.get(k) != b.get(k))
    shown = "; ".join(f"{k}: {then} {a.get(k)!r}, now {b.get(k)!r}" for k in diff[:limit])
    more = f" (and {len(diff) - limit} more)" if len(diff) > limit else ""
    return shown + more


def attached_run(ref: str, loaded: LoadedRecipe, recipe_path: str, identity: dict, *, same_endpoints: bool) -> RunState:
    """The running deployment ``ref`` names (run id, directory, or the recipe file for its newest
    run), refused (exit 2) unless it was launched from a recipe of the same name whose effective
    configuration has ``identity``'s fingerprint (calibrate's describe) and, with
    ``same_endpoints``, as many endpoints per role."""
    recipe = loaded.recipe
    state = find_run(
        ref or recipe_path, runs_root(recipe.launch.run_dir), lambda _: (recipe.name, recipe.launch.run_dir)
    )
    fix = f"recipectl launch {recipe_path} --detach, then --run with that run; or leave out --run to launch it"
    if state.stopped_at is not None or state.router_url is None:
        why = "was stopped" if state.stopped_at is not None else "has no router yet"
        raise RecipectlError(f"run {state.run_id} {why}: nothing to measure", fix=fix)
    if state.recipe_name != recipe.name:
        raise RecipectlError(f"run {state.run_id} runs recipe {state.recipe_name!r}, not {recipe.name!r}", fix=fix)
    copy = Path(state.run_dir) / RECIPE_COPY
    if not copy.is_file():
        raise RecipectlError(
            f"run {state.run_id} keeps no copy of the recipe it started ({copy}): its configuration cannot be told",
            fix=fix,
        )
    ran = load_variant(str(copy), recipe.name if loaded.variant else None)
    # the copy's own directory is the run's: relative paths in it (the model) are the original's
    theirs = describe(ran, state.recipe_path)
    if theirs["fingerprint"] != identity["fingerprint"]:
        diff = config_differences(theirs["configuration"], identity["configuration"], then="running")
        raise RecipectlError(
            f"run {state.run_id} runs another configuration than {recipe_path}: {diff or 'fingerprints differ'}",
            fix=fix,
        )
    if same_endpoints:
        counts = {
            role: (ran.recipe.roles[role].endpoints, recipe.roles[role].endpoints) for role in ("prefill", "decode")
        }
        other = {role: c for role, c in counts.items() if c[0] != c[1]}
        if other:
            said = "; ".join(f"{role}: {a} running, {b} in the recipe" for role, (a, b) in other.items())
            raise RecipectlError(f"run {state.run_id} runs other endpoint counts than {recipe_path}: {said}", fix=fix)
    return state


@contextmanager
def deployment_to_measure(
    recipe_path: str,
    loaded: LoadedRecipe,
    attach: str | None,
    console,
    *,
    identity: dict,
    purpose: str,
    same_endpoints: bool,
) -> Iterator[RunState]:
    """The deployment to measure: with ``attach``, that running one (attached_run), left running;
    else the recipe launched on this host, stopped when the block ends however it ends (Ctrl-C
    included: launch stops what it started if interrupted while starting)."""
    if attach is not None:
        yield attached_run(attach, loaded, recipe_path, identity, same_endpoints=same_endpoints)
        return
    recipe = loaded.recipe
    console.print(f"launching {recipe.name} to {purpose} (Ctrl-C stops it)")
    result = launch(recipe_path, recipe, detach=True, timeout_s=None, display=Display(), check_first=True)
    if not result.ok:
        raise RecipectlError(
            f"launch failed: {result.message}", fix=result.fix or "recipectl launch RECIPE", exit_code=ExitCode.FINDINGS
        )
    # a kill (SIGTERM: a job scheduler's, a timeout's) ends the measurement like Ctrl-C does, and
    # the stop below still runs; while it runs, further signals wait, so it is never cut short
    previous = signal.signal(signal.SIGTERM, _terminated)
    try:
        yield result.state
    finally:
        held = {sig: signal.signal(sig, signal.SIG_IGN) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            console.print(f"stopping run {result.state.run_id}")
            stop_run(result.state.run_dir)
        finally:
            signal.signal(signal.SIGINT, held[signal.SIGINT])
            signal.signal(signal.SIGTERM, previous)


def _terminated(signum, frame) -> None:
    raise KeyboardInterrupt
