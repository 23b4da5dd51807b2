#!/usr/bin/env bash
# The test suite, from a fresh machine: set up (idempotent), then pytest — unit tests and the
# real-engine end-to-end tests (they start and stop the CPU deployment themselves).
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"
bash scripts/setup.sh
exec .venv/bin/python -m pytest "$@"
