"""`recipectl lock`: write a recipe's lock, check a recipe against it, diff two locks."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from ..effective import HostCpu, detect_host_cpu
from ..errors import ExitCode, RecipectlError
from ..lock import Drift, build_lock, compare, lock_path, read_lock, write_lock
from ..schema import Recipe
from ..validate import load_variant
from . import echo
from .outfile import cannot_write, check_out, files_read

HOST_CPU_CHOICES = ("this-host", "avx512-bf16", "no-avx512-bf16")


def host_for(recipe: Recipe, host_cpu: str = "this-host") -> HostCpu | None:
    """The resolver's platform input: the CPU this host has, or the kind named (to lock for a cluster's
    nodes from another machine). A GPU recipe's settings do not depend on the CPU."""
    if not recipe.cluster.is_cpu:
        return None
    if host_cpu == "this-host":
        return detect_host_cpu()
    if host_cpu not in HOST_CPU_CHOICES:
        raise RecipectlError(
            f"--host-cpu {host_cpu!r}: not a kind of host", fix="one of " + ", ".join(HOST_CPU_CHOICES)
        )
    return HostCpu(avx512_bf16=host_cpu == "avx512-bf16")


def variant_lock_path(recipe_file: str, variant: str | None) -> Path:
    """The lock of the variant ``variant`` names, however it is spelled (its whole name, or its
    labels): one file per variant, named by its labels (`NAME.prefill-endpoints-4.lock.json`)."""
    if not variant:
        return lock_path(recipe_file, None)
    return lock_path(recipe_file, ".".join(load_variant(recipe_file, variant).labels) or None)


def current_lock(recipe_file: str, variant: str | None, host_cpu: str = "this-host") -> dict[str, Any]:
    loaded = load_variant(recipe_file, variant)
    return build_lock(loaded, recipe_file, host=host_for(loaded.recipe, host_cpu))


def write(recipe_file: str, *, variant: str | None, out: str | None, host_cpu: str, as_json: bool) -> int:
    loaded = load_variant(recipe_file, variant)
    lock = build_lock(loaded, recipe_file, host=host_for(loaded.recipe, host_cpu))
    target = Path(out) if out else variant_lock_path(recipe_file, variant)
    # a lock replaces the last one, but never a link, a directory, a device or a file it was made from
    check_out(str(target), files_read(loaded, recipe_file), force=True, read_as="being locked", what="lock")
    try:
        write_lock(lock, target)
    except OSError as e:
        raise cannot_write(str(target), e, flag="-o", what="lock") from None
    if as_json:
        echo(json.dumps({"lock": str(target), "roles": sorted(lock["roles"])}))
    else:
        blocks = ", ".join(f"{r} block {lock['roles'][r]['pages']['block_size']}" for r in sorted(lock["roles"]))
        sys.stderr.write(f"wrote {target} ({blocks})\n")
    return ExitCode.OK


def check(recipe_file: str, *, variant: str | None, lock_file: str | None, host_cpu: str, as_json: bool) -> int:
    """0: the recipe and this host still resolve to the lock; 1: drift (each field named); 2: no lock."""
    target = Path(lock_file) if lock_file else variant_lock_path(recipe_file, variant)
    locked = read_lock(target)
    drift = compare(locked, current_lock(recipe_file, variant, host_cpu))
    _report(drift, as_json=as_json, what=f"{recipe_file} against {target}")
    return ExitCode.FINDINGS if drift else ExitCode.OK


def diff(lock_a: str, lock_b: str, *, as_json: bool) -> int:
    """Every field that differs between two locks (meta included: where each was made). 0 when none."""
    drift = compare(read_lock(lock_a), read_lock(lock_b), include_meta=True)
    _report(drift, as_json=as_json, what=f"{lock_a} -> {lock_b}", labels=("a", "b"))
    return ExitCode.FINDINGS if drift else ExitCode.OK


def _report(drift: list[Drift], *, as_json: bool, what: str, labels: tuple[str, str] = ("locked", "now")) -> None:
    if as_json:
        echo(json.dumps({"compared": what, "drift": [d.to_json() for d in drift]}, indent=2))
        return
    if not drift:
        echo(f"{what}: no drift")
        return
    echo(f"{what}: {len(drift)} field{'s' if len(drift) != 1 else ''} drifted")
    for d in drift:
        echo(f"  {d.field}: {labels[0]} {_shown(d.locked)}, {labels[1]} {_shown(d.current)}")
        echo(f"      {d.why}")


def _shown(value: Any) -> str:
    return json.dumps(value) if not isinstance(value, str) or value == "<absent>" else value


def refuse_drift(recipe_file: str, variant: str | None) -> None:
    """`launch --locked`: start nothing when the recipe no longer resolves to its lock."""
    target = variant_lock_path(recipe_file, variant)
    drift = compare(read_lock(target), current_lock(recipe_file, variant))
    if drift:
        lines = [f"  {d.field}: locked {_shown(d.locked)}, now {_shown(d.current)} ({d.why})" for d in drift]
        raise RecipectlError(
            f"{recipe_file} no longer resolves to {target}:\n" + "\n".join(lines),
            fix=f"recipectl lock {recipe_file} (once the change is wanted), or undo it",
            exit_code=ExitCode.FINDINGS,
        )


__all__ = ["check", "diff", "host_for", "refuse_drift", "variant_lock_path", "write"]
