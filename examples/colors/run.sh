#!/usr/bin/env bash
# Colors (Lake, Linzen & Baroni 2019): the plain LSTM and LSTM + lexical translation (Akyurek & Andreas 2021,
# section 5.1, appendix C.1), trained, decoded with beam 5 and scored by exact match, on CPU in a few minutes.
#
#   bash examples/colors/run.sh [--seeds N] [--data DIR] [--work DIR] [--lexicon FILE] [--max-update N]
#
# --data holds train.tsv and test.tsv ("input<TAB>OUTPUT"; default: the copy shipped in examples/colors/data).
# Settings are the paper's for Colors (and the authors' released scripts): 2x512 unidirectional LSTMs, dropout
# 0.4, extra dropout 0.5 before p_write, batch 5, Adam with the Noam schedule (lr 1.0 * 512^-0.5, i.e. a peak of
# 0.0047 after 89 warm-up updates, then inverse square root), clip 0.5, 560 updates. Colors has no validation
# set: the last checkpoint is used.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
SEEDS=1
DATA="$HERE/data"
WORK="${TMPDIR:-/tmp}/fairseq_lexical_colors"
LEXICON=""  # default: learned from the training set with the Simple rule (tools/build_lexicon.py)
MAX_UPDATE=560
while [[ $# -gt 0 ]]; do
  case "$1" in
    --seeds) SEEDS="$2"; shift 2 ;;
    --data) DATA="$2"; shift 2 ;;
    --work) WORK="$2"; shift 2 ;;
    --lexicon) LEXICON="$2"; shift 2 ;;
    --max-update) MAX_UPDATE="$2"; shift 2 ;;
    -h|--help) sed -n '2,12p' "$0"; exit 0 ;;
    *) echo "run.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
done
for f in "$DATA/train.tsv" "$DATA/test.tsv" ${LEXICON:+"$LEXICON"}; do
  [[ -f "$f" ]] || { echo "run.sh: $f not found" >&2; exit 2; }
done

VENV="$(bash "$ROOT/tools/setup_env.sh" | tail -n 1)"
source "$VENV/bin/activate"
export PYTHONWARNINGS="ignore"
mkdir -p "$WORK"
echo "== Colors: work directory $WORK"

python - "$DATA" "$WORK" <<'PY'
import sys
from fairseq_lexical.corpus import read_tsv_pairs, write_parallel
data, work = sys.argv[1:]
for split in ("train", "test"):
    write_parallel(f"{work}/{split}", read_tsv_pairs(f"{data}/{split}.tsv"))
PY
if [[ -z "$LEXICON" ]]; then
  LEXICON="$WORK/lexicon.simple.tsv"
  python "$ROOT/tools/build_lexicon.py" --method simple --tsv "$DATA/train.tsv" -o "$LEXICON" > "$WORK/lexicon.log" 2>&1 \
    || { cat "$WORK/lexicon.log" >&2; exit 1; }
  echo "== lexicon (Simple rule, section 4.2): $(grep -vc '^#' "$LEXICON") entries in $LEXICON"
fi
rm -rf "$WORK/bin"
fairseq-preprocess --source-lang src --target-lang tgt --trainpref "$WORK/train" --validpref "$WORK/train" \
  --testpref "$WORK/test" --destdir "$WORK/bin" --workers 1 > "$WORK/preprocess.log" 2>&1

train_and_score() {  # $1 = name, $2 = seed, rest = model options
  local name="$1" seed="$2"; shift 2
  local out="$WORK/$name/seed$seed"
  rm -rf "$out"; mkdir -p "$out"
  fairseq-train "$WORK/bin" --user-dir "$ROOT/fairseq_lexical" "$@" \
    --criterion lexical_cross_entropy --optimizer adam --lr 0.0047 --lr-scheduler inverse_sqrt \
    --warmup-updates 89 --clip-norm 0.5 --batch-size 5 --required-batch-size-multiple 1 \
    --max-update "$MAX_UPDATE" --write-dropout 0.5 --disable-validation --save-dir "$out" \
    --no-epoch-checkpoints --save-interval 100000 --seed "$seed" --log-format simple --log-interval 100 \
    --num-workers 0 \
    > "$out/train.log" 2>&1 || { tail -20 "$out/train.log" >&2; return 1; }
  fairseq-generate "$WORK/bin" --user-dir "$ROOT/fairseq_lexical" --path "$out/checkpoint_last.pt" \
    --gen-subset test --beam 5 --batch-size 32 > "$out/generate.txt" 2> "$out/generate.log" \
    || { tail -20 "$out/generate.log" >&2; return 1; }
  python "$ROOT/tools/score.py" "$out/generate.txt" --reference "$WORK/test.tgt" --json > "$out/score.json"
  python -c "import json,sys; print(json.load(open(sys.argv[1]))['exact_match'])" "$out/score.json"
}

declare -A RESULTS
for seed in $(seq 1 "$SEEDS"); do
  for model in lstm lex_simple; do
    start=$SECONDS
    if [[ $model == lstm ]]; then
      acc=$(train_and_score lstm "$seed" --arch lstm_plain)
    else
      acc=$(train_and_score lex_simple "$seed" --arch lex_lstm --lexicon "$LEXICON")
    fi
    echo "seed $seed  $model  exact match $acc  ($((SECONDS - start)) s)"
    RESULTS[$model]+="$acc "
  done
done

echo
echo "== Colors test exact match over $SEEDS seed(s) (paper, Table 2: LSTM 0.00 +/- 0.00; LSTM + Lex. Simple 0.79 +/- 0.02)"
for model in lstm lex_simple; do
  python - "$model" ${RESULTS[$model]} <<'PY'
import statistics, sys
name, values = sys.argv[1], [float(v) for v in sys.argv[2:]]
std = statistics.pstdev(values) if len(values) > 1 else 0.0
label = {"lstm": "LSTM (--arch lstm_plain)", "lex_simple": "LSTM + Lex.: Simple (--arch lex_lstm)"}[name]
print(f"{label:<40} {statistics.mean(values):.2f} +/- {std:.2f}")
PY
done
