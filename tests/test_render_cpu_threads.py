"""The rendered bash script puts a CPU endpoint's threads back on its cores, as `recipectl launch`
does (docs/engine-cpu.md, "The connector moves each endpoint's forward pass to the host's last
core"): its `repin_threads` run against a real process whose threads stand where the engine's
connector leaves them."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from .e2e_support import LOCAL_RECIPE, cli

pytestmark = pytest.mark.skipif(
    len(os.sched_getaffinity(0)) < 2 or not sys.platform.startswith("linux"), reason="needs two cores to move a thread"
)

# A session of its own (as the script's `setsid` gives each server): the main thread on the first
# core; one thread moved to the second alone, as the connector moves a worker's main thread; one
# allowed both, as vLLM leaves its API server's and engine core's threads.
CHILD = """
import os, sys, threading, time
a, b = sorted(os.sched_getaffinity(0))[:2]
os.sched_setaffinity(0, {a})
tids = {}
def stray():
    os.sched_setaffinity(0, {b}); tids["stray"] = threading.get_native_id(); time.sleep(60)
def both():
    os.sched_setaffinity(0, {a, b}); tids["both"] = threading.get_native_id(); time.sleep(60)
for f in (stray, both):
    threading.Thread(target=f, daemon=True).start()
while len(tids) < 2:
    time.sleep(0.01)
print(a, b, tids["stray"], tids["both"], flush=True)
time.sleep(60)
"""


def repin_function(tmp_path) -> str:
    out = tmp_path / "rendered"
    r = cli("render", str(LOCAL_RECIPE), "--target", "bash", "-o", str(out))
    assert r.returncode == 0, r.stderr
    (script,) = out.glob("*.sh")
    text = script.read_text()
    start = text.index("repin_threads() {")
    return text[start : text.index("\n}\n", start) + 3]


def repin(function: str, name: str, session: int, cores: int | str) -> subprocess.CompletedProcess:
    """The script's repin_threads, run under the script's own shell options."""
    script = f'set -euo pipefail\n{function}\nrepin_threads {name} "$1" {cores}'
    return subprocess.run(["bash", "-c", script, "_", str(session)], capture_output=True, text=True, timeout=30)


def test_the_scripts_repin_puts_a_stray_thread_back_and_leaves_the_others(tmp_path):
    function = repin_function(tmp_path)
    child = subprocess.Popen([sys.executable, "-c", CHILD], stdout=subprocess.PIPE, text=True, start_new_session=True)
    try:
        a, b, stray, both = (int(x) for x in child.stdout.readline().split())
        assert os.sched_getaffinity(stray) == {b}
        r = repin(function, "prefill-0", child.pid, a)
        assert r.returncode == 0, r.stderr
        assert os.sched_getaffinity(stray) == {a}
        assert os.sched_getaffinity(both) == {a, b}  # allowed one of its cores: left as it was
        assert os.sched_getaffinity(child.pid) == {a}
        assert r.stdout == f"prefill-0: 1 thread(s) the engine had put off its cores put back on cores {a}\n"
        # nothing off its cores: nothing moved, nothing said
        again = repin(function, "prefill-0", child.pid, a)
        assert again.returncode == 0 and again.stdout == ""
    finally:
        child.kill()
        child.wait()


def test_a_thread_on_one_of_a_ranges_cores_is_left_and_cores_the_host_lacks_are_said(tmp_path):
    """The endpoint's cores come as ranges ("0-1"): a thread allowed one core of a range is on the
    endpoint's cores. Cores taskset refuses (the host has no CPU 65,000) are said on stderr, and
    the script goes on: the deployment runs, off its cores, and the user is told which."""
    function = repin_function(tmp_path)
    child = subprocess.Popen([sys.executable, "-c", CHILD], stdout=subprocess.PIPE, text=True, start_new_session=True)
    try:
        a, b, stray, _ = (int(x) for x in child.stdout.readline().split())
        r = repin(function, "prefill-0", child.pid, f"{min(a, b)}-{max(a, b)}")
        assert (r.returncode, r.stdout, r.stderr) == (0, "", "")
        assert os.sched_getaffinity(stray) == {b}
        r = repin(function, "decode-0", child.pid, "65000")
        assert r.returncode == 0 and r.stdout == ""
        assert "decode-0: 3 thread(s) off its cores could not be put on cores 65000" in r.stderr, r.stderr
        assert os.sched_getaffinity(stray) == {b}
    finally:
        child.kill()
        child.wait()


def test_a_long_core_list_is_rendered_as_its_ranges(tmp_path):
    recipe = tmp_path / "wide.yaml"
    text = LOCAL_RECIPE.read_text()
    text = text.replace("cpu_cores: ['0']", "cpu_cores: ['0-29999']").replace(
        "cpu_cores: ['1']", "cpu_cores: ['30000,30002-30003']"
    )
    recipe.write_text(text)
    out = tmp_path / "rendered"
    r = cli("render", str(recipe), "--target", "bash", "-o", str(out))
    assert r.returncode == 0, r.stderr
    (script,) = out.glob("*.sh")
    lines = script.read_text().splitlines()
    assert 'repin_threads prefill-0 "${pids[0]}" 0-29999' in lines
    assert 'repin_threads decode-0 "${pids[1]}" 30000,30002-30003' in lines


def test_a_process_of_another_session_is_not_touched(tmp_path):
    """The script names each endpoint by the session its `setsid` made: a process outside it keeps
    its threads where they are, whatever their cores."""
    function = repin_function(tmp_path)
    child = subprocess.Popen([sys.executable, "-c", CHILD], stdout=subprocess.PIPE, text=True, start_new_session=True)
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)
    try:
        a, b, stray, _ = (int(x) for x in child.stdout.readline().split())
        time.sleep(0.1)
        r = repin(function, "decode-0", other.pid, a)
        assert r.returncode == 0, r.stderr
        assert os.sched_getaffinity(stray) == {b}
    finally:
        for p in (child, other):
            p.kill()
            p.wait()


def test_only_cpu_endpoints_are_repinned(tmp_path):
    out = tmp_path / "gpu"
    r = cli("render", "recipes/h200/qwen3.5-9b-pd-1gpu.yaml", "--target", "bash", "-o", str(out))
    assert r.returncode == 0, r.stderr
    assert all("repin_threads" not in p.read_text() for p in out.glob("*.sh"))
    cpu = repin_function(tmp_path).count("taskset -p -c")
    assert cpu == 1


@pytest.mark.engine
def test_the_rendered_script_runs_the_cpu_deployment_with_every_thread_on_its_endpoints_cores(tmp_path):
    """The rendered bash script, run as a user runs it, on the real engine: once it starts the
    router, no thread of either endpoint is off the endpoint's cores (the connector had moved one
    worker's main thread), and Ctrl-C's cleanup leaves nothing."""
    import re
    import signal

    import httpx
    import psutil

    from .e2e_support import local_recipe_on_free_ports, wait_for
    from .requirements import require_engine

    require_engine()
    recipe, ports = local_recipe_on_free_ports(tmp_path / "tiny-hybrid-cpu.yaml")
    out = tmp_path / "rendered"
    r = cli("render", str(recipe), "--target", "bash", "-o", str(out))
    assert r.returncode == 0, r.stderr
    (script,) = out.glob("*.sh")
    log = open(tmp_path / "script.out", "w+")
    # SIGINT as a terminal gives it: a shell that starts with SIGINT ignored (a test run started
    # in the background of a non-interactive shell passes that on) cannot trap it, and the script's
    # Ctrl-C cleanup would never run
    default_int = (
        "import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); os.execvp('bash', ['bash', sys.argv[1]])"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", default_int, str(script)],
        stdout=log,
        stderr=subprocess.STDOUT,
        env={**os.environ, "LOG_DIR": str(tmp_path / "logs")},
        start_new_session=True,
    )
    text = lambda: (tmp_path / "script.out").read_text()  # noqa: E731
    try:

        def router_up():
            assert proc.poll() is None, text()
            try:
                return httpx.get(f"http://127.0.0.1:{ports.router}/health", timeout=2).status_code == 200
            except httpx.HTTPError:
                return False

        wait_for(router_up, timeout=600, interval=2)
        started = dict(re.findall(r"started (prefill-0|decode-0) \(pid (\d+)\)", text()))
        cores = {"prefill-0": {0}, "decode-0": {1}}
        for name, pid in started.items():
            sid = int(pid)
            members = [p for p in psutil.process_iter() if _session(p) == sid]
            assert len(members) >= 2, (name, members)  # the API server and its engine core, at least
            for member in members:
                for t in member.threads():
                    allowed = os.sched_getaffinity(t.id)
                    assert allowed & cores[name], (name, member.pid, t.id, allowed, text())
        assert re.search(r"prefill-0: \d+ thread\(s\) the engine had put off its cores put back on cores 0", text())
    finally:
        os.killpg(proc.pid, signal.SIGINT)
        try:
            proc.wait(timeout=120)
        except subprocess.TimeoutExpired:
            # the cleanup did not finish: stop what the script started, so that the deployment
            # does not run on beside the tests after this one
            sessions = {int(x) for x in re.findall(r"\(pid (\d+)\)", text())} | {proc.pid}
            for p in psutil.process_iter():
                if _session(p) in sessions:
                    p.kill()
            raise
        finally:
            log.close()
    gone = lambda: not [p for p in psutil.process_iter() if _session(p) in {int(x) for x in started.values()}]  # noqa: E731
    wait_for(gone, timeout=60)


def _session(p) -> int | None:
    try:
        return os.getsid(p.pid)
    except (ProcessLookupError, PermissionError):
        return None
