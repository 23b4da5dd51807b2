"""launch when a program of the deployment cannot be started: a clear error naming it, and what
was already running is stopped (never left without a supervisor).

The servers here are stand-ins (a mock `vllm` that answers every HTTP request with 200): the real
engine takes minutes to start, and what is under test is what recipectl does around it."""

from __future__ import annotations

import json
import stat
import sys
import time
from pathlib import Path

import psutil
import yaml

from .e2e_support import LOCAL_RECIPE
from .ports import free_ports

FAKE_VLLM = """#!{python}
# mock of `vllm serve MODEL --port N ...`: answers 200 to everything on port N
import http.server, sys
port = int(sys.argv[sys.argv.index("--port") + 1])
class H(http.server.BaseHTTPRequestHandler):
    def _ok(self):
        self.send_response(200); self.send_header("Content-Length", "2"); self.end_headers(); self.wfile.write(b"{{}}")
    do_GET = do_POST = _ok
    def log_message(self, *a): pass
http.server.ThreadingHTTPServer(("127.0.0.1", port), H).serve_forever()
"""


def _fake_engine(tmp_path: Path) -> Path:
    venv = tmp_path / "engine"
    (venv / "bin").mkdir(parents=True)
    vllm = venv / "bin" / "vllm"
    vllm.write_text(FAKE_VLLM.format(python=sys.executable))
    vllm.chmod(vllm.stat().st_mode | stat.S_IXUSR)
    return venv  # no bin/vllm-router: the router cannot be started


def test_a_router_that_is_not_installed_is_named_and_the_started_servers_are_stopped(recipectl_cli, tmp_path):
    data = yaml.safe_load(LOCAL_RECIPE.read_text(encoding="utf-8"))
    p, d, ps, ds, r = free_ports(5)
    data["engine"]["venv"] = str(_fake_engine(tmp_path))
    data["prefill"].update(port=p, side_channel_port=ps)
    data["decode"].update(port=d, side_channel_port=ds)
    data["router"]["port"] = r
    data["launch"]["run_dir"] = str(tmp_path / "runs")
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(yaml.safe_dump(data, sort_keys=False))

    res = recipectl_cli("launch", str(recipe), "--detach", "--no-preflight", timeout=120)

    out = res.stdout + res.stderr
    assert res.returncode == 2, out
    assert "internal error" not in out and "Traceback" not in out
    assert f"cannot start {data['engine']['venv']}/bin/vllm-router: not found" in out
    assert "fix:" in out
    state = json.loads(next((tmp_path / "runs").glob("*/state.json")).read_text())
    pids = [x["pid"] for x in state["processes"] if x.get("pid")]
    assert len(pids) == 2  # prefill and decode were started ...
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and any(psutil.pid_exists(x) for x in pids):
        time.sleep(0.1)
    alive = [x for x in pids if psutil.pid_exists(x) and psutil.Process(x).status() != psutil.STATUS_ZOMBIE]
    assert not alive, f"left running: {alive}"  # ... and stopped when the router could not be
