#!/usr/bin/env bash
# English-Chinese (Tatoeba, the paper's 19222/2402/2402 split): LSTM vs LSTM + lexical translation
# (Akyurek & Andreas 2021, section 5.4, Table 4), BLEU on the full test set and on its 1-shot subset.
# See examples/eng_cmn/README.md.
#
#   bash examples/eng_cmn/run.sh --data DIR [--seeds N] [--models ...] [--work DIR] [--max-update N] [--cpu-small]
#
# --data holds cmn.txt_{train,dev,test}_tokenized.tsv (ekinakyurek/lexical TRANSLATE/).
#
#   bash examples/eng_cmn/run.sh --help      # every option; the work is done by fairseq_lexical_recipes/ (python -m fairseq_lexical_recipes)
#
# prepare -> lexicons (tools/build_lexicon.py) -> fairseq-preprocess -> fairseq-train -> fairseq-generate ->
# tools/score.py, for each model and seed; then mean +/- std over seeds (a table, and WORK/summary.json).
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
VENV="$(bash "$ROOT/tools/setup_env.sh" | tail -n 1)"
exec "$VENV/bin/python" -m fairseq_lexical_recipes eng_cmn "$@"
