#!/usr/bin/env bash
# A measured low-resource fine-tuning case (issue 72, item 4): a small stock fairseq Transformer pretrained on most of
# the English-Chinese training data (a stand-in for a real pretrained model), fine-tuned on a 1,000-pair slice
# holding new-domain words: plain, pgn_transformer (copy), lex_transformer (IBM Model 1 lexicon). See
# examples/pretrained/README.md.
#
#   bash examples/eng_cmn/run.sh --data ../shared/data/eng_cmn --cpu-small --models ibm1 --prepare-only --work BASE
#   bash examples/pretrained/run.sh --prepared BASE --work WORK [--seeds 3] [--dry-run]
#   bash examples/pretrained/run.sh --help      # every option; the work is done by examples/pretrained/run.py
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
VENV="$(bash "$ROOT/tools/setup_env.sh" | tail -n 1)"
exec "$VENV/bin/python" "$ROOT/examples/pretrained/run.py" "$@"
