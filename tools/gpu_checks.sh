#!/usr/bin/env bash
# The checks that need a CUDA GPU, in one go (docs/benchmarks.md, "On a CUDA GPU"; docs/gpu.md): that a run stopped
# beside graph-captured runs under MPS harms none of them, the suite's cuda cases, the speed comparisons against
# stock fairseq, eager training against --cuda-graphs, seeds stacked in one process (--replica-seeds) against a run
# alone, and the mixed-precision runs of every architecture. Each step
# runs whatever the one before did: a failing test or a failed run is reported in OUT/status.json (with the device)
# and the exit status, and the next step still runs. OUT receives at most 8 files, none in subfolders (what a device
# call returns): status.json, lease.json, suite.txt, bench.txt (the benchmarks' output and log, then the replicas'),
# profiles.txt, graphs.json, precision.md, precision.json; the precision runs' work trees go to --scratch, and a
# failed run's log tail to status.json.
#
#   bash tools/gpu_checks.sh OUT [lease] [suite] [bench] [graphs] [replicas] [precision]   # default: all six
#        [--data DIR]      SCAN data for the precision runs (default ../shared/data/scan)
#        [--jobs N]        precision runs at a time per precision (default 6; two precisions run at once)
#        [--scratch DIR]   where the precision runs' work trees go (default: a new folder under $TMPDIR or /tmp)
#        [--dry-run]       print the commands only
#
# Runs with the python3 on PATH (PYTHON=... for another), which needs a CUDA build of torch, fairseq-fixed and this
# checkout installed with its requirements (on the lent device: the campaign's installation, docs/gpu.md). The steps
# run from the checkout (`python -m` imports its code); OUT, --data and --scratch are the caller's paths.
set -uo pipefail  # not -e: a failed step is recorded (status.json) and the next runs
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PY="${PYTHON:-python3}"
usage() { sed -n '2,20p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; }
absolute() { [[ "$1" == /* ]] && echo "$1" || echo "$PWD/$1"; }  # a path of the caller's, before `cd "$ROOT"`
[[ $# -ge 1 && "$1" != -* ]] || { usage >&2; exit 2; }
OUT="$(absolute "$1")"; shift
STEPS=() DATA="$ROOT/../shared/data/scan" JOBS=6 DRY=0 SCRATCH=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    lease|suite|bench|graphs|replicas|precision) STEPS+=("$1"); shift ;;
    --data) DATA="$(absolute "$2")"; shift 2 ;;
    --jobs) JOBS="$2"; shift 2 ;;
    --scratch) SCRATCH="$(absolute "$2")"; shift 2 ;;
    --dry-run) DRY=1; shift ;;
    -h|--help) usage; exit 0 ;;
    *) echo "gpu_checks.sh: unknown argument $1 (steps: lease, suite, bench, graphs, replicas, precision)" >&2; exit 2 ;;
  esac
done
[[ ${#STEPS[@]} -gt 0 ]] || STEPS=(lease suite bench graphs replicas precision)
export PYTHONUNBUFFERED=1
exec 3>&1  # the commands are echoed there, whatever a step redirects
run() { echo "+ $*" >&3; [[ $DRY == 1 ]] || "$@"; }
out() { [[ $DRY == 1 ]] && echo /dev/null || echo "$OUT/$1"; }  # where a step's log goes (nowhere in a dry run)
scratch() { [[ $DRY == 1 ]] && echo /dev/null || echo "$SCRATCH/$1"; }  # what does not go back (work trees, logs)

[[ -n "$SCRATCH" ]] || SCRATCH="${TMPDIR:-/tmp}/gpu_checks.$$"
if [[ $DRY == 0 ]]; then
  "$PY" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" 2>/dev/null \
    || { echo "gpu_checks.sh: $PY's torch sees no CUDA device; these checks need one" >&2; exit 3; }
  mkdir -p "$OUT" "$SCRATCH"
  DEVICE="$("$PY" -c "import torch, fairseq; print('torch', torch.__version__, torch.cuda.get_device_name(0), 'fairseq', fairseq.__version__)")"
  echo "$DEVICE"
fi
cd "$ROOT"
FAILED=()   # "step: what" for each failure; status.json lists them with their log tails
fail() { FAILED+=("$1"); echo "gpu_checks.sh: FAILED: $1" >&2; }

for step in "${STEPS[@]}"; do
  case "$step" in
  lease)
    # three graph-captured SCAN runs under MPS, the first asked to stop after 50 updates: it must leave at a step
    # boundary and the two others finish (tools/lease_check.py; about a minute). What a lease proves before its
    # runs use graphs: on 2026-11-28 stopping runs by signal took the others down
    run "$PY" tools/lease_check.py stop "$(out lease.json)" 2>"$(scratch lease.log)"
    code=$?; [[ $code == 0 ]] || fail "lease: a stopped run harmed the others or did not stop, exit $code (lease.json)"
    ;;
  suite)
    # the cases of the device fixture (tests/conftest.py), several workers where pytest-xdist is installed
    workers=(); "$PY" -c "import xdist" 2>/dev/null && workers=(-n 4)
    run "$PY" -m pytest -p no:cacheprovider -q -rfE "${workers[@]}" -k cuda tests/plugin/test_lexical_head.py \
      tests/plugin/test_lexical_head_models.py \
      tests/plugin/test_lex_lstm.py tests/plugin/test_lstm_loop.py tests/plugin/test_lex_transformer.py tests/plugin/test_lla_lstm.py \
      tests/plugin/test_rdangle.py \
      tests/plugin/test_mixed_precision.py tests/plugin/test_plot_gates.py 2>&1 | tee "$(out suite.txt)"
    code=${PIPESTATUS[0]}; [[ $code == 0 ]] || fail "suite: pytest exit $code (suite.txt)"
    ;;
  bench)
    # one process per comparison; the R-Dangle ones apart, so that o = 1's and the loop's activations (tens of GB)
    # do not make the allocator release memory under the other models
    B=("$PY" tools/bench.py)
    T=(--hidden 512 --layers 6 --heads 8 --ffn 2048 --vocab 32000 --batch-size 128 --src-len 32 --tgt-len 32
       --steps 20 --warmup 3 --device cuda --gen-batches 4 --gen-batch-size 64 --gen-rounds 8)
    R=(--hidden 512 --layers 6 --heads 4 --ffn 1024 --vocab 8000 --batch-size 32 --src-len 32 --tgt-len 64
       --warmup 2 --device cuda --gen-batches 2 --gen-batch-size 32 --gen-rounds 2)
    export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True
    bench() {  # one comparison; its failure is recorded and the next one runs
      local name="$1"; shift
      run "${B[@]}" "$@" 2>>"$(scratch bench.log)" | tee -a "$(out bench.txt)"
      local code=${PIPESTATUS[0]}; [[ $code == 0 ]] || fail "bench: $name exit $code"
    }
    bench lstm lstm --hidden 512 --layers 2 --vocab 32000 --batch-size 512 --top-k 8 --steps 20 --warmup 3 \
      --device cuda --plain --count-ops --profile "$(scratch profile_lstm.txt)"
    bench lstm_tf32 lstm --hidden 512 --layers 2 --vocab 32000 --batch-size 512 --top-k 8 --steps 20 --warmup 3 \
      --device cuda --plain --tf32
    # the paper's SCAN shapes (2 x 512, batch 128, the authors' combined output), without and with TF32
    S=(--hidden 512 --layers 2 --vocab 32 --batch-size 128 --src-len 9 --tgt-len 15 --decoder-output combined
       --steps 40 --warmup 5 --device cuda --plain)
    bench lstm_scan lstm "${S[@]}" --count-ops
    bench lstm_scan_tf32 lstm "${S[@]}" --tf32
    # --plain: lex_transformer without its head beside it, so that the head's cost is read net of the harness'
    bench pgn transformer "${T[@]}" --top-k 1 --plain --profile "$(scratch profile_pgn.txt)"
    bench lex_transformer transformer "${T[@]}" --top-k 8
    bench rdangle_o1 rdangle "${R[@]}" --intervals 1 --steps 6 --gen-batches 0
    bench rdangle rdangle "${R[@]}" --intervals 1,8 --steps 10 --no-naive --profile "$(scratch profile_rdangle.txt)"
    if [[ $DRY == 0 ]]; then  # two files, not five: the log after the tables, the profiles in one
      { echo; echo "== stderr of the benchmarks"; cat "$SCRATCH/bench.log" 2>/dev/null; } >> "$OUT/bench.txt"
      for p in lstm pgn rdangle; do
        [[ -f "$SCRATCH/profile_$p.txt" ]] && { echo "== profile_$p"; cat "$SCRATCH/profile_$p.txt"; }
      done > "$OUT/profiles.txt"
    fi
    ;;
  graphs)
    # eager training against --cuda-graphs at SCAN's and COGS' shapes, the paper's sizes, TF32 on both: the losses of
    # the first 50 updates, updates/s, memory (tools/cuda_graph_check.py; a minute or two); failed where not passed
    run "$PY" tools/cuda_graph_check.py "$(out graphs.json)" 2>"$(scratch graphs.log)"
    code=$?
    if [[ $code != 0 ]]; then fail "graphs: exit $code ($(tail -n 3 "$SCRATCH/graphs.log" 2>/dev/null | tr '\n' ' '))"
    elif [[ $DRY == 0 ]] && ! "$PY" -c "import json, sys; sys.exit(not json.load(open(sys.argv[1]))['passed'])" \
        "$OUT/graphs.json"; then fail "graphs: not passed (graphs.json)"; fi
    ;;
  replicas)
    # SCAN's paper shapes (lex_lstm 2 x 512, the authors' combined output, batch 128 x 4 accumulated, TF32) with
    # R = 1, 5, 10, 20 seeds stacked in one process (--replica-seeds) against one run alone, eager and with
    # --cuda-graphs: updates/s in all and per replica, peak memory (tools/replica_bench.py; a few minutes). The goal
    # of the next lease: 300 updates/s in all (the SCAN table's 20 runs of 8,000 updates inside one lease)
    P=(--arch lex_lstm --decoder-output combined --embedding-init normal --lexicon identity --criterion
       lexical_cross_entropy --sentence-avg --optimizer adam --adam-betas "(0.9, 0.998)" --lr 0.00049 --lr-scheduler
       inverse_sqrt --warmup-updates 4000 --clip-norm 5 --batch-size 128 --update-freq 4 --tf32)
    for mode in eager graphs; do
      extra=(); [[ $mode == graphs ]] && extra=(--cuda-graphs)
      [[ $DRY == 1 ]] || { echo; echo "== replicas, $mode (tools/replica_bench.py)"; } >> "$OUT/bench.txt"
      run "$PY" tools/replica_bench.py "$(scratch replicas_bin)" --scan "$DATA" --replicas 1,5,10,20 \
        --modes sequential,together --sequential-once --updates 60 --warmup 15 \
        --output "$(scratch "replicas_$mode.json")" -- "${P[@]}" "${extra[@]}" 2>"$(scratch "replicas_$mode.log")" \
        | tee -a "$(out bench.txt)"
      code=${PIPESTATUS[0]}; [[ $code == 0 ]] || fail "replicas ($mode): exit $code ($(tail -n 3 \
        "$SCRATCH/replicas_$mode.log" 2>/dev/null | tr '\n' ' '))"
      [[ $DRY == 1 ]] || cat "$SCRATCH/replicas_$mode.json" >> "$OUT/bench.txt" 2>/dev/null
    done
    ;;
  precision)
    # every architecture at --cpu-small sizes, 500 updates of SCAN jump, fp32 / fp16 / amp / bf16 from one seed
    M=simple,lex_transformer,pgn,lla,rdangle_shr,rdangle_sep
    L=(--lla-lexicon-epochs 1 --lla-max-epoch 2 --lla-lexicon-batch-size 64 --lla-batch-size 64 --lla-checkpoint last)
    one() { run "$PY" -m fairseq_lexical_recipes scan --data "$DATA" --split jump --cpu-small --models $M --max-update 500 --beam 5 \
              --patience 0 "${L[@]}" --jobs "$JOBS" --keep-checkpoints none --work "$SCRATCH/prec_$1" "${@:2}" \
              > "$(scratch "prec_$1.log")" 2>&1; }
    # each precision's exit status, waited for one by one (a bare `wait` returns 0 whatever they did)
    check() { local code=0; wait "$2" || code=$?; [[ $code == 0 ]] || fail "precision $1: exit $code ($(tail -n 3 \
      "$SCRATCH/prec_$1.log" 2>/dev/null | tr '\n' ' '))"; }
    if [[ $DRY == 1 ]]; then
      one fp32; one fp16 --train-args=--fp16 --generate-args=--fp16; one amp --train-args=--amp
      one bf16 --train-args=--bf16
    else
      one fp32 & p1=$!; one fp16 --train-args=--fp16 --generate-args=--fp16 & p2=$!
      check fp32 $p1; check fp16 $p2
      one amp --train-args=--amp & p1=$!; one bf16 --train-args=--bf16 & p2=$!
      check amp $p1; check bf16 $p2
    fi
    run "$PY" -m fairseq_lexical_recipes.precision fp32="$SCRATCH/prec_fp32" fp16="$SCRATCH/prec_fp16" amp="$SCRATCH/prec_amp" \
      bf16="$SCRATCH/prec_bf16" --json "$(out precision.json)" | tee "$(out precision.md)"
    code=${PIPESTATUS[0]}; [[ $code == 0 ]] || fail "precision: the table, exit $code"
    ;;
  esac
done

# what failed, for whoever reads OUT (the 8-file rule: this is the only file besides the steps' own)
if [[ $DRY == 0 ]]; then
  "$PY" - "$OUT/status.json" "$DEVICE" "${FAILED[@]+"${FAILED[@]}"}" <<'PY'
import json, sys
json.dump({"device": sys.argv[2], "failed": sys.argv[3:], "ok": not sys.argv[3:]}, open(sys.argv[1], "w"), indent=2)
PY
fi
if [[ ${#FAILED[@]} -gt 0 ]]; then
  echo "gpu_checks.sh: ${#FAILED[@]} step(s) failed:" >&2; printf '  %s\n' "${FAILED[@]}" >&2; exit 1
fi
