#!/usr/bin/env bash
# Regenerate the golden rendered deployments under tests/golden/ with the real CLI, one case per
# line of tests/golden/cases.tsv (DIR TARGET RECIPE VARIANT). Review the diff before committing:
# every change in it is a change in what users deploy.
#   scripts/update-golden.sh            # all cases
#   PYTHON=/path/to/python scripts/update-golden.sh
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
if [[ -z "${PYTHON:-}" ]]; then
  if [[ -x .venv/bin/python ]]; then PYTHON=.venv/bin/python; else PYTHON=python3; fi
fi
GOLDEN=tests/golden
CASES="$GOLDEN/cases.tsv"

# start from an empty tree so that a file the renderer no longer writes does not linger
find "$GOLDEN" -mindepth 1 -maxdepth 1 -type d -exec rm -rf {} +

n=0
while IFS=$'\t' read -r dir target recipe variant; do
  [[ -z "$dir" || "$dir" == \#* ]] && continue
  args=(render "$recipe" --target "$target" -o "$GOLDEN/$dir/$target")
  [[ "$variant" != "-" ]] && args+=(--variant "$variant")
  # HF_TOKEN is set to a canary: a rendered file must only ever reference it, never hold it
  HF_TOKEN=golden-canary-never-rendered "$PYTHON" -m recipectl "${args[@]}"
  n=$((n + 1))
done <"$CASES"

if grep -rl golden-canary-never-rendered "$GOLDEN" >/dev/null; then
  echo "a rendered file holds the value of \$HF_TOKEN" >&2
  exit 1
fi
echo "regenerated $n golden case(s) under $GOLDEN/"
git -c core.pager=cat diff --stat -- "$GOLDEN" 2>/dev/null || true
