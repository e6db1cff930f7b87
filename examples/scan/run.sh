#!/usr/bin/env bash
# SCAN (Lake & Baroni 2018), jump and around_right splits: LSTM vs LSTM + lexical translation with each
# lexicon (Akyurek & Andreas 2021, section 5.2, Table 2, appendix C.1), exact match. See examples/scan/README.md.
#
#   bash examples/scan/run.sh --data DIR [--split jump|around_right] [--seeds N] [--models ...] [--work DIR]
#                             [--max-update N] [--cpu-small|--cpu-medium] [--force]
#
# --data: a brendenlake/SCAN checkout (add_prim_split/, template_split/) or a directory with the task files.
#
#   bash examples/scan/run.sh --help      # every option; the work is done by fairseq_lexical_recipes/ (python -m fairseq_lexical_recipes)
#
# prepare -> lexicons (tools/build_lexicon.py) -> fairseq-preprocess -> fairseq-train -> fairseq-generate ->
# tools/score.py, for each model and seed; then mean +/- std over seeds (a table, and WORK/summary.json).
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
VENV="$(bash "$ROOT/tools/setup_env.sh" | tail -n 1)"
exec "$VENV/bin/python" -m fairseq_lexical_recipes scan "$@"
