#!/usr/bin/env python
"""Updates per second of R seeds' runs trained three ways: stacked in one process (`--replica-seeds`), one after the
other, and R processes at once; the same fairseq-train options and data for all (docs/benchmarks.md, "Replicas").

    python tools/replica_bench.py DATA_BIN --replicas 1,4 [--modes together,sequential,concurrent]
        [--updates 60] [--warmup 10] [--output results.json] -- FAIRSEQ-TRAIN OPTIONS (arch, batch, ...)

Each run is fairseq-train in a process of its own with validation and checkpoints off; the time is taken between
its optimizer steps (after --warmup steps), so start-up and data loading before the first step are left out.
Reported per (mode, R): updates/s in all (every replica's updates per second of wall time), per replica, and the
ratio to the runs one after the other; on a CUDA device each process's peak memory. Processes get
OMP_NUM_THREADS=1 unless the environment sets it.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

from lexical_offline.textio import read_pairs, write_parallel

_CHILD = r"""
import json, sys, time, torch
import fairseq_lexical
from torch.optim.optimizer import register_optimizer_step_post_hook
from fairseq_cli import train
times = []
register_optimizer_step_post_hook(lambda *a: times.append(time.perf_counter()))
sys.argv = ["fairseq-train"] + json.loads(sys.argv[1])
warmup = int(sys.argv.pop())
train.cli_main()
steps = times[warmup:]
peak = torch.cuda.max_memory_allocated() / 2**20 if torch.cuda.is_available() else None
print("REPLICA_BENCH " + json.dumps({"updates": len(steps) - 1, "seconds": steps[-1] - steps[0], "peak_mib": peak}))
"""


def train_command(data, options, updates, seeds, together):
    argv = [data, "--user-dir", os.path.join(ROOT, "fairseq_lexical"), *options, "--max-update", str(updates)]
    argv += ["--disable-validation", "--no-save", "--num-workers", "0", "--log-format", "none"]
    argv += ["--task", "lexical_translation"]
    if together:
        argv += ["--replica-seeds", ",".join(map(str, seeds))]
    else:
        argv += ["--seed", str(seeds[0])]
    return argv


def start(argv, warmup):
    env = dict(os.environ, PYTHONWARNINGS="ignore")
    env.setdefault("OMP_NUM_THREADS", "1")
    command = [sys.executable, "-c", _CHILD, json.dumps(argv + [str(warmup)])]
    return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)


def result(proc):
    out, _ = proc.communicate()
    for line in out.splitlines():
        if line.startswith("REPLICA_BENCH "):
            return json.loads(line[len("REPLICA_BENCH ") :])
    raise RuntimeError(f"a benchmark run failed (exit {proc.returncode}):\n{out[-3000:]}")


def measure(mode, replicas, args):
    """(updates/s in all, peak MiB of the largest process) of ``replicas`` seeds trained the ``mode`` way."""
    seeds = list(range(1, replicas + 1))
    if mode == "together":
        runs = [result(start(train_command(args.data, args.options, args.updates, seeds, True), args.warmup))]
        total = replicas * runs[0]["updates"] / runs[0]["seconds"]
    elif mode == "sequential":
        runs = [
            result(start(train_command(args.data, args.options, args.updates, [s], False), args.warmup)) for s in seeds
        ]
        total = sum(r["updates"] for r in runs) / sum(r["seconds"] for r in runs)
    else:  # concurrent: each process's own rate, while all run
        procs = [start(train_command(args.data, args.options, args.updates, [s], False), args.warmup) for s in seeds]
        runs = [result(p) for p in procs]
        total = sum(r["updates"] / r["seconds"] for r in runs)
    peaks = [r["peak_mib"] for r in runs if r["peak_mib"] is not None]
    return total, (max(peaks) if peaks else None)


ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def prepare_scan(folder, dest):
    """SCAN's add-primitive (jump) split as a data-bin in ``dest`` (its test split as validation)."""
    os.makedirs(dest, exist_ok=True)
    prefixes = []
    for split, name in (("train", "tasks_train_addprim_jump.txt"), ("valid", "tasks_test_addprim_jump.txt")):
        prefix = os.path.join(dest, f"raw_{split}")
        path = os.path.join(folder, name)
        if not os.path.isfile(path):  # brendenlake/SCAN's layout
            path = os.path.join(folder, "add_prim_split", name)
        write_parallel(prefix, read_pairs(path, fmt="scan"))
        prefixes += [f"--{split}pref", prefix]
    program = os.path.join(os.path.dirname(sys.executable), "fairseq-preprocess")
    command = [program, "--source-lang", "src", "--target-lang", "tgt", *prefixes, "--destdir", dest, "--workers", "2"]
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    options = argv[argv.index("--") + 1 :] if "--" in argv else []
    argv = argv[: argv.index("--")] if "--" in argv else argv
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("data", help="a fairseq data-bin")
    parser.add_argument("--replicas", default="1,4", help="comma-separated R values (default 1,4)")
    parser.add_argument("--modes", default="together,sequential,concurrent", help="which ways to train them")
    parser.add_argument("--updates", type=int, default=60, help="updates per run (default 60)")
    parser.add_argument("--warmup", type=int, default=10, help="first updates left out of the time (default 10)")
    parser.add_argument("--output", help="also write the rows as JSON here")
    parser.add_argument(
        "--sequential-once",
        action="store_true",
        help="measure the runs one after the other at the first R only and take that rate for every R (one run's "
        "rate is theirs: what a GPU's time is too dear to measure again)",
    )
    parser.add_argument("--scan", metavar="DIR", help="binarise SCAN's jump split from DIR into DATA first")
    args = parser.parse_args(argv)
    args.options = options
    modes = args.modes.split(",")
    unknown = set(modes) - {"together", "sequential", "concurrent"}
    if unknown:
        parser.error(f"--modes: unknown {', '.join(sorted(unknown))} (together, sequential, concurrent)")
    if args.updates <= args.warmup + 1:
        parser.error("--updates must exceed --warmup + 1")
    if args.scan:
        prepare_scan(args.scan, args.data)
    rows = []
    sequential = None
    print("| mode | R | updates/s in all | per replica | vs one after the other | peak MiB |")
    print("|---|---:|---:|---:|---:|---:|")
    for replicas in (int(r) for r in args.replicas.split(",")):
        baseline = None
        for mode in sorted(modes, key=lambda m: m != "sequential"):  # the baseline first
            started = time.perf_counter()
            if mode == "sequential" and args.sequential_once and sequential is not None:
                total, peak = sequential
            else:
                total, peak = measure(mode, replicas, args)
            if mode == "sequential":
                sequential = (total, peak)
            baseline = total if mode == "sequential" else baseline
            ratio = f"{total / baseline:.2f}x" if baseline else "-"
            peak_text = f"{peak:.0f}" if peak is not None else "-"
            print(f"| {mode} | {replicas} | {total:.2f} | {total / replicas:.2f} | {ratio} | {peak_text} |", flush=True)
            rows.append(
                dict(mode=mode, replicas=replicas, updates_per_s=total, per_replica=total / replicas,
                     vs_sequential=total / baseline if baseline else None, peak_mib=peak,
                     wall_s=time.perf_counter() - started)
            )  # fmt: skip
    if args.output:
        with open(args.output, "w") as f:
            json.dump({"options": options, "updates": args.updates, "warmup": args.warmup, "rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
