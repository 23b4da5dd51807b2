"""scripts/install-offline-bundle.sh on a small bundle made here the way build-offline-bundle.sh
makes one (a tar.zst of a --target site with bin/, split into parts, SHA256SUMS, BUNDLE; older
bundles are tar.xz), and the bundle's requirements against what recipectl and the image need."""

from __future__ import annotations

import hashlib
import io
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
INSTALL = ROOT / "scripts" / "install-offline-bundle.sh"
BUILD = ROOT / "scripts" / "build-offline-bundle.sh"
PY = f"{sys.version_info[0]}.{sys.version_info[1]}"


def make_bundle(out: Path, python: str = PY, part_size: int = 300, fmt: str = "xz") -> Path:
    out.mkdir(parents=True)
    files = {
        "fakeengine/__init__.py": "VERSION = '1.2.3'\n",
        "fakeengine/cli.py": "def main():\n    print('fakeengine ok')\n",
        "fakeengine-1.2.3.dist-info/METADATA": "Metadata-Version: 2.1\nName: fakeengine\nVersion: 1.2.3\n",
        "fakeengine-1.2.3.dist-info/RECORD": "",
        "bin/fake-serve": "#!/usr/bin/env python3\nimport sys\nfrom fakeengine.cli import main\nsys.exit(main())\n",
    }
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w:xz" if fmt == "xz" else "w") as tar:
        for name, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.mode = 0o755 if name.startswith("bin/") else 0o644
            tar.addfile(info, io.BytesIO(data))
    blob = raw.getvalue()
    if fmt == "zst":
        blob = subprocess.run(["zstd", "-q", "-c"], input=blob, capture_output=True, check=True).stdout
    sums = []
    for i in range(0, len(blob), part_size):
        name = f"engine.tar.{fmt}.part-a{chr(ord('a') + i // part_size)}"
        (out / name).write_bytes(blob[i : i + part_size])
        sums.append(f"{hashlib.sha256(blob[i : i + part_size]).hexdigest()}  {name}")
    (out / "SHA256SUMS").write_text("\n".join(sums) + "\n")
    (out / "BUNDLE").write_text(f"python={python}\nrequirements=test.txt\n")
    return out


def run(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["bash", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHON": sys.executable, **(env or {})},
    )


@pytest.mark.parametrize("fmt", ["zst", "xz"])
def test_installs_a_bundle_into_a_venv_with_its_commands(tmp_path, fmt):
    if fmt == "zst" and not shutil.which("zstd"):
        pytest.skip("zstd not installed (apt-get install zstd)")
    bundle = make_bundle(tmp_path / "bundle", part_size=100, fmt=fmt)
    assert len(list(bundle.glob(f"engine.tar.{fmt}.part-*"))) > 1  # really split
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
    assert r.returncode == 2 and "no engine.tar.zst.part-*" in r.stderr


def test_build_refuses_a_pip_that_cannot_install_for_another_platform(tmp_path):
    fake_pip = tmp_path / "pip"
    fake_pip.write_text("#!/bin/sh\necho 'pip 23.2.1 from /somewhere (python 3.11)'\n")
    fake_pip.chmod(0o755)
    r = run(
        str(BUILD),
        str(ROOT / "scripts/bundles/vllm-0.26.0-cu130-py312.txt"),
        env={"PIP": str(fake_pip), "OUT": str(tmp_path / "out")},
    )
    assert r.returncode == 2 and "pip >= 26" in r.stderr and "fix:" in r.stderr


@pytest.mark.parametrize("folder", ["empty", "partial"])
def test_evidence_summary_reads_a_partial_run(tmp_path, folder):
    ev = tmp_path / "evidence"
    ev.mkdir()
    if folder == "partial":
        (ev / "driver.log").write_text("[00:00:00 +0s] launch: exit 1 in 3s\n")
        (ev / "launch.err").write_text("launch failed: prefill-0 exited with code 1\n")
    r = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "evidence-summary.py"), str(ev)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 0, r.stderr
    assert "# recipectl GPU evidence" in r.stdout and "(no bench summary)" in r.stdout


# ------------------------------------------------ the bundle's requirements, complete by construction
BUNDLES = ROOT / "scripts" / "bundles"


def _names(path: Path) -> dict[str, str]:
    """canonical project name -> the line, for a requirements-style file (comments dropped)."""
    out = {}
    for raw in path.read_text().splitlines():
        line = raw.split("#", 1)[0].strip()
        if line:
            out[re.sub(r"[-_.]+", "-", re.match(r"[A-Za-z0-9][A-Za-z0-9._-]*", line).group(0)).lower()] = line
    return out


def test_the_bundle_carries_what_recipectl_imports_and_nothing_the_image_has():
    """recipectl runs from the engine's environment on the GPU host (launch, doctor, bench): each of
    its runtime dependencies is in the bundle or in the image, and the bundle repeats nothing the
    image has (two versions of one package on one path)."""
    carried = _names(BUNDLES / "vllm-0.26.0-cu130-py312.txt")
    image = _names(BUNDLES / "gpu-image-packages.txt")
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    ours = set(_names_of(deps))
    missing = sorted(n for n in ours if n not in carried and n not in image)
    assert not missing, f"recipectl needs {missing}: run scripts/bundle-requirements.py"
    assert not sorted(set(carried) & set(image)), "the image has these already"
    engine = _names(BUNDLES / "vllm-0.26.0-cu130-py312.in")
    assert all(carried.get(n) == line for n, line in engine.items() if n not in image), (
        "the .txt is older than the .in: run scripts/bundle-requirements.py"
    )
    assert all("==" in line for line in carried.values())  # pinned: nothing is resolved on the host
    assert {"tenacity", "ruamel-yaml", "vllm", "nixl-cu13", "vllm-router"} <= set(carried)


def _names_of(requirements: list[str]) -> list[str]:
    return [re.sub(r"[-_.]+", "-", re.match(r"[A-Za-z0-9][A-Za-z0-9._-]*", r).group(0)).lower() for r in requirements]


# ------------------------------------------------------------------------ scripts/gpu-evidence.sh
EVIDENCE = ROOT / "scripts" / "gpu-evidence.sh"


def _evidence(tmp_path: Path, path: str) -> tuple[subprocess.CompletedProcess, str]:
    env = {
        **os.environ,
        "PATH": path,
        "OUT": str(tmp_path / "out"),
        "ENGINE": str(tmp_path / "engine"),
        "MODELS": str(tmp_path / "models"),
        "HOME": str(tmp_path),
        "BUDGET": "120",
    }
    r = subprocess.run(
        [shutil.which("bash"), str(EVIDENCE), "main"], capture_output=True, text=True, timeout=300, env=env
    )
    log = tmp_path / "out" / "evidence" / "driver.log"
    return r, log.read_text() if log.exists() else ""


def test_gpu_evidence_says_the_host_has_no_gpu(tmp_path):
    bare = tmp_path / "bin"
    bare.mkdir()
    for tool in ("date", "tee", "mkdir", "sed", "grep", "cat", "paste", "tail", "cp", "tar", "basename", "dirname"):
        if shutil.which(tool):
            (bare / tool).symlink_to(shutil.which(tool))
    r, log = _evidence(tmp_path, str(bare))  # no nvidia-smi here
    assert r.returncode == 2, r.stdout + r.stderr
    assert "no NVIDIA GPU on this host" in log


def test_gpu_evidence_starts_nothing_else_after_a_failed_launch(tmp_path):
    """A launch that fails is reported; the driver does not start another model in its place."""
    bin_ = tmp_path / "fakebin"
    bin_.mkdir()
    smi = bin_ / "nvidia-smi"
    smi.write_text(
        '#!/bin/sh\ncase "$*" in *index,name*) echo "0, NVIDIA H200, 143771";; '
        '*name*) echo "NVIDIA H200";; *) echo "fake nvidia-smi";; esac\n'
    )
    engine = tmp_path / "engine" / "bin"
    engine.mkdir(parents=True)
    (engine / "python").write_text(f'#!/bin/sh\nexec {sys.executable} "$@"\n')
    (engine / "vllm").write_text("#!/bin/sh\necho 'fake engine: exits' >&2\nexit 1\n")
    (engine / "vllm-router").write_text("#!/bin/sh\nexit 1\n")
    for f in (smi, *engine.iterdir()):
        f.chmod(0o755)
    r, log = _evidence(tmp_path, f"{bin_}:{os.environ['PATH']}")
    assert "launch: exit 1" in log, log + r.stderr
    assert log.count("launch") == log.count("launch: exit 1") + log.count("launch failed"), log
    assert "qwen3next" not in log
