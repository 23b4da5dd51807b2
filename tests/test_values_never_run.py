"""No recipe value reaches a position where it runs.

- a field that names a path or a program is validated as one: no leading '-' (an option of the
  command it is passed to), no '=' in a program (env's assignment), no control character, within
  the kernel's lengths; an exit 2 at the field, never a rendered script;
- `env` gets `--` before its assignments and program in every script, so a word that starts with
  '-' is never one of env's options (GNU env's `-S` runs a string);
- a Kubernetes multi-node follower's `sh -c` string takes a Secret from the container's
  environment, expanded by the shell as one word, never by the kubelet into shell text.
"""

from __future__ import annotations

import os
import shlex
import stat
import subprocess
from pathlib import Path

import pytest
import yaml

from recipectl.loader import load_text
from recipectl.render.processes import build_deployment
from recipectl.render.targets import render
from recipectl.validate import load_variant

from .test_render_targets import _pod_templates, gb200_recipe, k8s_docs, kubelet_expand

ROOT = Path(__file__).resolve().parent.parent
LOCAL = ROOT / "recipes" / "local" / "tiny-hybrid-cpu.yaml"
TWO_NODE = ROOT / "recipes" / "local" / "tiny-hybrid-cpu-2node.yaml"


def _local(edit) -> str:
    data = yaml.safe_load(LOCAL.read_text())
    edit(data)
    return yaml.safe_dump(data, sort_keys=False)


def _set(dotted: str, value):
    def edit(d):
        *parents, last = dotted.split(".")
        node = d
        for p in parents:
            node = node.setdefault(p, {})
        node[last] = value

    return edit


# ---------------------------------------------------------------------------------------------------
# paths and programs are validated at the schema

NOT_PATHS = [
    ("engine.venv", "-S touch PWNED #"),
    ("engine.venv", "--help"),
    ("engine.venv", "/opt/x=y"),  # env would take `/opt/x=y/bin/vllm` for an assignment
    ("engine.venv", ""),
    ("engine.venv", "/opt/" + "v" * 5000),
    ("model.path", "-S touch PWNED"),
    ("model.path", "/models/" + "m" * 300),  # one component past NAME_MAX
    ("launch.run_dir", "--runs"),
    ("engine.serve_command", ["-S touch PWNED", "serve"]),
    ("engine.serve_command", ["X=1", "vllm", "serve"]),
    ("engine.router_command", ["-i"]),
    ("engine.router_command", []),
]


@pytest.mark.parametrize("field,value", NOT_PATHS, ids=[f"{f}={str(v)[:24]!r}" for f, v in NOT_PATHS])
def test_a_path_field_that_is_not_a_path_is_rejected_at_the_field(field, value):
    result = load_text(_local(_set(field, value)), "recipe.yaml")
    assert not result.ok
    found = [(d.code, d.path, d.line, d.fix) for d in result.diagnostics]
    assert [(c, p) for c, p, _, _ in found] == [("SCH001", field)], found
    assert all(line and fix for _, _, line, fix in found), found


def test_a_proxy_command_is_a_program():
    def edit(d):
        d["router"] = {"kind": "vllm-proxy", "proxy_command": ["-c", "proxy.py"]}

    result = load_text(_local(edit), "recipe.yaml")
    assert [(d.code, d.path) for d in result.diagnostics] == [("SCH001", "router.proxy_command")]


@pytest.mark.parametrize(
    "field,value",
    [
        ("engine.venv", "~/.cache/recipectl/engine"),
        ("engine.venv", "./-odd/venv"),
        ("model.path", "org/Model-1.5B"),
        ("launch.run_dir", "runs/-x"),
        ("engine.serve_command", ["./vllm", "serve"]),
    ],
)
def test_ordinary_paths_stay_valid(field, value):
    result = load_text(_local(_set(field, value)), "recipe.yaml")
    assert [d for d in result.diagnostics if d.code.startswith("SCH")] == []


def test_a_dash_venv_is_exit_2_naming_the_field(recipectl_cli, tmp_path):
    recipe = tmp_path / "r.yaml"
    recipe.write_text(_local(_set("engine.venv", "-S touch PWNED #")))
    for args in (["validate", str(recipe)], ["render", str(recipe), "-t", "bash"]):
        r = recipectl_cli(*args, timeout=120)
        assert r.returncode == 2, (args, r.stdout, r.stderr)
        out = r.stdout + r.stderr
        assert "engine.venv" in out or f"{recipe}:" in out, out
        assert "SCH001" in out and "Traceback" not in out and "setsid" not in out


# ---------------------------------------------------------------------------------------------------
# env gets `--` before the program in every script


def _env_calls(text: str) -> list[str]:
    """Each `env` command word of a script with the word after it (a script's own `#!/usr/bin/env`
    line aside)."""
    words = shlex.split(text.replace("\\\n", " "), comments=True)
    return [words[i + 1] for i, w in enumerate(words) if w == "env" and i + 1 < len(words)]


@pytest.mark.parametrize(
    "recipe,variant,target",
    [
        (LOCAL, None, "bash"),
        (TWO_NODE, None, "slurm"),
        (ROOT / "recipes/gb200/qwen3.5-397b-nvfp4-pd.yaml", "prefill-endpoints-4", "bash"),
        (ROOT / "recipes/gb200/qwen3.5-397b-nvfp4-pd.yaml", "prefill-endpoints-4", "slurm"),
    ],
)
def test_env_ends_its_options_before_the_program(recipe, variant, target):
    dep = build_deployment(load_variant(str(recipe), variant).recipe)
    files = render(dep, target)
    calls = [w for f in files for w in _env_calls(f.text)]
    assert len(calls) == len(dep.processes), calls  # one env per process
    assert set(calls) == {"--"}, calls


def test_a_dash_venv_past_the_schema_is_never_an_option_of_env(tmp_path):
    """Defence in depth: a venv the schema would refuse, put into a validated recipe behind its
    back, is still a file name to env (which fails to find it), never `-S` and a string to run."""
    loaded = load_variant(str(LOCAL), None)
    payload = '-S sh -c "touch PWNED" #'
    engine = loaded.recipe.engine.model_copy(update={"venv": payload})
    dep = build_deployment(loaded.recipe.model_copy(update={"engine": engine}))
    (script,) = render(dep, "bash")
    # the router's command as the script writes it, run as it would run there
    block = script.text[script.text.index("# router: starts") :]
    block = block[block.index("setsid env") : block.index('pids+=("$!")')]
    assert payload in block  # the value is there, as a word
    run = tmp_path / "run"
    run.mkdir()
    r = subprocess.run(
        ["bash", "-c", "set -u; LOG_DIR=.; " + block + "\nwait $!"], cwd=run, capture_output=True, text=True, timeout=60
    )
    assert not (run / "PWNED").exists(), "env ran the venv as -S"
    assert r.returncode != 0  # env: '-S sh -c ...': No such file or directory
    assert "No such file" in (run / "router.log").read_text()


# ---------------------------------------------------------------------------------------------------
# Kubernetes followers: secrets from the environment only

STAND_IN = "harmless-stand-in-for-vllm"
HOSTILE = "x; touch PWNED #$(touch PWNED2)`touch PWNED3`"


def _follower(tmp_path: Path) -> tuple[dict, dict]:
    """The LWS worker container of the two-node decode endpoint, and its LWS template."""

    def edit(d):
        d["engine"]["serve_command"] = [STAND_IN, "serve"]
        d["decode"]["extra_args"] = ["--api-key", "${VLLM_API_KEY}"]

    dep = build_deployment(load_variant(str(gb200_recipe(tmp_path, edit)), None).recipe)
    (f,) = render(dep, "k8s")
    path = tmp_path / f.name
    path.write_text(f.text)
    (lws,) = [d for d in k8s_docs(path) if d["kind"] == "LeaderWorkerSet"]
    _, worker = _pod_templates(lws)
    (container,) = worker["spec"]["containers"]
    return container, lws


def test_a_follower_takes_the_secret_from_its_environment(tmp_path):
    container, _ = _follower(tmp_path)
    sh, c, script = container["command"]
    assert (sh, c) == ("sh", "-c")
    assert "$(VLLM_API_KEY)" not in script  # the kubelet never expands a Secret into shell text
    assert "$(" not in script.replace("$$(", "")  # nor anything else
    assert {
        "name": "VLLM_API_KEY",
        "valueFrom": {"secretKeyRef": {"name": "vllm-api-key", "key": "value"}},
    } in container["env"]
    env = {"VLLM_API_KEY": HOSTILE, "LWS_LEADER_ADDRESS": "10.0.0.1", "LWS_WORKER_INDEX": "1"}
    text = kubelet_expand(script, env)
    assert HOSTILE not in text and "touch" not in text  # the value is not part of the command text
    words = shlex.split(text)
    assert words[:2] == ["exec", STAND_IN]
    assert words[words.index("--api-key") + 1] == "$VLLM_API_KEY"  # expanded by sh, as one word


def test_a_hostile_secret_cannot_run_in_a_follower(tmp_path):
    """The follower's command, through the kubelet's expansion and a real `sh -c` with the Secret in
    the environment: the program gets the value as one argument, and nothing else runs."""
    container, _ = _follower(tmp_path)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    stand_in = bin_dir / STAND_IN
    stand_in.write_text('#!/bin/sh\nprintf "%s\\n" "$@" > "$ARGS_OUT"\n')
    stand_in.chmod(stand_in.stat().st_mode | stat.S_IXUSR)
    work = tmp_path / "work"
    work.mkdir()
    env = {"VLLM_API_KEY": HOSTILE, "LWS_LEADER_ADDRESS": "10.0.0.1", "LWS_WORKER_INDEX": "1"}
    argv = [kubelet_expand(a, env) for a in container["command"]]
    run_env = {**env, "PATH": f"{bin_dir}:{os.environ['PATH']}", "ARGS_OUT": str(tmp_path / "args")}
    r = subprocess.run(argv, env=run_env, cwd=work, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert sorted(p.name for p in work.iterdir()) == [], "the Secret's value ran"
    args = (tmp_path / "args").read_text().splitlines()
    assert args[args.index("--api-key") + 1] == HOSTILE
    assert args[args.index("--data-parallel-start-rank") + 1] == "4"
    assert args[args.index("--data-parallel-address") + 1] == "10.0.0.1"


def test_a_follower_literal_with_kubelet_and_shell_syntax_arrives_unchanged(tmp_path):
    """Everything recipectl puts into the `sh -c` string is quoted: a literal argument holding `$(`,
    `$$`, quotes and `;` reaches the program as written."""
    odd = "a$(touch PWNED)'b\"; $$ $HOME"

    def edit(d):
        d["engine"]["serve_command"] = [STAND_IN, "serve"]
        d["decode"]["extra_args"] = ["--odd", odd]

    dep = build_deployment(load_variant(str(gb200_recipe(tmp_path, edit)), None).recipe)
    (f,) = render(dep, "k8s")
    docs = [d for d in yaml.safe_load_all(f.text) if d]
    (lws,) = [d for d in docs if d["kind"] == "LeaderWorkerSet"]
    (container,) = _pod_templates(lws)[1]["spec"]["containers"]
    env = {"LWS_LEADER_ADDRESS": "10.0.0.1", "LWS_WORKER_INDEX": "1", "HOME": "/home/x"}
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    stand_in = bin_dir / STAND_IN
    stand_in.write_text('#!/bin/sh\nprintf "%s\\n" "$@" > "$ARGS_OUT"\n')
    stand_in.chmod(stand_in.stat().st_mode | stat.S_IXUSR)
    work = tmp_path / "work"
    work.mkdir()
    argv = [kubelet_expand(a, env) for a in container["command"]]
    r = subprocess.run(
        argv,
        env={**env, "PATH": f"{bin_dir}:{os.environ['PATH']}", "ARGS_OUT": str(tmp_path / "a")},
        cwd=work,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 0, r.stderr
    assert list(work.iterdir()) == []
    args = (tmp_path / "a").read_text().splitlines()
    assert args[args.index("--odd") + 1] == odd


def test_k8s_leader_args_keep_a_secret_a_whole_argument(tmp_path):
    """The leader (no shell): `$(VLLM_API_KEY)` is one args item; the kubelet puts the value in
    whole, and no shell ever reads it."""
    _, lws = _follower(tmp_path)
    leader, _ = _pod_templates(lws)
    (container,) = leader["spec"]["containers"]
    assert container["command"][0] == STAND_IN
    args = container["args"]
    assert args[args.index("--api-key") + 1] == "$(VLLM_API_KEY)"
    expanded = [kubelet_expand(a, {"VLLM_API_KEY": HOSTILE}) for a in args]
    assert expanded[args.index("--api-key") + 1] == HOSTILE and expanded.count(HOSTILE) == 1


# ---------------------------------------------------------------------------------------------------
# a reference is a whole `${NAME}` or `$NAME`; an unmatched brace is text


@pytest.mark.parametrize("text", ["${FOO", "$FOO}", "${FOO}x", "${FOO:-a}", "${}"])
def test_a_value_that_is_not_a_whole_reference_is_written_as_it_is(tmp_path, text):
    """`${FOO` had been written `"${FOO}"` (an expansion the recipe never asked for), `$FOO}` too."""

    def edit(d):
        d["prefill"]["env"]["ODD"] = text
        d["decode"]["extra_args"] = ["--odd", text]

    dep = build_deployment(load_text(_local(edit), str(tmp_path / "r.yaml")).recipes[0].recipe)
    for target in ("bash", "slurm"):
        script = "\n".join(f.text for f in render(dep, target))
        assert f"ODD={shlex.quote(text)} " in script and f"--odd {shlex.quote(text)}" in script, (target, script)
        assert '"${FOO}"' not in script


def test_a_whole_reference_still_expands_where_the_process_runs(tmp_path):
    def edit(d):
        d["prefill"]["env"].update(BRACED="${FOO}", BARE="$FOO")

    dep = build_deployment(load_text(_local(edit), str(tmp_path / "r.yaml")).recipes[0].recipe)
    script = "\n".join(f.text for f in render(dep, "bash"))
    assert 'BRACED="${FOO}" ' in script and 'BARE="${FOO}" ' in script
