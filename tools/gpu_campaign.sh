#!/usr/bin/env bash
# A GPU campaign in four steps (docs/gpu.md): prepare here, start and poll on the lent device, collect here.
#
#   bash tools/gpu_campaign.sh prepare [--dry-run]     # here: .gpu/ (wheels, data) and the device calls to make
#   bash tools/gpu_campaign.sh start --budget-s N      # device: install what it lacks from .gpu/, launch detached
#   bash tools/gpu_campaign.sh poll [--budget-s N]     # device: wait up to 9 min, progress and results into $OUT
#   bash tools/gpu_campaign.sh collect DIR...          # here: examples/results/gpu_*.json and RESULTS rows
#   bash tools/gpu_campaign.sh STEP --help
#
# Runs with $PYTHON, else the project's .venv where there is one (here), else python3 (the device's). It runs
# `python -m fairseq_lexical_recipes.campaign` from the checkout, whose code is then the one imported (here, on the
# device where nothing of it is installed, in a copy); the program goes back to the caller's directory first thing
# (FL_CAMPAIGN_CALLER_DIR), so relative paths are the caller's.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PY="${PYTHON:-}"
if [[ -z "$PY" ]]; then
  if [[ -x "$ROOT/.venv/bin/python" ]]; then PY="$ROOT/.venv/bin/python"; else PY=python3; fi
fi
export FL_CAMPAIGN_CALLER_DIR="$PWD" PYTHONUNBUFFERED=1
cd "$ROOT"
exec "$PY" -m fairseq_lexical_recipes.campaign "$@"
