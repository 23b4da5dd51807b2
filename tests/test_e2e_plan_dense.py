"""`recipectl plan` against the real engine on a tiny DENSE model (the hybrid one is checked against
the running deployment in test_e2e_local.py): the decode server the recipe renders prints its cache
capacity at start-up, and the planner must print the same numbers. The server is stopped as soon as
it has printed them."""

from __future__ import annotations

import subprocess

import pytest

from recipectl.commands.plan import plan_report
from recipectl.launch.local import local_argv, process_environ
from recipectl.render.processes import build_deployment
from recipectl.runs.processes import stop_groups
from recipectl.validate import load_one

from .e2e_support import CAPACITY_LINE, LOCAL_RECIPE, local_recipe_on_free_ports, tiny_model, wait_for
from .recipe_text import replace_once
from .requirements import require_engine

pytestmark = pytest.mark.engine


def _dense_recipe(tmp_path, model) -> str:
    text = LOCAL_RECIPE.read_text()
    for old, new in (
        ("path: ~/.cache/recipectl/models/qwen3next-tiny", f"path: {model}"),
        ("family: hybrid", "family: dense"),
        # no GDN state on a dense model: neither role's SSM cache dtype
        ("(CON004).\n  mamba_ssm_cache_dtype: bfloat16\n", "(CON004).\n"),
        ("  cpu_cores: ['1']\n  mamba_ssm_cache_dtype: bfloat16\n", "  cpu_cores: ['1']\n"),
    ):
        text = replace_once(text, old, new)
    # on ports free now: a local deployment may be up
    path, _ = local_recipe_on_free_ports(tmp_path / "tiny-dense-cpu.yaml", text)
    return str(path)


def test_planner_matches_the_engine_on_the_tiny_dense_model(tmp_path):
    require_engine()
    model = tiny_model("qwen3-dense-tiny")
    recipe_path = _dense_recipe(tmp_path, model)
    recipe = load_one(recipe_path).recipe
    plan = plan_report(recipe, recipe_path)["roles"]["decode"]

    spec = next(p for p in build_deployment(recipe).processes if p.kind == "decode")
    log_path = tmp_path / "decode.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            local_argv(recipe, spec),
            env=process_environ(recipe, spec),
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            printed = wait_for(
                lambda: CAPACITY_LINE.search(log_path.read_text(errors="replace")) or proc.poll() is not None, 600, 0.5
            )
        finally:
            stop_groups([proc.pid], 15)
    text = log_path.read_text(errors="replace")
    m = CAPACITY_LINE.search(text)
    assert printed and m, f"no capacity line from the engine:\n{text[-3000:]}"
    tokens, max_len, conc = int(m[1].replace(",", "")), int(m[2].replace(",", "")), float(m[3])
    print(
        f"engine {tokens:,} tokens, {conc}x @ {max_len}; planner {plan['cache_tokens']:,} tokens, "
        f"{plan['max_concurrency']:.2f}x @ {plan['max_model_len']} (block {plan['block_size']})"
    )
    assert not plan["gdn_state_bytes_per_request"], "a dense model has no GDN state"
    assert max_len == plan["max_model_len"]
    assert plan["cache_tokens"] == tokens
    assert round(plan["max_concurrency"], 2) == conc
