#!/usr/bin/env bash
# Colors (Lake, Linzen & Baroni 2019): plain LSTM vs LSTM + lexical translation (Akyurek & Andreas 2021,
# section 5.1, Table 2, appendix C.1), exact match on the 10 test pairs. See examples/colors/README.md.
#
#   bash examples/colors/run.sh [--seeds N] [--models lstm,simple,...|paper|all] [--data DIR] [--work DIR]
#                               [--lexicon FILE] [--max-update N] [--cpu-small] [--force]
#
# --data holds train.tsv and test.tsv (default: the copy in examples/colors/data). Default models: lstm,simple;
# --models paper adds the other rows of Table 2 (pmi, ibm2, ibm1, bayes).
#
#   bash examples/colors/run.sh --help      # every option; the work is done by fairseq_lexical_recipes/ (python -m fairseq_lexical_recipes)
#
# prepare -> lexicons (tools/build_lexicon.py) -> fairseq-preprocess -> fairseq-train -> fairseq-generate ->
# tools/score.py, for each model and seed; then mean +/- std over seeds (a table, and WORK/summary.json).
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
VENV="$(bash "$ROOT/tools/setup_env.sh" | tail -n 1)"
exec "$VENV/bin/python" -m fairseq_lexical_recipes colors "$@"
