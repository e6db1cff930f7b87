#!/usr/bin/env bash
# Runs the test suite, slow tests included, in the project's environment (created on first use, reused after).
#   bash tools/test.sh            # everything
#   bash tools/test.sh -m "not slow" -x   # any pytest options
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="$(bash "$ROOT/tools/setup_env.sh" | tail -n 1)"
cd "$ROOT"
exec "$VENV/bin/python" -m pytest tests -ra "$@"
