"""No secret leaked: never quoted back by the loader, never written into the run state or a
dry run, and no process started with more of recipectl's environment than it needs."""

from __future__ import annotations

import json

import pytest

from recipectl.launch.local import base_environ, create_state, local_processes, process_environ
from recipectl.loader import load_text
from recipectl.render.processes import build_deployment
from recipectl.secretscan import pure_reference, redact_argv, secret_name, secret_value

from .e2e_support import LOCAL_RECIPE

TOKEN = "hf_AbCdEfGhIjKlMnOpQrStUvWxYz012345"
LOCAL = LOCAL_RECIPE.read_text()


def test_what_counts_as_a_credential():
    for name in (
        "HF_TOKEN",
        "HF_PASSWD",
        "OPENAI_KEY",
        "GITHUB_PAT",
        "DB_PASSWORD",
        "AWS_SECRET_ACCESS_KEY",
        "VLLM_API_KEY",
        "GOOGLE_APPLICATION_CREDENTIALS",
    ):
        assert secret_name(name), name
    for name in ("UCX_NET_DEVICES", "VLLM_SSM_CONV_STATE_LAYOUT", "HF_HUB_OFFLINE", "KEY_PATH", "PATH", "PATCHES"):
        assert not secret_name(name), name
    for value in (
        TOKEN,
        "sk-proj-0123456789abcdefghijklmn",
        "ghp_" + "a" * 36,
        "github_pat_" + "a" * 30,
        "AKIAIOSFODNN7EXAMPLE",
        "https://u:p4ss@host/x",
        "Bearer " + TOKEN,
    ):
        assert secret_value(value), value
    for value in ("hf_hub", "sk-", "DS", "127.0.0.1", "https://host/x", "nvidia/Qwen3.5-397B-A17B-NVFP4"):
        assert not secret_value(value), value
    assert pure_reference("${HF_TOKEN}") and pure_reference("$HF_TOKEN") and pure_reference("${A:-}")
    assert not pure_reference("${HF_TOKEN:-hf_literal}") and not pure_reference("hf_x")
    argv = ["vllm", "--api-key", "s3cret", f"--token={TOKEN}", "--api-key", "${K}", f"--h=Bearer {TOKEN}"]
    assert redact_argv(argv) == [
        "vllm",
        "--api-key",
        "<redacted>",
        "--token=<redacted>",
        "--api-key",
        "${K}",
        "--h=Bearer <redacted>",
    ]


@pytest.mark.parametrize(
    "line, secret",
    [
        (f"    HF_TOKEN: [{TOKEN}]", TOKEN),  # wrong type under a credential name
        ("    DB_PASSWORD: !!int hunter2hunter2", "hunter2hunter2"),  # bad tag under a credential name
        (f"    PLAIN: !!int {TOKEN}", TOKEN),  # credential-shaped, whatever the name
        (f"    PLAIN: {{a: {TOKEN}}}", TOKEN),
    ],
)
def test_loader_errors_never_quote_a_credential(line, secret):
    text = LOCAL.replace('    HF_HUB_OFFLINE: "1"', line, 1)
    result = load_text(text, "r.yaml")
    assert not result.ok
    assert all(secret not in (d.message + (d.fix or "")) for d in result.diagnostics), result.diagnostics


def test_loader_errors_never_quote_a_long_value():
    long = "x" * 300
    result = load_text(LOCAL.replace("isl: 64", f"isl: {long}"), "r.yaml")
    (d,) = result.diagnostics
    assert long not in d.message and "[workload.isl]" not in d.message and d.path == "workload.isl"


def _recipe_with(tmp_path, **replacements):
    text = LOCAL
    for old, new in replacements.items():
        assert old in text
        text = text.replace(old, new, 1)
    path = tmp_path / "r.yaml"
    path.write_text(text)
    return path, load_text(text, str(path)).recipes[0].recipe


def test_run_state_and_dry_run_hold_no_credential(tmp_path, recipectl_cli):
    path, recipe = _recipe_with(
        tmp_path,
        **{
            '    HF_HUB_OFFLINE: "1"': f'    HF_HUB_OFFLINE: "1"\n    HF_TOKEN: {TOKEN}',
            "  enforce_eager: true\n  env:": "  enforce_eager: true\n  extra_args: [--api-key, "
            "s3cret-key-value]\n  env:",
        },
    )
    state = create_state(str(path), recipe, local_processes(build_deployment(recipe)), tmp_path / "runs")
    written = (tmp_path / "runs" / state.run_id / "state.json").read_text()
    assert TOKEN not in written and "s3cret-key-value" not in written and "<redacted>" in written
    r = recipectl_cli("launch", str(path), "--dry-run", "--format", "json")
    assert r.returncode == 0, r.stderr
    assert TOKEN not in r.stdout and "s3cret-key-value" not in r.stdout
    procs = {p["name"]: p for p in json.loads(r.stdout)}
    assert procs["prefill-0"]["env"]["HF_TOKEN"] == "<redacted>"
    text = recipectl_cli("launch", str(path), "--dry-run")  # what gets pasted into a ticket
    assert text.returncode == 0, text.stderr
    assert TOKEN not in text.stdout and "s3cret-key-value" not in text.stdout
    assert "HF_TOKEN=<redacted>" in text.stdout and "--api-key '<redacted>'" in text.stdout, text.stdout


def test_processes_start_with_a_minimal_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "aws-secret")
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    monkeypatch.setenv("SOME_SHELL_STATE", "x")
    monkeypatch.setenv("LC_ALL", "C.UTF-8")
    _, recipe = _recipe_with(
        tmp_path, **{'    HF_HUB_OFFLINE: "1"': '    HF_HUB_OFFLINE: "1"\n    HF_TOKEN: ${HF_TOKEN}'}
    )
    specs = {s.name: s for s in local_processes(build_deployment(recipe))}
    router = process_environ(recipe, specs["router"])
    prefill = process_environ(recipe, specs["prefill-0"])
    for env in (router, prefill):
        assert "AWS_SECRET_ACCESS_KEY" not in env and "SOME_SHELL_STATE" not in env
        assert env["LC_ALL"] == "C.UTF-8" and env["HOME"] and "PATH" in env
    assert "HF_TOKEN" not in router  # the router needs none of the engine's environment
    assert prefill["HF_TOKEN"] == TOKEN  # the recipe references it: expanded where the process starts
    assert prefill["VLLM_CPU_KVCACHE_SPACE"] == "1"
    assert set(base_environ("router", {"PATH": "/bin", "HF_HOME": "/h", "X": "1"})) == {"PATH"}
    assert set(base_environ("decode", {"PATH": "/bin", "HF_HOME": "/h", "X": "1"})) == {"PATH", "HF_HOME"}


def test_a_started_process_sees_only_its_environment(tmp_path, monkeypatch):
    """Through the real start path: a process prints its environment."""
    from recipectl.runs import processes as procs

    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "aws-secret")
    _, recipe = _recipe_with(tmp_path)
    spec = next(s for s in local_processes(build_deployment(recipe)) if s.kind == "router")
    log = tmp_path / "env.log"
    p = procs.start(["env"], process_environ(recipe, spec), log)
    assert p.wait(timeout=10) == 0
    names = {line.split("=", 1)[0] for line in log.read_text().splitlines() if "=" in line}
    assert "AWS_SECRET_ACCESS_KEY" not in names and "PATH" in names


def test_a_slurm_job_gets_a_minimal_environment(tmp_path, monkeypatch):
    """sbatch exports what it is given to the job: the base environment, Slurm's settings and the
    recipe's references, never the rest of the caller's shell."""
    from recipectl.launch.slurm import submit_environ

    environ = {
        "PATH": "/bin",
        "HOME": "/h",
        "HF_HOME": "/hf",
        "LC_ALL": "C.UTF-8",
        "AWS_SECRET_ACCESS_KEY": "aws",
        "HF_TOKEN": TOKEN,
        "OTHER_TOKEN": "x",
        "SOME_SHELL_STATE": "x",
        "SLURM_CONF": "/etc/s.conf",
        "SBATCH_PARTITION": "gpu",
        "CONTAINER_MOUNTS": "/data:/data",
    }
    _, recipe = _recipe_with(
        tmp_path, **{'    HF_HUB_OFFLINE: "1"': '    HF_HUB_OFFLINE: "1"\n    HF_TOKEN: ${HF_TOKEN}'}
    )
    env = submit_environ(build_deployment(recipe), environ)
    assert env == {
        "PATH": "/bin",
        "HOME": "/h",
        "HF_HOME": "/hf",
        "LC_ALL": "C.UTF-8",
        "HF_TOKEN": TOKEN,
        "SLURM_CONF": "/etc/s.conf",
        "SBATCH_PARTITION": "gpu",
        "CONTAINER_MOUNTS": "/data:/data",
    }
