"""Where the engine lives (its virtual environment) and how to ask it things."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

from .engine_facts import facts
from .errors import ExitCode, RecipectlError

DEFAULT_VENV = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "recipectl" / "engine"


def engine_venv(recipe_venv: str | None = None) -> Path:
    """The recipe's engine.venv, else $RECIPECTL_ENGINE_VENV, else scripts/install-engine.sh's default."""
    raw = recipe_venv or os.environ.get("RECIPECTL_ENGINE_VENV") or str(DEFAULT_VENV)
    return Path(os.path.expanduser(raw))


def engine_python(recipe_venv: str | None = None) -> Path:
    py = engine_venv(recipe_venv) / "bin" / "python"
    if not py.exists():
        raise RecipectlError(
            f"no engine at {py.parent.parent}",
            fix="bash scripts/install-engine.sh (or set engine.venv / RECIPECTL_ENGINE_VENV)",
        )
    return py


def serve_cli_args_modules() -> list[str]:
    """Where vLLM releases keep `validate_parsed_serve_args`, newest first (engine facts
    serve-cli-args-*): the probe imports the first the installed engine has."""
    rows = [f for f in facts() if f.id.startswith("serve-cli-args-")]
    return [f.value for f in sorted(rows, key=lambda f: f.since or (0, 0, 0), reverse=True)]


def parse_with_engine(
    serve: list[list[str]],
    router: list[list[str]],
    *,
    venv: str | None = None,
    timeout: float = 180,
    flags: bool = False,
) -> dict[str, Any]:
    """Check command lines with the engine's own parsers (one subprocess: the vllm import is slow)."""
    py = engine_python(venv)
    pkg_root = str(Path(__file__).resolve().parent.parent)
    env = {**os.environ, "PYTHONPATH": pkg_root, "VLLM_LOGGING_LEVEL": "ERROR", "VLLM_NO_USAGE_STATS": "1"}
    request = {"serve": serve, "router": router, "flags": flags, "cli_args_modules": serve_cli_args_modules()}
    proc = subprocess.run(
        [str(py), "-m", "recipectl.engine_probe", "parse"],
        input=json.dumps(request),
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
    )
    if proc.returncode != 0 or not proc.stdout.strip():
        raise RecipectlError(
            f"the engine's parser could not run: {proc.stderr.strip()[-800:]}", exit_code=ExitCode.INVALID
        )
    answer: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])  # the probe's one JSON object
    return answer
