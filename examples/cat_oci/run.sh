#!/usr/bin/env bash
# Catalan -> Occitan (Tatoeba, 5,500 pairs, Occitan side machine-translated): NMT vs PGN vs PGN + lexicon at
# 1k / 2.5k / 5k training pairs with a joint SentencePiece model, BLEU and chrF (Bafna & Yarowsky 2024, section 4).
# See examples/cat_oci/README.md.
#
#   bash examples/cat_oci/run.sh [--cpu-small] [--cpu] [--sizes 1000,2500,5000] [--systems nmt,pgn,pgn_lex] [--work DIR]
#   bash examples/cat_oci/run.sh --help      # every option; the work is done by examples/cat_oci/run.py
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
VENV="$(bash "$ROOT/tools/setup_env.sh" | tail -n 1)"
exec "$VENV/bin/python" "$ROOT/examples/cat_oci/run.py" "$@"
