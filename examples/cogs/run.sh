#!/usr/bin/env bash
# COGS (Kim & Linzen 2020): LSTM, LSTM + copy, LSTM + lexical translation with each lexicon, and the Table 5
# ablations (Akyurek & Andreas 2021, section 5.3 and 5.5, Tables 2, 3, 5), exact match on gen overall and per
# category. See examples/cogs/README.md.
#
#   bash examples/cogs/run.sh --data DIR [--seeds N] [--models ...] [--gen gen.tsv] [--work DIR] [--max-update N]
#                             [--cpu-small|--cpu-medium] [--force]
#
# --data: najoungkim/COGS's data/ (train.tsv, dev.tsv, gen.tsv) or the checkout holding it.
#
#   bash examples/cogs/run.sh --help      # every option; the work is done by fairseq_lexical_recipes/ (python -m fairseq_lexical_recipes)
#
# prepare -> lexicons (tools/build_lexicon.py) -> fairseq-preprocess -> fairseq-train -> fairseq-generate ->
# tools/score.py, for each model and seed; then mean +/- std over seeds (a table, and WORK/summary.json).
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
VENV="$(bash "$ROOT/tools/setup_env.sh" | tail -n 1)"
exec "$VENV/bin/python" -m fairseq_lexical_recipes cogs "$@"
