"""Every launcher, registered in the order `launch --target` lists them (the first is the default)."""

from __future__ import annotations

from ..errors import RecipectlError
from .local import LocalLauncher
from .registry import LAUNCHERS, register
from .result import Launcher
from .slurm import SlurmLauncher

register(LocalLauncher())
register(SlurmLauncher())

__all__ = ["LAUNCHERS", "Launcher", "get_launcher"]


def get_launcher(name: str) -> Launcher:
    """The launcher for `--target NAME`; an unknown name is a usage error that lists the known ones."""
    try:
        return LAUNCHERS[name]
    except KeyError:
        raise RecipectlError(f"unknown target {name!r}", fix=" or ".join(f"--target {n}" for n in LAUNCHERS)) from None
