"""Prefill and decode sharing one GPU: `devices` per role, each with its share of the memory
(recipes/h200/tiny-qwen35-pd-1gpu.yaml); placement, preflight, start order and doctor's count."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from recipectl.checks.gpus import Gpu
from recipectl.schema import Recipe

ROOT = Path(__file__).resolve().parent.parent
ONE_GPU = ROOT / "recipes" / "h200" / "tiny-qwen35-pd-1gpu.yaml"
TWO_GPU = ROOT / "recipes" / "h200" / "tiny-qwen35-pd.yaml"
H200 = [Gpu(0, "NVIDIA H200", 143771)]


def one_gpu(**roles) -> Recipe:
    data = yaml.safe_load(ONE_GPU.read_text())
    for role, fields in roles.items():
        data[role].update(fields)
    return Recipe.model_validate(data)


def test_dry_run_puts_both_roles_on_gpu_0_and_says_decode_waits(recipectl_cli):
    r = recipectl_cli("launch", str(ONE_GPU), "--dry-run", "--format", "json")
    assert r.returncode == 0, r.stderr
    procs = {p["name"]: p for p in json.loads(r.stdout)}
    for name in ("prefill-0", "decode-0"):
        assert procs[name]["gpus"] == [0] and procs[name]["env"]["CUDA_VISIBLE_DEVICES"] == "0"
    assert "0.3 of its memory, shared with decode-0" in procs["prefill-0"]["shared_gpus"][0]
    assert "starts once prefill-0 is ready" in procs["decode-0"]["shared_gpus"][0]
    text = recipectl_cli("launch", str(ONE_GPU), "--dry-run").stdout
    assert "## decode-0 gpus=0\n  # GPU 0: 0.3 of its memory, shared with prefill-0" in text


def test_the_one_gpu_recipe_validates_and_the_shares_that_cannot_fit_are_an_error(recipectl_cli, tmp_path):
    assert recipectl_cli("validate", str(ONE_GPU)).returncode == 0
    over = tmp_path / "over.yaml"
    over.write_text(ONE_GPU.read_text().replace("gpu_memory_utilization: 0.3", "gpu_memory_utilization: 0.6"))
    r = recipectl_cli("validate", str(over))
    assert r.returncode == 1
    assert "TOP001 error: GPU 0 of 127.0.0.1 is shared by prefill-0 0.6 + decode-0 0.6: 1.20" in r.stdout
    assert "gpu_memory_utilization: 0.45" in r.stdout  # the fix gives each role a share that fits


def test_devices_must_name_one_gpu_list_per_endpoint(recipectl_cli, tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        ONE_GPU.read_text().replace(
            "  devices: [[0]]                     # the same GPU as prefill", "  devices: [[0], [0]]"
        )
    )
    r = recipectl_cli("validate", str(bad))
    assert r.returncode == 2 and "2 devices entries for 1 endpoint(s)" in r.stdout + r.stderr
    assert "Traceback" not in r.stderr


def test_two_endpoints_of_one_role_share_a_gpu_by_memory_as_two_roles_do(recipectl_cli, tmp_path):
    # 2 prefill + 1 decode on GPU 0, 0.3 each (scripts/gpu-sla-accuracy.sh's layout): the engine
    # runs it as it runs 1 + 1; it was refused as "taken by other prefill endpoints on every node"
    text = ONE_GPU.read_text().replace(
        "prefill:\n  devices: [[0]]\n", "prefill:\n  endpoints: 2\n  devices: [[0], [0]]\n"
    )
    path = tmp_path / "two.yaml"
    path.write_text(text)
    assert recipectl_cli("validate", str(path)).returncode == 0
    r = recipectl_cli("launch", str(path), "--dry-run", "--format", "json")
    assert r.returncode == 0, r.stderr
    procs = {p["name"]: p for p in json.loads(r.stdout)}
    assert [procs[n]["gpus"] for n in ("prefill-0", "prefill-1", "decode-0")] == [[0], [0], [0]]
    assert "starts once prefill-0 is ready" in procs["prefill-1"]["shared_gpus"][0]
    path.write_text(text.replace("gpu_memory_utilization: 0.3", "gpu_memory_utilization: 0.4"))
    r = recipectl_cli("validate", str(path))
    assert "shared by prefill-0 0.4 + prefill-1 0.4 + decode-0 0.4: 1.20" in r.stdout


def test_devices_of_one_role_take_the_next_node_before_sharing(recipectl_cli, tmp_path):
    text = ONE_GPU.read_text().replace(
        "prefill:\n  devices: [[0]]\n", "prefill:\n  endpoints: 2\n  devices: [[0], [0]]\n"
    )
    text = text.replace("  nodes: 1\n  hosts: [127.0.0.1]", "  nodes: 2\n  hosts: [10.0.0.1, 10.0.0.2]")
    path = tmp_path / "two-nodes.yaml"
    path.write_text(text)
    r = recipectl_cli("launch", str(path), "--dry-run", "--format", "json")
    assert r.returncode == 0, r.stderr
    hosts = {p["name"]: p["host"] for p in json.loads(r.stdout)}
    assert hosts["prefill-0"] != hosts["prefill-1"]


def test_preflight_counts_gpus_by_id_and_shares_by_memory(monkeypatch):
    from recipectl.launch import local
    from recipectl.render.processes import build_deployment

    monkeypatch.setattr("recipectl.checks.gpus.query_gpus", lambda: H200)
    monkeypatch.setattr(local, "_gdn_backend_preflight", lambda recipe, gpus: [])

    def gpu_problems(recipe):
        return [p.message for p in local._gpu_preflight(recipe, build_deployment(recipe).workers)]

    assert gpu_problems(one_gpu()) == []
    problems = gpu_problems(one_gpu(prefill={"gpu_memory_utilization": 0.5}, decode={"gpu_memory_utilization": 0.48}))
    assert problems == [
        "GPU 0 is shared by prefill-0 0.5 + decode-0 0.48 = 0.98 of its memory; at most 0.95 "
        "leaves room for each server's CUDA context"
    ]
    two = Recipe.model_validate(yaml.safe_load(TWO_GPU.read_text()))
    fixes = local._gpu_preflight(two, build_deployment(two).workers)
    assert fixes[0].message == "2 GPU(s) needed (GPU ids up to 1), 1 visible" and "devices: [[0]]" in fixes[0].fix


def test_a_server_on_a_shared_gpu_starts_once_the_one_before_it_is_ready(tmp_path):
    from recipectl.launch.local import Supervisor
    from recipectl.render.processes import build_deployment
    from recipectl.runs.state import ProcessState, RunState

    recipe = one_gpu()
    specs = build_deployment(recipe).processes
    state = RunState(
        run_id="r",
        recipe_name="x",
        recipe_path="x.yaml",
        recipe_hash="0",
        run_dir=str(tmp_path),
        processes=[
            ProcessState(
                name=s.name,
                kind=s.kind,
                host=s.host,
                port=s.port,
                url=None,
                log=str(tmp_path / s.name),
                argv=[],
                env={},
            )
            for s in specs
        ],
    )
    sup = Supervisor(recipe, state, specs)
    started: list[str] = []
    sup.start = lambda name: (
        started.append(name),
        setattr(next(p for p in state.processes if p.name == name), "pid", 1),
    )
    sup.start_ready_workers()
    assert started == ["prefill-0"]
    sup.start_ready_workers()
    assert started == ["prefill-0"]  # prefill not ready yet: decode waits
    state.processes[0].healthy_at = 1.0
    sup.start_ready_workers()
    assert started == ["prefill-0", "decode-0"]  # never the router: that waits for every worker


def test_doctor_counts_the_gpus_a_shared_recipe_uses(monkeypatch):
    import asyncio

    from recipectl.checks.catalog import get_check
    from recipectl.checks.doctor import ONE, DoctorRun, Targets, timed
    from recipectl.diagnostics import Status

    def gpus(recipe):
        return asyncio.run(timed(get_check("environment.gpus"), DoctorRun(recipe, Targets(), 30), ONE[0]))

    monkeypatch.setattr("recipectl.checks.environment.query_gpus", lambda: H200)
    assert gpus(one_gpu()).status is Status.PASS
    result = gpus(Recipe.model_validate(yaml.safe_load(TWO_GPU.read_text())))
    assert result.status is Status.WARN and "the recipe uses 2 per node" in result.message


def test_bench_counts_a_shared_gpu_once_for_tps_per_gpu():
    from recipectl.bench.sweep import devices

    assert devices(one_gpu()) == 1
    assert devices(Recipe.model_validate(yaml.safe_load(TWO_GPU.read_text()))) == 2


def test_the_bash_script_starts_decode_once_prefill_on_its_gpu_answers(recipectl_cli, tmp_path):
    import subprocess

    r = recipectl_cli("render", str(ONE_GPU), "--target", "bash", "-o", str(tmp_path))
    assert r.returncode == 0, r.stderr
    script = next(tmp_path.glob("*.sh")).read_text()
    prefill, decode = script.index("# prefill-0\n"), script.index("# decode-0\n")
    wait = script.index("until curl -sf -o /dev/null http://127.0.0.1:8100/health; do")
    assert prefill < decode < wait < script.index('>"$LOG_DIR/decode-0.log"')
    assert "until curl" not in script[:decode]  # prefill starts at once
    assert subprocess.run(["bash", "-n", "-c", script]).returncode == 0
