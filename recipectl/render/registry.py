"""The render targets' registry: one place where every target of `recipectl render -t` is declared.

A target is its name, the files it writes (in words: `render -t`'s help says them) and its
renderer, a function of the deployment that gives those files, named as "module:function" and
imported when first asked for: `validate` reads this registry (the option's choices are its keys,
the first the default) without importing the renderers or Jinja2. A renderer's docstring is the
target's page: its first line, a few words. A malformed entry or a name registered twice fails at
import; tests/test_registry.py resolves every renderer and reads its docstring.
"""

from __future__ import annotations

import importlib
import inspect
import re
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Callable

if TYPE_CHECKING:
    from .processes import Deployment
    from .targets import RenderedFile

RenderFn = Callable[["Deployment"], "list[RenderedFile]"]

_NAME_RE = re.compile(r"^[a-z][a-z0-9]*(-[a-z0-9]+)*$")
_REF_RE = re.compile(r"^recipectl\.render\.[a-z_][a-z0-9_]*:[a-z_][a-z0-9_]*$")


@dataclass(frozen=True)
class Target:
    """A registered render target: its name, the files it writes and where its renderer is."""

    name: str
    files: str  # what it writes, in words: RECIPE.sbatch
    renderer: str  # "recipectl.render.MODULE:FUNCTION", a RenderFn

    @cached_property
    def render(self) -> RenderFn:
        """The renderer itself, imported when first asked for."""
        module, _, attr = self.renderer.partition(":")
        fn = getattr(importlib.import_module(module), attr)
        if not inspect.cleandoc(fn.__doc__ or ""):
            raise TypeError(f"render target {self.name!r}: {self.renderer} has no docstring: it is the target's page")
        return fn

    @property
    def doc(self) -> str:
        """The target's page: its renderer's docstring (the first line says what it is)."""
        return inspect.cleandoc(self.render.__doc__ or "")


TARGETS: dict[str, Target] = {}


def register(target: Target) -> Target:
    """Add `target` after those registered before it; refuses a malformed name, a name registered
    twice, a target that does not say what it writes, and a renderer that is not
    "recipectl.render.MODULE:FUNCTION"."""
    name = target.name
    if not _NAME_RE.match(name):
        raise TypeError(f"render target {name!r}: a name is lower-case words joined by '-'")
    if name in TARGETS:
        raise TypeError(f"render target {name!r} registered twice")
    if not target.files.strip():
        raise TypeError(f"render target {name!r}: say which files it writes")
    if not _REF_RE.match(target.renderer):
        raise TypeError(
            f"render target {name!r}: renderer {target.renderer!r} must look like recipectl.render.MODULE:FUNCTION"
        )
    TARGETS[name] = target
    return target


# In the order `render -t` lists them: the first is the default.
register(Target("bash", "RECIPE.HOST.sh for each host", "recipectl.render.targets:render_bash"))
register(Target("slurm", "RECIPE.sbatch", "recipectl.render.targets:render_slurm"))
register(Target("k8s", "RECIPE.k8s.yaml", "recipectl.render.targets:render_k8s"))


def target_help() -> str:
    """`render -t`'s help: each target's name and the files it writes."""
    said = [f"{t.name} ({t.files})" for t in TARGETS.values()]
    return ", ".join(said[:-1]) + " or " + said[-1] if len(said) > 1 else "".join(said)
