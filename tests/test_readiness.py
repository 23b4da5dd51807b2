"""Which processes launch asks for /health: a local worker not started yet (it waits for the GPU
it shares) is not asked; a Slurm step, which has no pid of recipectl's, is asked as soon as it has
a URL (a real HTTP server answers here)."""

from __future__ import annotations

import pytest

from recipectl.launch.readiness import health_client, record_healthy
from recipectl.runs.state import ProcessState, RunState


@pytest.fixture
def healthy_url(fake_server):
    return fake_server(lambda req: (200, None)).url


def _state(tmp_path, target: str, url: str, pid: int | None) -> RunState:
    proc = ProcessState(
        name="prefill-0",
        kind="prefill",
        host="127.0.0.1",
        port=1,
        url=url,
        log=str(tmp_path / "prefill-0.log"),
        argv=[],
        env={},
        pid=pid,
    )
    return RunState(
        run_id="r",
        recipe_name="r",
        recipe_path="r.yaml",
        recipe_hash="0",
        run_dir=str(tmp_path),
        target=target,
        processes=[proc],
    )


def test_a_slurm_step_without_a_pid_is_healthy_once_it_answers(tmp_path, healthy_url):
    state = _state(tmp_path, "slurm", healthy_url, pid=None)
    with health_client() as client:
        record_healthy(client, state)
    assert state.processes[0].healthy_at is not None


def test_a_local_worker_not_started_yet_is_not_asked(tmp_path, healthy_url):
    state = _state(tmp_path, "local", healthy_url, pid=None)
    with health_client() as client:
        record_healthy(client, state)
    assert state.processes[0].healthy_at is None
