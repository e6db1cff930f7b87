#!/usr/bin/env bash
# Your own parallel data in one command: lexicons (default Simple and IBM Model 2), a baseline and a lexical model
# per lexicon (LSTM or Transformer), decoding, exact match / BLEU / chrF, and a report folder (summary table,
# lexicon heatmaps, learning curves, the page that shows why each output word was chosen).
# See examples/custom/README.md.
#
#   bash examples/custom/run.sh --train DATA/train --test DATA/test [--valid DATA/valid]     # PREFIX.src/.tgt
#   bash examples/custom/run.sh --train train.tsv --test test.tsv --family transformer --cpu  # TSV files
#   bash examples/custom/run.sh --train ... --test ... --smoke       # checks the whole pipeline in about a minute
#   bash examples/custom/run.sh --help      # every option; the work is done by examples/custom/run.py
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
VENV="$(bash "$ROOT/tools/setup_env.sh" | tail -n 1)"
exec "$VENV/bin/python" "$ROOT/examples/custom/run.py" "$@"
