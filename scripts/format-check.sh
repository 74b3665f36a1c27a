#!/usr/bin/env bash
# Fails when a C++ source differs from .clang-format's style (`make format` fixes it).
set -euo pipefail
cd "$(dirname "$0")/.."
format=$(command -v clang-format-14 || command -v clang-format || true)
if [[ -z "$format" ]]; then
  echo "skipped: no clang-format to check the house style with"
  exit 0
fi
if ! git rev-parse --is-inside-work-tree > /dev/null 2>&1; then
  echo "skipped: not a git checkout (a source archive): the sources to check are git's list"
  exit 0
fi
git ls-files '*.cpp' '*.hpp' '*.h' | grep -v '^proto/' | xargs "$format" --dry-run -Werror
echo "format-check: every C++ source follows .clang-format"
