#!/usr/bin/env bash
# A compositional test set for English-Chinese (Zheng & Lapata 2023, section 4, on the Tatoeba data of Akyurek &
# Andreas 2021): candidates = the pairs not in train (dev + test) -> OOV filter + compositional degree -> the
# uncertainty of an ensemble of small models trained on train -> drop the most uncertain, sample from the next
# -> BLEU of LSTM, LSTM + Lex. (Simple) and R-Dangle on it and on the standard test set. See README.md here.
#
#   bash examples/compositional_split/run.sh [--data DIR] [--work DIR] [--members K] [--sample N] ...
#   bash examples/compositional_split/run.sh --help      # every option; the work is done by split.py here
#
# --data (default ../shared/data/eng_cmn next to the repository) holds cmn.txt_{train,dev,test}_tokenized.tsv.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
VENV="$(bash "$ROOT/tools/setup_env.sh" | tail -n 1)"
exec "$VENV/bin/python" "$HERE/split.py" "$@"
