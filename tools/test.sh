#!/usr/bin/env bash
# Runs the test suite, slow tests included, in the project's environment (created on first use, reused after).
#   bash tools/test.sh            # everything
#   bash tools/test.sh -m "not slow" -x   # any pytest options
# With two or more cores the test files run in parallel worker processes (pytest-xdist, a file's tests on one
# worker, so its fixtures are built once), one thread each: most tests run single-threaded fairseq programs.
# TEST_WORKERS=N sets their number (default: the cores, at most 4); TEST_WORKERS=1 runs everything in one process.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="$(bash "$ROOT/tools/setup_env.sh" | tail -n 1)"
cd "$ROOT"
workers="${TEST_WORKERS:-$("$VENV/bin/python" -c 'import os; print(min(4, len(os.sched_getaffinity(0))))')}"
parallel=()
if (( workers > 1 )); then
  parallel=(-n "$workers" --dist loadfile)
  export OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}"
fi
exec "$VENV/bin/python" -m pytest tests -ra "${parallel[@]}" "$@"
