"""Imports at the top of every recipectl module (docs/architecture.md): an import inside a function
is for a heavy module that a fast command never needs, named below; never one of recipectl's own
(that would hide a cycle or a layer crossing from the reader), never a cheap one.

The count of the others is held at LIMIT, which only goes down: moving an import to the top lowers
it; a new import inside a function fails here with its file and line."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "recipectl"

# Modules that may be imported inside a function, each because importing it costs a command that
# does not use it (python -X importtime, over the yaml + pydantic floor that validate pays anyway).
LAZY_ALLOWED = frozenset(
    {
        "vllm",
        "vllm_router",
        "torch",
        "transformers",
        "tokenizers",  # the engine's, in its own environment
        "matplotlib",  # bench's plots
        "httpx",  # doctor, bench, launch: tens of ms that validate, fix, render never need
        "jinja2",  # render's templates
        "rich",
        "typer",
        "click",  # presentation; the plain validate path prints without them
        "ruamel",  # fix and import write YAML back; validate reads it with PyYAML
        "pynvml",  # the GPU's NVML binding: absent on a CPU host, where nvidia-smi is asked instead
        "tomllib",  # 15-25 ms of regex compiling, only when a recipectl.toml or pyproject.toml is read
    }
)

# Imports inside functions of other modules (recipectl's own, or cheap ones): none.
LIMIT = 0
# Every import inside a function, the named heavy ones included: they are kept few, each where one
# command needs it.
LIMIT_ALL = 40


def inner_imports(root: Path = PACKAGE) -> list[tuple[str, int, str]]:
    """(file, line, module) of every import statement inside a function (nested ones once), the
    module as written (`.x` for a relative import)."""
    found = []
    for path in sorted(root.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        seen: set[int] = set()
        for fn in ast.walk(tree):
            if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                continue
            for node in ast.walk(fn):
                if isinstance(node, (ast.Import, ast.ImportFrom)) and id(node) not in seen:
                    seen.add(id(node))
                    rel = path.relative_to(root.parent).as_posix()
                    if isinstance(node, ast.ImportFrom):
                        found.append((rel, node.lineno, "." * node.level + (node.module or "")))
                    else:
                        found.extend((rel, node.lineno, alias.name) for alias in node.names)
    return found


def allowed(module: str) -> bool:
    return not module.startswith(".") and module.split(".")[0] in LAZY_ALLOWED


def test_imports_inside_functions_are_only_of_the_named_heavy_modules():
    offending = sorted((f, line, m) for f, line, m in inner_imports() if not allowed(m))
    listing = "\n".join(f"{f}:{line}: import of {m} inside a function" for f, line, m in offending)
    print(listing)
    assert len(offending) <= LIMIT, (
        f"{len(offending)} imports inside functions (limit {LIMIT}); move them to the top of their modules "
        f"(only {', '.join(sorted(LAZY_ALLOWED))} may be imported late):\n{listing}"
    )


def test_imports_inside_functions_are_few():
    found = inner_imports()
    assert len(found) <= LIMIT_ALL, "\n".join(f"{f}:{line}: import of {m} inside a function" for f, line, m in found)


def test_recipectl_is_never_one_of_the_lazy_modules():
    assert not any(allowed(m) for m in ("recipectl", "recipectl.plan", ".capacity", "..schema"))
