#!/usr/bin/env bash
# Install an engine bundle made by build-offline-bundle.sh, with no network: a virtual environment
# that sees the host's own packages (torch, triton, numpy, transformers...) and holds the bundle's.
#
#   bash scripts/install-offline-bundle.sh BUNDLE_DIR [VENV]     # VENV: ~/.cache/recipectl/engine
#
# The recipe then names it in engine.venv, and recipectl calls VENV/bin/vllm and
# VENV/bin/vllm-router. PYTHON (python3) must be the interpreter the bundle was built for.
set -euo pipefail
BUNDLE="${1:?usage: install-offline-bundle.sh BUNDLE_DIR [VENV]}"
VENV="${2:-${XDG_CACHE_HOME:-$HOME/.cache}/recipectl/engine}"
PYTHON="${PYTHON:-python3}"
step() { printf '[%s] %s\n' "$(date +%T)" "$*"; }

shopt -s nullglob
parts=("$BUNDLE"/engine.tar.zst.part-*)
format=zst
if (( ${#parts[@]} == 0 )); then parts=("$BUNDLE"/engine.tar.xz.part-*); format=xz; fi  # older bundles
if (( ${#parts[@]} == 0 )); then
  echo "error: no engine.tar.zst.part-* in $BUNDLE" >&2
  exit 2
fi
if [[ -f "$BUNDLE/SHA256SUMS" ]]; then
  (cd "$BUNDLE" && sha256sum --quiet -c SHA256SUMS) || {
    echo "error: $BUNDLE is incomplete or corrupt (SHA256SUMS)" >&2
    echo "  fix: copy every engine.tar.$format.part-* again" >&2
    exit 2
  }
fi
want="$(sed -n 's/^python=//p' "$BUNDLE/BUNDLE" 2>/dev/null || true)"
have="$("$PYTHON" -c 'import sys; print("%d.%d" % sys.version_info[:2])')"
if [[ -n "$want" && "$want" != "$have" ]]; then
  echo "error: the bundle is for Python $want; $PYTHON is $have" >&2
  echo "  fix: PYTHON=python$want $0 $*, or rebuild with PYTHON_VERSION=$have" >&2
  exit 2
fi

step "creating $VENV (with the host's site-packages)"
"$PYTHON" -m venv --system-site-packages --without-pip "$VENV"
site="$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
# When PYTHON is itself a virtual environment's (GPU images often ship torch in one), the new venv's
# "system" packages are the base interpreter's, without torch: point it at PYTHON's own too.
"$PYTHON" -c 'import site, sys; print("\n".join(p for p in site.getsitepackages() if p))' > "$site/_recipectl_host_site.pth"
step "unpacking ${#parts[@]} part(s) into $site"
t0=$(date +%s)
# Python's tarfile when the host lacks the program (minimal GPU images often do): for zstd through
# the zstandard wheel the bundle carries, unpacked into a temporary folder.
if [[ $format == zst ]] && command -v zstd >/dev/null; then
  cat "${parts[@]}" | zstd -d -q | tar -x -C "$site"
elif [[ $format == zst ]]; then
  wheel=("$BUNDLE"/zstandard-*.whl)
  (( ${#wheel[@]} )) || { echo "error: no zstd program here and no zstandard wheel in $BUNDLE" >&2; exit 2; }
  zs="$(mktemp -d)"
  "$PYTHON" -c 'import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extractall(sys.argv[2])' "${wheel[0]}" "$zs"
  cat "${parts[@]}" | PYTHONPATH="$zs" "$PYTHON" -c 'import sys, tarfile, zstandard
with zstandard.ZstdDecompressor().stream_reader(sys.stdin.buffer) as raw:
    tarfile.open(fileobj=raw, mode="r|").extractall(sys.argv[1])' "$site"
  rm -rf "$zs"
elif command -v xz >/dev/null; then
  cat "${parts[@]}" | xz -d -T0 | tar -x -C "$site"
else
  cat "${parts[@]}" | "$PYTHON" -c 'import sys, tarfile; tarfile.open(fileobj=sys.stdin.buffer, mode="r|xz").extractall(sys.argv[1])' "$site"
fi
step "unpacked in $(( $(date +%s) - t0 ))s"
# Console scripts travel in the bundle's bin/: move them into the venv, bound to its python.
if [[ -d "$site/bin" ]]; then
  for f in "$site"/bin/*; do
    sed "1s|^#!.*python.*$|#!$VENV/bin/python|" "$f" > "$VENV/bin/$(basename "$f")"
    chmod +x "$VENV/bin/$(basename "$f")"
  done
  rm -rf "${site:?}/bin"
fi
step "checking"
"$VENV/bin/python" - <<'EOF'
from importlib.metadata import version
for name in ("vllm", "nixl", "vllm-router", "torch"):
    try:
        print(f"  {name} {version(name)}")
    except Exception as e:  # noqa: BLE001
        print(f"  {name}: not found ({e})")
EOF
step "engine ready: $VENV (engine.venv in the recipe, or RECIPECTL_ENGINE_VENV)"
