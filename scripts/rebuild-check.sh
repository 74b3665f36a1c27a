#!/usr/bin/env bash
# On a built tree, `make build` again must compile nothing: the configuration (compiler
# launcher included) is stable across invocations, so README commands run back to back
# (`make test` then `make run`, or the reverse) never rebuild the tree.
set -euo pipefail
cd "$(dirname "$0")/.."
output=$(make --no-print-directory build 2>&1)
if ! grep -q "ninja: no work to do" <<<"$output"; then
  echo "rebuild-check: FAILED: a second 'make build' did work:"
  tail -20 <<<"$output"
  exit 1
fi
echo "rebuild-check: a second 'make build' compiled nothing"
