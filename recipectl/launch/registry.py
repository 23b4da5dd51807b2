"""The launchers' registry: one place where every target of `recipectl launch --target` is declared.

A launcher is an object that follows the `Launcher` protocol (result.py): its name, what Ctrl-C
leaves behind, and `launch`. Its class's docstring is its page, the first line a few words.
`register` refuses a malformed name, a name registered twice, an object that does not follow the
protocol and an undocumented launcher, at import. The `--target` choices are the registry's keys, in
registration order (the first is the default); launch/launchers.py registers them.
"""

from __future__ import annotations

import inspect
import re

from .result import Launcher

_NAME_RE = re.compile(r"^[a-z][a-z0-9]*(-[a-z0-9]+)*$")

LAUNCHERS: dict[str, Launcher] = {}


def register(launcher: Launcher) -> Launcher:
    """Add `launcher` after those registered before it; refuses what the module docstring says."""
    if not isinstance(launcher, Launcher):
        raise TypeError(f"{launcher!r} is not a Launcher: it needs name, interrupted and launch()")
    name = launcher.name
    if not isinstance(name, str) or not _NAME_RE.match(name):
        raise TypeError(f"launcher {name!r}: a name is lower-case words joined by '-'")
    if name in LAUNCHERS:
        raise TypeError(f"launcher {name!r} registered twice")
    if not inspect.cleandoc(type(launcher).__doc__ or ""):
        raise TypeError(f"launcher {name!r} ({type(launcher).__qualname__}) has no docstring: it is the target's page")
    if not launcher.interrupted:
        raise TypeError(f"launcher {name!r}: say what Ctrl-C leaves behind (interrupted)")
    LAUNCHERS[name] = launcher
    return launcher
