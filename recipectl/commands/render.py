"""`recipectl render`: the deployment's files for one target, to a directory or to stdout."""

from __future__ import annotations

import sys
from pathlib import Path

from ..render.processes import build_deployment
from ..render.targets import render as render_target
from ..render.targets import write
from ..validate import load_variant
from . import echo
from .outfile import files_read


def render(
    recipe: str, *, target: str = "bash", out: str | None = None, variant: str | None = None, force: bool = False
) -> int:
    loaded = load_variant(recipe, variant, refuse_errors=True)
    files_out = render_target(build_deployment(loaded.recipe), target)
    if out is None:
        for f in files_out:
            if len(files_out) > 1:
                echo(f"# ---- {f.name}")
            echo(f.text)
        return 0
    # what render read: never overwritten by what it writes, whatever --force says
    for p in write(files_out, Path(out), force=force, inputs=files_read(loaded, recipe)):
        sys.stderr.write(f"wrote {p}\n")
    return 0
