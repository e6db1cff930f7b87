#!/usr/bin/env bash
# The checks that need a CUDA GPU, in one go (docs/benchmarks.md, "On a CUDA GPU"): the suite's cuda cases, the
# speed comparisons against stock fairseq, and the mixed-precision runs of every architecture. Logs and tables go to
# OUT; each step prints its table last.
#
#   bash tools/gpu_checks.sh OUT [suite] [bench] [precision]   # default: all three, in that order
#        [--data DIR]      SCAN data for the precision runs (default ../shared/data/scan)
#        [--jobs N]        precision runs at a time per precision (default 6; two precisions run at once)
#        [--dry-run]       print the commands only
#
# Runs with the python3 on PATH (PYTHON=... for another), which needs a CUDA build of torch, fairseq-fixed and this
# checkout's requirements; the checkout itself is put on PYTHONPATH.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PY="${PYTHON:-python3}"
usage() { sed -n '2,12p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; }
[[ $# -ge 1 && "$1" != -* ]] || { usage >&2; exit 2; }
OUT="$1"; shift
STEPS=() DATA="$ROOT/../shared/data/scan" JOBS=6 DRY=0
while [[ $# -gt 0 ]]; do
  case "$1" in
    suite|bench|precision) STEPS+=("$1"); shift ;;
    --data) DATA="$2"; shift 2 ;;
    --jobs) JOBS="$2"; shift 2 ;;
    --dry-run) DRY=1; shift ;;
    -h|--help) usage; exit 0 ;;
    *) echo "gpu_checks.sh: unknown argument $1 (steps: suite, bench, precision)" >&2; exit 2 ;;
  esac
done
[[ ${#STEPS[@]} -gt 0 ]] || STEPS=(suite bench precision)
export PYTHONPATH="$ROOT/examples:$ROOT${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
exec 3>&1  # the commands are echoed there, whatever a step redirects
run() { echo "+ $*" >&3; [[ $DRY == 1 ]] || "$@"; }
out() { [[ $DRY == 1 ]] && echo /dev/null || echo "$OUT/$1"; }  # where a step's log goes (nowhere in a dry run)

if [[ $DRY == 0 ]]; then
  "$PY" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" 2>/dev/null \
    || { echo "gpu_checks.sh: $PY's torch sees no CUDA device; these checks need one" >&2; exit 3; }
  mkdir -p "$OUT"
  "$PY" -c "import torch, fairseq; print('torch', torch.__version__, torch.cuda.get_device_name(0), 'fairseq', fairseq.__version__)" \
    | tee "$OUT/device.txt"
fi
cd "$ROOT"

for step in "${STEPS[@]}"; do
  case "$step" in
  suite)
    # the cases of the device fixture (tests/conftest.py), several workers where pytest-xdist is installed
    workers=(); "$PY" -c "import xdist" 2>/dev/null && workers=(-n 4)
    run "$PY" -m pytest -p no:cacheprovider -q -rfE "${workers[@]}" -k cuda tests/test_lexical_head.py \
      tests/test_lex_lstm.py tests/test_lex_transformer.py tests/test_lla_lstm.py tests/test_rdangle.py \
      tests/test_mixed_precision.py tests/test_plot_gates.py 2>&1 | tee "$(out suite.txt)"
    ;;
  bench)
    # one process per comparison; the R-Dangle ones apart, so that o = 1's and the loop's activations (tens of GB)
    # do not make the allocator release memory under the other models
    B=("$PY" tools/bench.py)
    T=(--hidden 512 --layers 6 --heads 8 --ffn 2048 --vocab 32000 --batch-size 128 --src-len 32 --tgt-len 32
       --steps 20 --warmup 3 --device cuda --gen-batches 4 --gen-batch-size 64 --gen-rounds 3)
    R=(--hidden 512 --layers 6 --heads 4 --ffn 1024 --vocab 8000 --batch-size 32 --src-len 32 --tgt-len 64
       --warmup 2 --device cuda --gen-batches 2 --gen-batch-size 32 --gen-rounds 2)
    export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True
    {
      run "${B[@]}" lstm --hidden 512 --layers 2 --vocab 32000 --batch-size 512 --top-k 8 --steps 20 --warmup 3 \
        --device cuda --profile "$(out profile_lstm.txt)"
      run "${B[@]}" transformer "${T[@]}" --top-k 1 --profile "$(out profile_pgn.txt)"
      run "${B[@]}" transformer "${T[@]}" --top-k 8
      run "${B[@]}" rdangle "${R[@]}" --intervals 1 --steps 6 --gen-batches 0
      run "${B[@]}" rdangle "${R[@]}" --intervals 1,8 --steps 10 --no-naive --profile "$(out profile_rdangle.txt)"
    } 2>"$(out bench.log)" | tee "$(out bench.txt)"
    ;;
  precision)
    # every architecture at --cpu-small sizes, 500 updates of SCAN jump, fp32 / fp16 / amp / bf16 from one seed
    M=simple,lex_transformer,pgn,lla,rdangle_shr,rdangle_sep
    L=(--lla-lexicon-epochs 1 --lla-max-epoch 2 --lla-lexicon-batch-size 64 --lla-batch-size 64 --lla-checkpoint last)
    one() { run "$PY" -m recipes scan --data "$DATA" --split jump --cpu-small --models $M --max-update 500 --beam 5 \
              --patience 0 "${L[@]}" --jobs "$JOBS" --keep-checkpoints none --work "$OUT/prec_$1" "${@:2}" \
              > "$(out "prec_$1.log")" 2>&1; }
    if [[ $DRY == 1 ]]; then
      one fp32; one fp16 --train-args=--fp16 --generate-args=--fp16; one amp --train-args=--amp
      one bf16 --train-args=--bf16
    else
      one fp32 & one fp16 --train-args=--fp16 --generate-args=--fp16 & wait
      one amp --train-args=--amp & one bf16 --train-args=--bf16 & wait
    fi
    run "$PY" -m recipes.precision fp32="$OUT/prec_fp32" fp16="$OUT/prec_fp16" amp="$OUT/prec_amp" \
      bf16="$OUT/prec_bf16" --json "$OUT/precision.json" | tee "$(out precision.md)"
    ;;
  esac
done
