"""Runs INSIDE the engine's Python (vllm / vllm-router installed): checks command lines with the
engine's own argument parsers, without starting anything.

    <engine-python> -m recipectl.engine_probe parse < commands.json

stdin: {"serve": [[arg, ...], ...], "router": [[arg, ...], ...], "cli_args_modules": [module, ...]}
— argv after the program name (for serve: starting with the model), and where each vLLM release
keeps `validate_parsed_serve_args` (recipectl.engine_env.serve_cli_args_modules). stdout: one
JSON object with a verdict per command. Only the standard library is imported at module level:
the package is put on PYTHONPATH.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import io
import json
import sys
from importlib.metadata import version


def _serve_parser():
    from vllm.entrypoints.cli.serve import ServeSubcommand
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    root = FlexibleArgumentParser(prog="vllm")
    sub = root.add_subparsers(dest="subparser")
    ServeSubcommand().subparser_init(sub)
    assert isinstance(root, argparse.ArgumentParser)
    return root


def _parse(parse, argv: list[str]) -> dict:
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            parse(argv)
        return {"ok": True}
    except SystemExit as e:  # argparse reports errors by exiting
        lines = [ln for ln in err.getvalue().strip().splitlines() if ln.strip()]
        if e.code in (0, None):  # --help, --version: the process prints and ends, serving nothing
            return {"ok": False, "error": "exits at once with code 0 (--help or --version)", "lines": []}
        return {"ok": False, "error": lines[-1] if lines else f"exit {e.code}", "lines": lines}
    except Exception as e:  # report, do not crash the batch
        return {"ok": False, "error": f"{type(e).__name__}: {e}"}


def serve_flags() -> list[dict]:
    """`vllm serve`'s options as its parser declares them: spellings and arity (what
    recipectl.engine_flags must agree with to read extra_args as the engine does)."""
    root = _serve_parser()
    serve = next(a for a in root._actions if isinstance(a, argparse._SubParsersAction)).choices["serve"]
    out = []
    for action in serve._actions:
        if not action.option_strings:
            continue
        if isinstance(action, argparse.BooleanOptionalAction):
            arity = "bool"
        elif action.nargs == 0:
            arity = "flag"
        elif action.nargs in ("+", "*"):
            arity = "many"
        else:
            arity = "value"
        out.append({"dest": action.dest, "options": list(action.option_strings), "arity": arity})
    return out


def _serve_validator(modules: list[str]):
    """`validate_parsed_serve_args` from the first of `modules` this engine has: it moved from
    vllm.entrypoints.openai.cli_args (to 0.28) to .launchers.cli_args (0.29-0.32) and
    .common.cli_args (0.33); the caller sends the table's list (engine facts serve-cli-args-*)."""
    for name in modules:
        try:
            return importlib.import_module(name).validate_parsed_serve_args
        except (ImportError, AttributeError):
            continue
    raise ImportError(f"validate_parsed_serve_args is in none of {', '.join(modules) or 'no modules'}")


def parse_commands(request: dict) -> dict:
    out: dict = {"serve": [], "router": []}
    if request.get("flags"):
        out["flags"] = serve_flags()
    if request.get("serve"):
        validate_parsed_serve_args = _serve_validator(request.get("cli_args_modules") or [])
        parser = _serve_parser()

        def parse_serve(argv):
            args = parser.parse_args(["serve", *argv])
            validate_parsed_serve_args(args)

        out["serve"] = [_parse(parse_serve, argv) for argv in request["serve"]]
    if request.get("router"):
        from vllm_router.launch_router import parse_router_args

        out["router"] = [_parse(parse_router_args, argv) for argv in request["router"]]
    out["versions"] = {name: _version(version, name) for name in ("vllm", "vllm-router")}
    return out


def _version(version, name):
    try:
        return version(name)
    except Exception:
        return None


def main() -> None:
    if sys.argv[1:2] != ["parse"]:
        sys.stderr.write(__doc__ or "")
        sys.exit(2)
    request = json.load(sys.stdin)
    sys.stdout.write(json.dumps(parse_commands(request)) + "\n")


if __name__ == "__main__":
    main()
