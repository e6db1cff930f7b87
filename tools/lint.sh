#!/usr/bin/env bash
# ruff's format check and lint (ruff.toml) in the project's environment: what CI runs before the tests.
#   bash tools/lint.sh          # check
#   bash tools/lint.sh --fix    # format the files and apply ruff's safe fixes
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="$(bash "$ROOT/tools/setup_env.sh" | tail -n 1)"
cd "$ROOT"
if [[ "${1:-}" == "--fix" ]]; then
  "$VENV/bin/ruff" format .
  exec "$VENV/bin/ruff" check --fix .
fi
"$VENV/bin/ruff" format --check .
"$VENV/bin/ruff" check .
