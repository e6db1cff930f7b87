#!/usr/bin/env python
"""Training benchmark of a plugin model against the stock fairseq model of the same sizes (one process run).

    python tools/bench.py lstm [--hidden 512 --layers 2 --vocab 8000 --batch-size 64 --steps 10 ...]

Prints tokens/s, activation and static memory of both models and their ratios (see fairseq_lexical/benchmark.py
for what is measured). Results and the commands that made them are kept in docs/benchmarks.md.
"""
import argparse
import os
import platform
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model", choices=["lstm"], help="which comparison to run")
    parser.add_argument("--hidden", type=int, default=512)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--vocab", type=int, default=8000, help="source and target vocabulary size each")
    parser.add_argument("--top-k", type=int, default=1, help="lexicon targets per source word (1 = tau 0)")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--src-len", type=int, default=20)
    parser.add_argument("--tgt-len", type=int, default=20)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's choice)")
    parser.add_argument("--seed", type=int, default=1)
    opts = parser.parse_args(argv)

    import torch

    from fairseq_lexical import benchmark

    if opts.threads:
        torch.set_num_threads(opts.threads)
    print(f"# {platform.processor() or platform.machine()}, {os.cpu_count()} cores, torch {torch.__version__}, "
          f"{torch.get_num_threads()} threads, device {opts.device}")
    print("# " + " ".join(sys.argv))
    table = benchmark.bench_lstm(opts, progress=lambda msg: print(msg, file=sys.stderr))
    print(table)


if __name__ == "__main__":
    main()
