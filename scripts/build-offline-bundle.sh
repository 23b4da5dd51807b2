#!/usr/bin/env bash
# Build an offline engine bundle: vLLM, NIXL and vllm-router with their pinned dependencies,
# installed for a TARGET Python/platform (not this machine's), trimmed, packed with zstd and split
# into parts small enough to carry. For air-gapped GPU clusters whose image already has torch.
# The requirements file comes from scripts/bundle-requirements.py (the engine, recipectl's own
# dependencies, minus what the image has).
#
#   bash scripts/build-offline-bundle.sh scripts/bundles/vllm-0.26.0-cu130-py312.txt
#   # copy OUT/ to the target, then there:
#   bash scripts/install-offline-bundle.sh OUT/ ~/.cache/recipectl/engine
#
# Options (environment): PYTHON_VERSION (3.12), PLATFORMS (manylinux x86_64 tags), OUT
# (.gpu-build/bundle), PART_SIZE (48M, split -b syntax: a part and a checkout stay under a 64 MiB
# transfer), ZSTD_LEVEL (9: 2 minutes on 2 cores; 3 packs in a third of that, 9% larger), PIP (a
# pip >= 26: older pips cannot install --target for another platform), KEEP_FA2=1 to keep
# FlashAttention-2. The bundle carries the zstandard wheel for hosts without the zstd program.
set -euo pipefail
REQS="$(realpath "${1:?usage: build-offline-bundle.sh REQUIREMENTS.txt}")"
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
PYTHON_VERSION="${PYTHON_VERSION:-3.12}"
OUT="${OUT:-$ROOT/.gpu-build/bundle}"
WORK="$(dirname "$OUT")/bundle-work"
PART_SIZE="${PART_SIZE:-48M}"
ZSTD_LEVEL="${ZSTD_LEVEL:-9}"
PIP="${PIP:-pip}"
PLATFORMS="${PLATFORMS:-manylinux_2_31_x86_64 manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_26_x86_64 manylinux_2_24_x86_64 manylinux_2_17_x86_64 manylinux2014_x86_64 manylinux_2_5_x86_64 manylinux1_x86_64}"

pip_major="$($PIP --version | awk '{split($2, v, "."); print v[1]}')"
if (( pip_major < 26 )); then
  echo "error: $PIP is $($PIP --version | awk '{print $2}'); cross-platform --target installs need pip >= 26" >&2
  echo "  fix: python3 -m venv /tmp/pip26 && /tmp/pip26/bin/pip install -U pip && PIP=/tmp/pip26/bin/pip $0 $*" >&2
  exit 2
fi

# Only binary wheels, for the target interpreter: nothing is built here, nothing is resolved on the
# target. --no-deps because the requirements file pins the whole closure (minus what the target
# image provides: torch, triton, numpy, transformers, tokenizers...).
target=(--no-deps --only-binary=:all: --python-version "$PYTHON_VERSION" --implementation cp)
for p in $PLATFORMS; do target+=(--platform "$p"); done

step() { printf '[%s] %s\n' "$(date +%T)" "$*"; }
command -v zstd >/dev/null || { echo "error: zstd not found" >&2; echo "  fix: apt-get install zstd" >&2; exit 2; }
mkdir -p "$WORK/wheels" "$OUT"
step "downloading wheels for Python $PYTHON_VERSION ($REQS)"
$PIP download -q "${target[@]}" -d "$WORK/wheels" -r "$REQS"
step "installing into $WORK/site"
rm -rf "$WORK/site"
# exactly the requirements' wheels (the folder may hold others from an earlier list)
$PIP install -q --no-compile --no-index --find-links "$WORK/wheels" "${target[@]}" --target "$WORK/site" -r "$REQS"

cd "$WORK/site"
# Trims, each worth tens to hundreds of MiB in the carried bundle:
#  - FlashAttention-2 kernels (~305 MB): Hopper and Blackwell use FA3/FA4 or FlashInfer.
#  - vLLM's Rust frontend binary: `vllm serve` runs the Python API server.
#  - NIXL's expert-parallel kernels: built for other torch releases than the target's.
if [[ "${KEEP_FA2:-0}" != 1 ]]; then rm -f vllm/vllm_flash_attn/_vllm_fa2_C.abi3.so; fi
rm -f vllm/vllm-rs
rm -rf nixl_ep nixl_ep_cu13
# Console scripts were written for this machine's interpreter; on the target they are rewritten
# by install-offline-bundle.sh, so make them neutral here.
sed -i '1s|^#!.*python.*$|#!/usr/bin/env python3|' bin/*
step "site: $(du -sh . | cut -f1)"

step "packing (zstd -$ZSTD_LEVEL)"
rm -f "$OUT"/engine.tar.* "$OUT"/zstandard-*.whl
t0=$(date +%s)
tar -C "$WORK/site" -cf - . | zstd -q -T0 "-$ZSTD_LEVEL" | split -b "$PART_SIZE" -a 2 - "$OUT/engine.tar.zst.part-"
step "packed in $(( $(date +%s) - t0 ))s"
# for a host without the zstd program: Python's tarfile reads the stream through this wheel
$PIP download -q "${target[@]}" -d "$OUT" "zstandard==${ZSTANDARD_VERSION:-0.25.0}"
cp "$REQS" "$OUT/requirements.txt"
(cd "$OUT" && sha256sum engine.tar.zst.part-* zstandard-*.whl > SHA256SUMS)
printf 'python=%s\nrequirements=%s\nbuilt=%s\n' "$PYTHON_VERSION" "$(basename "$REQS")" "$(date -u +%FT%TZ)" > "$OUT/BUNDLE"
step "bundle in $OUT:"
ls -l "$OUT"
