"""A reference in extra_args (`[--api-key, ${VLLM_API_KEY}]`, the form the credential rules ask
for) expands where the process runs, as an env value's does: in the bash and Slurm scripts, in the
Kubernetes container, in the local launcher. The run state and --dry-run keep the reference, and
launch refuses to start while it is unset (an empty --api-key is no key at all)."""

from __future__ import annotations

import copy
import json

import yaml

from recipectl.launch.local import local_argv, local_processes, preflight, shown_argv
from recipectl.loader import load_text
from recipectl.render.processes import build_deployment
from recipectl.render.targets import render, required_env
from recipectl.render.values import EnvRef

from .test_recipe_is_data import BASE, check_scripts


def _recipe(extra_args: list[str]):
    data = copy.deepcopy(BASE)
    data["decode"]["extra_args"] = extra_args
    result = load_text(yaml.safe_dump(data, sort_keys=False), "refs.yaml")
    assert result.ok, [str(d) for d in result.diagnostics]
    return result.recipes[0].recipe


def _decode(recipe):
    return next(p for p in build_deployment(recipe).processes if p.kind == "decode")


def test_a_whole_reference_is_a_reference_and_anything_else_verbatim():
    decode = _decode(_recipe(["--api-key", "${VLLM_API_KEY}", "--x=${NOT_WHOLE}", "$$"]))
    assert list(decode.argv[-4:]) == ["--api-key", EnvRef("VLLM_API_KEY"), "--x=${NOT_WHOLE}", "$$"]


def test_the_scripts_expand_it_on_the_node(tmp_path):
    """The rendered bash and Slurm scripts, run with stand-in programs: the server gets the
    variable's value, and the scripts check that it is set before anything starts."""
    dep = build_deployment(_recipe(["--api-key", "${VLLM_API_KEY}"]))
    assert "VLLM_API_KEY" in required_env(dep)
    bash = next(f.text for f in render(dep, "bash"))
    assert '--api-key "${VLLM_API_KEY}"' in bash
    check_scripts(dep, tmp_path)  # records each program's argv; VLLM_API_KEY=value of VLLM_API_KEY


def test_kubernetes_takes_it_from_a_secret(tmp_path):
    dep = build_deployment(_recipe(["--api-key", "${VLLM_API_KEY}"]))
    docs = [d for f in render(dep, "k8s") for d in yaml.safe_load_all(f.text) if d]
    containers = [c for d in docs for c in _containers(d)]
    decode = next(c for c in containers if "$(VLLM_API_KEY)" in (c.get("args") or []) + (c.get("command") or []))
    env = {e["name"]: e for e in decode["env"]}
    assert env["VLLM_API_KEY"]["valueFrom"]["secretKeyRef"]["key"] == "value"


def _containers(node):
    if isinstance(node, dict):
        if "image" in node and ("args" in node or "command" in node):
            yield node
        for v in node.values():
            yield from _containers(v)
    elif isinstance(node, list):
        for v in node:
            yield from _containers(v)


def test_the_local_launcher_expands_it_and_the_state_keeps_the_reference(monkeypatch):
    recipe = _recipe(["--api-key", "${VLLM_API_KEY}"])
    spec = next(s for s in local_processes(build_deployment(recipe)) if s.kind == "decode")
    monkeypatch.setenv("VLLM_API_KEY", "sk-local-value")
    assert local_argv(recipe, spec)[-2:] == ["--api-key", "sk-local-value"]
    assert shown_argv(recipe, spec)[-2:] == ["--api-key", "${VLLM_API_KEY}"]
    assert not [p for p in preflight(recipe, [spec]) if "VLLM_API_KEY" in p.message]
    monkeypatch.delenv("VLLM_API_KEY")
    problems = [p.message for p in preflight(recipe, [spec]) if "VLLM_API_KEY" in p.message]
    assert problems == ["the recipe refers to $VLLM_API_KEY, unset in this environment"]


def test_dry_run_shows_the_reference_not_the_value(tmp_path, recipectl_cli):
    data = copy.deepcopy(BASE)
    data["decode"]["extra_args"] = ["--api-key", "${VLLM_API_KEY}"]
    path = tmp_path / "refs.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    env = {"VLLM_API_KEY": "sk-secret-value-0123456789"}
    text = recipectl_cli("launch", str(path), "--dry-run", env=env)
    js = recipectl_cli("launch", str(path), "--dry-run", "--format", "json", env=env)
    assert text.returncode == 0 and js.returncode == 0, text.stderr + js.stderr
    assert '--api-key "${VLLM_API_KEY}"' in text.stdout and "sk-secret" not in text.stdout + js.stdout
    decode = next(p for p in json.loads(js.stdout) if p["kind"] == "decode")
    assert decode["argv"][-2:] == ["--api-key", "${VLLM_API_KEY}"]
