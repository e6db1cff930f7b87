#!/usr/bin/env python
"""Training benchmark of a plugin model against the stock fairseq model of the same sizes (one process run).

    python tools/bench.py lstm [--hidden 512 --layers 2 --vocab 8000 --batch-size 64 --steps 10 ...]
    python tools/bench.py transformer [--hidden 256 --layers 3 --heads 4 --ffn 1024 --vocab 8000 --batch-size 32 ...]
    # the paper's PGN sizes (Bafna & Yarowsky 2024: 6 + 6 layers, 4 heads, 512, tokenizer of 16000):
    python tools/bench.py transformer --hidden 512 --layers 6 --heads 4 --ffn 1024 --vocab 16000 --batch-size 64
    # R-Dangle at several re-encoding intervals (+ the per-prefix loop for o = 1) against fairseq's transformer:
    python tools/bench.py rdangle [--intervals 1,2,4,8,16,once --tgt-len 32 --hidden 64 --layers 2 ...]

Prints tokens/s, activation and static memory of both models and their ratios (see tools/benchmarking.py for
what is measured); `transformer` and `rdangle` add beam-search sentences/s. Defaults differ by model (shown by
--help as 'lstm / transformer / rdangle'); the transformer and rdangle defaults are small, for a quick CPU check.
Results and the commands that made them are kept in docs/benchmarks.md (rdangle: docs/rdangle.md).
"""

import argparse
import os
import platform
import sys


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model", choices=["lstm", "transformer", "rdangle"], help="which comparison to run")
    parser.add_argument("--hidden", type=int, default=None, help="512 / 256 / 64")
    parser.add_argument("--layers", type=int, default=None, help="2 / 3 / 2 (encoder and decoder each)")
    parser.add_argument("--heads", type=int, default=4, help="transformer: attention heads")
    parser.add_argument("--ffn", type=int, default=None, help="transformer: feed-forward size (default 4 x hidden)")
    parser.add_argument(
        "--vocab",
        type=int,
        default=8000,
        help="vocabulary size (lstm: source and target each; transformer: the joined dictionary)",
    )
    parser.add_argument(
        "--top-k",
        type=int,
        default=1,
        help="lexicon targets per source word (lstm: 1 = tau 0; transformer: 1 = identity lexicon)",
    )
    parser.add_argument("--batch-size", type=int, default=None, help="64 / 32 / 8")
    parser.add_argument("--src-len", type=int, default=20)
    parser.add_argument("--tgt-len", type=int, default=None, help="20 / 20 / 32")
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's choice)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--tf32", action="store_true", help="TF32 matrix products on CUDA, for every model compared (no effect on CPUs)"
    )
    parser.add_argument(
        "--profile",
        metavar="PATH",
        help="also write torch.profiler tables of a few training steps of each model to PATH",
    )
    parser.add_argument(
        "--plain",
        action="store_true",
        help="also time the plugin's model without a lexicon (--lexicon none): lstm, lex_lstm's decoder loop alone; "
        "transformer, lex_transformer's classes without the head, which bounds the harness' own bias",
    )
    lstm = parser.add_argument_group("lstm")
    lstm.add_argument(
        "--decoder-output",
        choices=["luong", "combined"],
        default="luong",
        help="lex_lstm's --decoder-output (combined: the authors' decoder, the recipes' LSTM rows)",
    )
    lstm.add_argument(
        "--count-ops",
        action="store_true",
        help="also count the aten operations of one training step of each model (host-side work, "
        "mostly kernel launches on a GPU)",
    )
    gen = parser.add_argument_group("generation (transformer, rdangle)")
    gen.add_argument("--beam", type=int, default=5)
    gen.add_argument("--gen-batches", type=int, default=2, help="0 skips the generation benchmark")
    gen.add_argument("--gen-batch-size", type=int, default=16, help="sentences per generation batch")
    gen.add_argument("--gen-rounds", type=int, default=2, help="timed passes over the generation batches")
    rd = parser.add_argument_group("rdangle")
    rd.add_argument(
        "--intervals",
        default="1,2,4,8,16,once",
        help="re-encoding intervals to compare ('once': o = the target length)",
    )
    rd.add_argument("--kv-mode", default="shared", choices=["shared", "sep"])
    rd.add_argument("--chunk-size", type=int, default=0, help="--reencode-chunk-size of the R-Dangle models")
    rd.add_argument("--buckets", type=int, default=4, help="--reencode-buckets of the R-Dangle models")
    rd.add_argument(
        "--relative-positions",
        type=int,
        default=None,
        help="--relative-positions K of the R-Dangle models (default: the architecture's, 15; 0: absolute)",
    )
    rd.add_argument(
        "--relative-form",
        choices=["dangle", "shaw"],
        default=None,
        help="--relative-form of the R-Dangle models (default: the architecture's, dangle)",
    )
    rd.add_argument(
        "--peak-memory",
        action="store_true",
        help="also measure each model's peak step memory with torch's profiler (CPU; slow)",
    )
    rd.add_argument(
        "--no-naive", dest="naive", action="store_false", help="leave out the per-prefix loop reference (o = 1)"
    )
    opts = parser.parse_args(argv)
    defaults = {
        "lstm": dict(hidden=512, layers=2, batch_size=64, tgt_len=20),
        "transformer": dict(hidden=256, layers=3, batch_size=32, tgt_len=20),
        "rdangle": dict(hidden=64, layers=2, batch_size=8, tgt_len=32),
    }
    for name, value in defaults[opts.model].items():
        if getattr(opts, name) is None:
            setattr(opts, name, value)
    if opts.ffn is None:
        opts.ffn = 4 * opts.hidden

    import torch

    import benchmarking as benchmark  # tools/benchmarking.py, beside this script

    if opts.threads:
        torch.set_num_threads(opts.threads)
    if opts.tf32:
        from fairseq_lexical.modules.precision import enable_tf32

        enable_tf32()
    print(
        f"# {platform.processor() or platform.machine()}, {os.cpu_count()} cores, torch {torch.__version__}, "
        f"{torch.get_num_threads()} threads, device {opts.device}"
    )
    print("# " + " ".join(sys.argv))
    bench = {
        "lstm": benchmark.bench_lstm,
        "transformer": benchmark.bench_transformer,
        "rdangle": benchmark.bench_rdangle,
    }[opts.model]
    table = bench(opts, progress=lambda msg: print(msg, file=sys.stderr))
    print(table)


if __name__ == "__main__":
    main()
