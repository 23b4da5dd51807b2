"""scripts/install-offline-bundle.sh on a small bundle made here the way build-offline-bundle.sh
makes one (a tar.xz of a --target site with bin/, split into parts, SHA256SUMS, BUNDLE)."""

from __future__ import annotations

import hashlib
import io
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
INSTALL = ROOT / "scripts" / "install-offline-bundle.sh"
BUILD = ROOT / "scripts" / "build-offline-bundle.sh"
PY = f"{sys.version_info[0]}.{sys.version_info[1]}"


def make_bundle(out: Path, python: str = PY, part_size: int = 300) -> Path:
    out.mkdir(parents=True)
    files = {
        "fakeengine/__init__.py": "VERSION = '1.2.3'\n",
        "fakeengine/cli.py": "def main():\n    print('fakeengine ok')\n",
        "fakeengine-1.2.3.dist-info/METADATA": "Metadata-Version: 2.1\nName: fakeengine\nVersion: 1.2.3\n",
        "fakeengine-1.2.3.dist-info/RECORD": "",
        "bin/fake-serve": "#!/usr/bin/env python3\nimport sys\nfrom fakeengine.cli import main\nsys.exit(main())\n",
    }
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w:xz") as tar:
        for name, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.mode = 0o755 if name.startswith("bin/") else 0o644
            tar.addfile(info, io.BytesIO(data))
    blob = raw.getvalue()
    sums = []
    for i in range(0, len(blob), part_size):
        name = f"engine.tar.xz.part-a{chr(ord('a') + i // part_size)}"
        (out / name).write_bytes(blob[i:i + part_size])
        sums.append(f"{hashlib.sha256(blob[i:i + part_size]).hexdigest()}  {name}")
    (out / "SHA256SUMS").write_text("\n".join(sums) + "\n")
    (out / "BUNDLE").write_text(f"python={python}\nrequirements=test.txt\n")
    return out


def run(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", *args], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHON": sys.executable, **(env or {})})


def test_installs_a_bundle_into_a_venv_with_its_commands(tmp_path):
    bundle = make_bundle(tmp_path / "bundle")
    assert len(list(bundle.glob("engine.tar.xz.part-*"))) > 1  # really split
    venv = tmp_path / "engine"
    r = run(str(INSTALL), str(bundle), str(venv))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "engine ready" in r.stdout
    serve = venv / "bin" / "fake-serve"
    assert serve.read_text().startswith(f"#!{venv}/bin/python")  # bound to the venv, not the host
    assert subprocess.run([str(serve)], capture_output=True, text=True).stdout.strip() == "fakeengine ok"
    pth = list(venv.glob("lib/python*/site-packages/_recipectl_host_site.pth"))
    assert pth and pth[0].read_text().strip()  # the host's site-packages stay reachable


def test_a_corrupt_part_is_refused(tmp_path):
    bundle = make_bundle(tmp_path / "bundle")
    part = sorted(bundle.glob("engine.tar.xz.part-*"))[0]
    part.write_bytes(b"x" + part.read_bytes()[1:])
    r = run(str(INSTALL), str(bundle), str(tmp_path / "engine"))
    assert r.returncode == 2 and "incomplete or corrupt" in r.stderr and "fix:" in r.stderr
    assert not (tmp_path / "engine").exists()


def test_a_bundle_for_another_python_is_refused(tmp_path):
    bundle = make_bundle(tmp_path / "bundle", python="3.99")
    r = run(str(INSTALL), str(bundle), str(tmp_path / "engine"))
    assert r.returncode == 2 and "the bundle is for Python 3.99" in r.stderr and "fix:" in r.stderr


def test_an_empty_folder_is_not_a_bundle(tmp_path):
    (tmp_path / "empty").mkdir()
    r = run(str(INSTALL), str(tmp_path / "empty"))
    assert r.returncode == 2 and "no engine.tar.xz.part-*" in r.stderr


def test_build_refuses_a_pip_that_cannot_install_for_another_platform(tmp_path):
    fake_pip = tmp_path / "pip"
    fake_pip.write_text("#!/bin/sh\necho 'pip 23.2.1 from /somewhere (python 3.11)'\n")
    fake_pip.chmod(0o755)
    r = run(str(BUILD), str(ROOT / "scripts/bundles/vllm-0.26.0-cu130-py312.txt"),
            env={"PIP": str(fake_pip), "OUT": str(tmp_path / "out")})
    assert r.returncode == 2 and "pip >= 26" in r.stderr and "fix:" in r.stderr


@pytest.mark.parametrize("folder", ["empty", "partial"])
def test_evidence_summary_reads_a_partial_run(tmp_path, folder):
    ev = tmp_path / "evidence"
    ev.mkdir()
    if folder == "partial":
        (ev / "driver.log").write_text("[00:00:00 +0s] launch: exit 1 in 3s\n")
        (ev / "launch.err").write_text("launch failed: prefill-0 exited with code 1\n")
    r = subprocess.run([sys.executable, str(ROOT / "scripts" / "evidence-summary.py"), str(ev)],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert "# recipectl GPU evidence" in r.stdout and "(no bench summary)" in r.stdout
