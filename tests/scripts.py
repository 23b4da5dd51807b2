"""The repository's scripts and benchmarks (files, not a package) as modules, for their tests."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parent.parent


def load_script(relative: str) -> ModuleType:
    """``ROOT/relative`` (``scripts/verify-engine-facts.py``, say) as the module
    ``verify_engine_facts``, loaded once: a script's dataclasses look their module up in
    sys.modules while they are made, and a second load would give classes other than the first's."""
    path = ROOT / relative
    name = path.stem.replace("-", "_")
    loaded = sys.modules.get(name)
    if loaded is not None and getattr(loaded, "__file__", None) == str(path):
        return loaded
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module
