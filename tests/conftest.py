import os
import sys
from pathlib import Path

import pytest
from hypothesis import settings

from .fakeserver import FakeServer

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = Path(__file__).resolve().parent / "fixtures"


def pytest_addoption(parser):
    parser.addoption(
        "--require-all",
        action="store_true",
        default=False,
        help="a missing component (engine, Slurm, shellcheck, Kubernetes schemas) fails its "
        "tests instead of skipping them; CI=true does the same (tests/requirements.py)",
    )


# The property tests explore new inputs on every developer run (a failure prints the case to
# reproduce and lands in the test's examples); CI replays one fixed sequence, so that a clean
# clone's result does not depend on the draw. To explore further, run the property tests with
# `--hypothesis-seed=N` for a few N.
settings.register_profile("ci", derandomize=True, print_blob=True)
if os.environ.get("CI") == "true":
    settings.load_profile("ci")


# pyproject.toml's `timeout` (300 s) bounds every test: a hang fails with its stack, not at CI's
# limit. Tests marked engine or slurm get this instead: their module fixtures start a deployment
# or a cluster (launch alone may take its ready_timeout_s, 900 s, on a loaded 2-core host), and
# pytest-timeout counts a fixture's set-up in the first test that uses it.
ENGINE_OR_SLURM_TIMEOUT_S = 3600


def pytest_collection_modifyitems(config, items):
    for item in items:
        if item.get_closest_marker("timeout") is None and (
            item.get_closest_marker("engine") or item.get_closest_marker("slurm")
        ):
            item.add_marker(pytest.mark.timeout(ENGINE_OR_SLURM_TIMEOUT_S))


def pytest_collection_finish(session):
    """The engine tests' extra models, made before any test starts a deployment."""
    if any(item.get_closest_marker("engine") for item in session.items):
        from .e2e_support import make_test_models

        make_test_models()


def pytest_configure(config):
    from .requirements import ci_is_set, configure

    ci_is_set()  # an unreadable CI value is a usage error before any test runs
    configure(config.getoption("require_all"))


@pytest.fixture
def fake_server():
    """Start tests/fakeserver.FakeServer(handler) on a free local port; closed after the test.
    `fake_server(handler)` returns the running server (its `url`, the `requests` it saw)."""
    servers: list[FakeServer] = []

    def start(handler) -> FakeServer:
        servers.append(FakeServer(handler).start())
        return servers[-1]

    yield start
    for server in servers:
        server.close()


@pytest.fixture
def recipectl_cli():
    """Run the real console entry point in a subprocess: what a user runs."""
    import subprocess

    def run(*args: str, input: str | None = None, env: dict | None = None, timeout: float = 120):
        full_env = {**os.environ, **(env or {})}
        return subprocess.run(
            [sys.executable, "-m", "recipectl", *args],
            capture_output=True,
            text=True,
            input=input,
            env=full_env,
            timeout=timeout,
            cwd=ROOT,
        )

    return run


@pytest.fixture
def recipectl_in_process(monkeypatch, tmp_path):
    """Run the console entry point (recipectl.entry.main) in this process: (exit code, stdout,
    stderr). For thousands of command lines, where a subprocess each would not fit in CI. A crash
    log goes to the test's directory."""
    import contextlib
    import io
    import tempfile

    from recipectl import entry

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))

    def run(*args: str) -> tuple[int, str, str]:
        out, err = io.StringIO(), io.StringIO()
        monkeypatch.setattr(sys, "argv", ["recipectl", *args])
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                entry.main()
                code = 0
            except SystemExit as e:
                code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        return code, out.getvalue(), err.getvalue()

    return run
