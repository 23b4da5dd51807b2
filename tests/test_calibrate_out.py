"""`recipectl calibrate -o OUT` refuses an OUT it could not write before it launches anything: the
file is written minutes later, once every point is measured. The launch is a mock that records
that it was reached and stops there; nothing is started."""

from __future__ import annotations

import errno
import io
import os
import sys
from pathlib import Path

import pytest

from recipectl.commands import calibrate as calibrate_module
from recipectl.errors import ExitCode, RecipectlError
from tests.disk_faults import read_only_disk

ROOT = Path(__file__).resolve().parent.parent
LOCAL = ROOT / "recipes" / "local" / "tiny-hybrid-cpu.yaml"
MOCK_REACHED = "mock launcher reached"


@pytest.fixture
def mock_launcher(monkeypatch) -> list[str]:
    """calibrate's deployment_to_measure replaced by a mock that records its call and refuses to
    launch: a check that passes reaches it (exit 1), one that fails never does."""
    calls: list[str] = []

    def mock_deployment_to_measure(recipe_path, *args, **kwargs):
        calls.append(recipe_path)
        raise RecipectlError(MOCK_REACHED, exit_code=ExitCode.FINDINGS)

    monkeypatch.setattr(calibrate_module, "deployment_to_measure", mock_deployment_to_measure)
    return calls


def _calibrate(run, recipe: Path, out: Path, *args: str) -> tuple[int, str]:
    code, _, stderr = run("calibrate", str(recipe), "-o", str(out), *args)
    return code, stderr


@pytest.mark.parametrize(
    "case",
    ["a directory", "in no directory", "under a file", "an existing file", "a symlink", "a FIFO", "the recipe"],
)
def test_an_out_that_cannot_be_written_is_refused_before_the_launch(
    recipectl_in_process, mock_launcher, tmp_path, case
):
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(LOCAL.read_text())
    (tmp_path / "plain.json").write_text("{}\n")
    (tmp_path / "link.json").symlink_to(tmp_path / "plain.json")
    os.mkfifo(tmp_path / "fifo")
    out, force = {
        "a directory": (tmp_path, True),
        "in no directory": (tmp_path / "missing" / "cal.json", True),
        "under a file": (tmp_path / "plain.json" / "cal.json", True),
        "an existing file": (tmp_path / "plain.json", False),
        "a symlink": (tmp_path / "link.json", True),
        "a FIFO": (tmp_path / "fifo", True),
        "the recipe": (recipe, True),
    }[case]
    code, err = _calibrate(recipectl_in_process, recipe, out, *(["--force"] if force else []))
    assert code == 2, err
    assert mock_launcher == [], "the mock launcher was called: the check came after the launch"
    assert str(out) in err and "nothing was written" in err and "Traceback" not in err, err
    assert recipe.read_text() == LOCAL.read_text() and (tmp_path / "plain.json").read_text() == "{}\n"


def test_a_read_only_directory_is_refused_before_the_launch(recipectl_in_process, mock_launcher, monkeypatch, tmp_path):
    read_only_disk(monkeypatch)
    code, err = _calibrate(recipectl_in_process, LOCAL, tmp_path / "cal.json")
    assert code == 2 and mock_launcher == [], err
    assert f"{tmp_path / 'cal.json'}: cannot write the calibration: read-only file system" in err, err
    assert list(tmp_path.iterdir()) == []  # no probe left either


@pytest.mark.parametrize("existing", [False, True])
def test_a_writable_out_reaches_the_launch(recipectl_in_process, mock_launcher, tmp_path, existing):
    """The control: a new file, or an existing one with --force, passes the checks."""
    out = tmp_path / "cal.json"
    if existing:
        out.write_text("{}\n")
    code, err = _calibrate(recipectl_in_process, LOCAL, out, *(["--force"] if existing else []))
    assert code == 1 and MOCK_REACHED in err and mock_launcher == [str(LOCAL)], err
    assert sorted(p.name for p in tmp_path.iterdir()) == (["cal.json"] if existing else [])  # no probe left


def test_a_disk_that_fills_while_it_measures_leaves_the_calibration_on_stdout(
    recipectl_in_process, monkeypatch, tmp_path
):
    """The file is written minutes after the checks: a disk full by then loses no measurement. The
    deployment and the measurements are mocks (what is tested is the write that follows them)."""
    import contextlib
    import json
    from types import SimpleNamespace

    from tests.disk_faults import full_disk

    @contextlib.contextmanager
    def mock_deployment(*args, **kwargs):
        yield SimpleNamespace(router_url="http://router", processes=[SimpleNamespace(kind="prefill", url="http://p")])

    model = {
        "prefill": {"overhead_s": 0.02, "per_token_s": 1e-4},
        "decode": {"step_s": 0.015, "per_seq_s": 1e-3, "per_ctx_token_s": 0.0},
        "transfer": {"latency_s": 0.02, "bytes_per_s": 1e9},
    }
    monkeypatch.setattr(calibrate_module, "deployment_to_measure", mock_deployment)
    monkeypatch.setattr(calibrate_module, "measure", lambda *a, **k: {"model": model, "points": [], "fit_points": {}})
    full_disk(monkeypatch)
    out = tmp_path / "cal.json"
    code, stdout, stderr = recipectl_in_process("calibrate", str(LOCAL), "-o", str(out))
    assert code == 2 and "no space left on device" in stderr and "on stdout" in stderr, stderr
    assert json.loads(stdout)["model"] == model and not out.exists()
    # stdout on the same full disk: said, not an internal error
    monkeypatch.setattr(sys, "stdout", io.TextIOWrapper(open(os.devnull, "wb"), write_through=True))
    monkeypatch.setattr(sys.stdout, "flush", _enospc)
    with pytest.raises(RecipectlError, match="nor on stdout: no space left on device; the measurements are lost"):
        calibrate_module.calibrate(str(LOCAL), out=str(out), variant=None, attach=None, force=False)


def _enospc() -> None:
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
