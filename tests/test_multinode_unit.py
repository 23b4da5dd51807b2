"""The multi-node pieces that need no cluster: how status reads Slurm's answers about nodes and
jobs, and doctor's NIXL path check against stand-in servers (httpx.MockTransport)."""

from __future__ import annotations

import asyncio
import json

import httpx

from recipectl.checks.doctor import Targets
from recipectl.checks.endpoints import NIXL_PATH, nixl_path
from recipectl.launch import slurm as slurm_launch
from recipectl.runs.state import ProcessState, RunState

NODE2_DOWN = (
    "NodeName=node2 Arch=x86_64 CoresPerSocket=1 CPUAlloc=0 State=DOWN+NOT_RESPONDING "
    "ThreadsPerCore=1 Reason=Not responding [slurm@2026-11-30T15:50:00] Comment=(null)"
)


def test_scontrol_fields_keep_a_reason_with_spaces():
    f = slurm_launch._fields(NODE2_DOWN)
    assert f["NodeName"] == "node2" and f["State"] == "DOWN+NOT_RESPONDING"
    assert f["Reason"] == "Not responding [slurm@2026-11-30T15:50:00]" and f["Comment"] == "(null)"


def test_which_node_states_are_down():
    assert slurm_launch.node_is_down("DOWN+NOT_RESPONDING")
    assert slurm_launch.node_is_down("IDLE+NOT_RESPONDING") and slurm_launch.node_is_down("down*")
    assert slurm_launch.node_is_down("FAIL")
    assert not slurm_launch.node_is_down("ALLOCATED") and not slurm_launch.node_is_down("IDLE+DRAIN")


def _state(tmp_path) -> RunState:
    procs = [
        ProcessState(
            name=n,
            kind=k,
            host=node,
            port=port,
            url=f"http://{node}:{port}",
            log=str(tmp_path / n),
            argv=[],
            env={},
            node=node,
        )
        for n, k, node, port in (
            ("prefill-0", "prefill", "node1", 8100),
            ("decode-0", "decode", "node2", 8200),
            ("router", "router", "node1", 30000),
        )
    ]
    return RunState(
        run_id="r",
        recipe_name="x",
        recipe_path="x.yaml",
        recipe_hash="h",
        run_dir=str(tmp_path),
        target="slurm",
        job_id="7",
        processes=procs,
    )


def test_status_names_a_down_node_and_the_jobs_end(tmp_path, monkeypatch):
    from recipectl.commands.launch import _slurm_status

    monkeypatch.setattr(slurm_launch, "job_state", lambda job: None)
    monkeypatch.setattr(
        slurm_launch, "job_info", lambda job: {"JobState": "NODE_FAIL", "Reason": "NodeDown", "ExitCode": "0:0"}
    )
    monkeypatch.setattr(
        slurm_launch,
        "node_states",
        lambda names: {
            "node1": {"state": "IDLE", "reason": ""},
            "node2": {"state": "DOWN+NOT_RESPONDING", "reason": "Not responding"},
        },
    )
    s = _slurm_status(_state(tmp_path))
    assert s["job_state"] is None and s["job_end_state"] == "NODE_FAIL"
    assert s["nodes"]["node2"]["down"] and not s["nodes"]["node1"]["down"]
    assert s["problems"][0] == "node node2 is DOWN+NOT_RESPONDING (Not responding); it ran decode-0"
    assert s["problems"][1].startswith("Slurm job 7 ended NODE_FAIL (reason: NodeDown), exit code 0:0")


def test_status_of_a_stopped_job_says_nothing_is_wrong(tmp_path, monkeypatch):
    from recipectl.commands.launch import _slurm_status

    state = _state(tmp_path)
    state.stopped_at = 1.0
    monkeypatch.setattr(slurm_launch, "job_state", lambda job: None)
    monkeypatch.setattr(slurm_launch, "job_info", lambda job: {"JobState": "CANCELLED"})
    monkeypatch.setattr(slurm_launch, "node_states", lambda names: {n: {"state": "IDLE", "reason": ""} for n in names})
    assert _slurm_status(state)["problems"] == []


def _metrics(ext: float, nbytes: float) -> str:
    return (
        "# TYPE vllm:prompt_tokens_by_source counter\n"
        f'vllm:prompt_tokens_by_source_total{{engine="0",source="external_kv_transfer"}} {ext}\n'
        'vllm:prompt_tokens_by_source_total{engine="0",source="local_compute"} 1.0\n'
        "# TYPE vllm:nixl_bytes_transferred histogram\n"
        f'vllm:nixl_bytes_transferred_sum{{engine="0"}} {nbytes}\n'
        f'vllm:nixl_bytes_transferred_count{{engine="0"}} {1.0 if nbytes else 0.0}\n'
    )


def _servers(remote_host: str, moves: bool):
    """prefill answers with its side channel; decode's counters go up when given it (if `moves`)."""
    seen = {"decode_params": None}

    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.host == "prefill" and request.method == "POST":
            body = json.loads(request.content)
            assert body["kv_transfer_params"]["do_remote_decode"] is True and body["max_tokens"] == 1
            return httpx.Response(
                200,
                json={
                    "choices": [{"text": "x"}],
                    "kv_transfer_params": {
                        "do_remote_prefill": True,
                        "remote_host": remote_host,
                        "remote_port": 5600,
                        "remote_block_ids": [[1]],
                        "remote_engine_id": "e",
                    },
                },
            )
        if request.url.host == "decode" and request.method == "POST":
            seen["decode_params"] = json.loads(request.content)["kv_transfer_params"]
            return httpx.Response(200, json={"choices": [{"text": "y"}]})
        if request.url.host == "decode" and request.url.path == "/metrics":
            done = seen["decode_params"] is not None and moves
            return httpx.Response(200, text=_metrics(390.0 if done else 0.0, 369664.0 if done else 0.0))
        return httpx.Response(404)

    return handler, seen


def _run(handler, monkeypatch, addresses):
    from recipectl.checks import endpoints

    monkeypatch.setattr(endpoints, "_address", lambda host: addresses.get(host))
    targets = Targets(router=None, prefill=["http://prefill:8100"], decode=["http://decode:8200"], model="tiny")

    async def go():
        async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as client:
            return await nixl_path(targets, client, 10)

    return asyncio.run(go())


def test_nixl_path_names_both_hosts_when_the_kv_crosses(monkeypatch):
    handler, seen = _servers("node1", moves=True)
    r = _run(handler, monkeypatch, {"node1": "10.77.0.11", "decode": "10.77.0.12"})
    assert r.status == "pass", r.message
    assert seen["decode_params"]["remote_host"] == "node1"  # decode was told where to pull from
    assert r.data["between_hosts"] is True and r.data["from"]["address"] == "10.77.0.11"
    assert "node1:5600 (10.77.0.11) -> decode decode (10.77.0.12), between two hosts" in r.message
    assert NIXL_PATH.startswith("NIXL path")


def test_nixl_path_on_one_host_passes_and_says_so(monkeypatch):
    handler, _ = _servers("127.0.0.1", moves=True)
    r = _run(handler, monkeypatch, {"127.0.0.1": "127.0.0.1", "decode": "127.0.0.1"})
    assert r.status == "pass" and r.data["between_hosts"] is False and "on one host" in r.message


def test_nixl_path_fails_when_decode_pulls_nothing(monkeypatch):
    handler, _ = _servers("node1", moves=False)
    r = _run(handler, monkeypatch, {"node1": "10.77.0.11", "decode": "10.77.0.12"})
    assert r.status == "fail" and "VLLM_NIXL_SIDE_CHANNEL_HOST" in r.fix, r
