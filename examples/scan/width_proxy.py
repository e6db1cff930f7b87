#!/usr/bin/env python
"""A CPU proxy for LSTM + Simple at the paper's width: a few hundred updates of SCAN at 2 x 512, one JSON line a run
with the signals that separate a model that learns from one that does not (docs/authors_code.md, "At the paper's
width").

    python examples/scan/width_proxy.py --data ../shared/data/scan --work W --configs before,fixed --seeds 1,2,3

Each run is the SCAN recipe's LSTM + Simple training command (its model, lexicon, optimiser and batches: the recipe
decides them, with --batch-size 64 --update-freq 1 and a 400-update warm-up to the paper's peak lr), with the options
of its configuration (CONFIGS) in place of the recipe's own, trained for --updates updates and validated once at the
end on the held-out training pairs. Reported: the training loss, p_gate (the weight of p_write, eq. 10), the gradient
norm at each log interval; the held-out loss, p_gate and teacher-forced exact match at the end; and how large the
fed-back output o_t grows along the held-out targets (tools/output_growth.py). One thread per run:
OMP_NUM_THREADS=1 is set for each fairseq-train, and --jobs runs several at once.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from typing import Dict, List, Sequence, Tuple

from fairseq_lexical_recipes.catalogue import AUTHORS_LOOP

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))

# The options a configuration sets; the recipe's own values of these are removed from its command first.
VARIED = {
    "--weight-init": 1,
    "--exclude-special-outputs": 0,
    "--dropout-placement": 1,
    "--batch-order": 1,
    "--task": 1,
}
CONFIGS: Dict[str, Tuple[str, ...]] = {
    # the recipe's command as it is (its defaults, whatever they are)
    "recipe": (),
    # the recipes' LSTM + Simple before the width fix: fairseq's U(+-0.1) weights, <s>/<pad>/<unk> live outputs
    "before": ("--weight-init", "fairseq"),
    # the recipes' default now: the authors' initialisation and their special-output masking
    "fixed": ("--weight-init", "torch", "--exclude-special-outputs"),
    "init": ("--weight-init", "torch"),
    "specials": ("--weight-init", "fairseq", "--exclude-special-outputs"),
    # the fix plus the authors' training loop (dropout placement, random batches)
    "authors": ("--weight-init", "torch", "--exclude-special-outputs", *AUTHORS_LOOP),
}
PAPER_LR = 0.000698771  # the Noam peak of the paper's d = 512, 4,000 warm-up updates


def without_options(cmd: Sequence[str], options: Dict[str, int]) -> List[str]:
    """cmd without each option of ``options`` (name -> the number of values it takes)."""
    out, i = [], 0
    while i < len(cmd):
        word = cmd[i]
        name = word.split("=", 1)[0]
        if name in options:
            i += 1 + (options[name] if "=" not in word else 0)
            continue
        out.append(word)
        i += 1
    return out


def recipe(args):
    """The SCAN recipe (fairseq_lexical_recipes.recipe.Recipe) for LSTM + Simple at the paper's 512 units with the
    proxy's batches."""
    from fairseq_lexical_recipes.options import RecipeOptions
    from fairseq_lexical_recipes.recipe import Recipe
    from fairseq_lexical_recipes.tasks import TASKS

    options = RecipeOptions(
        data=args.data,
        work=args.work,
        models="simple",
        max_update=args.updates,
        batch_size=args.batch_size,
        update_freq=1,
        warmup_updates=args.warmup,
        lr=args.lr,
    )
    return Recipe(TASKS["scan"](split=args.split), options)


def train_command(rec, config: str, seed: int, out: str, updates: int, log_interval: int) -> List[str]:
    cmd = rec.train_command("simple", seed, out)
    if config != "recipe":
        cmd = without_options(cmd, VARIED)
    return (
        cmd
        + list(CONFIGS[config])
        + [
            "--log-interval",
            str(log_interval),
            "--validate-interval-updates",
            str(updates),
            "--save-interval-updates",
            str(updates),
            "--patience",
            "0",
        ]
    )


def summarise_log(path: str) -> dict:
    from fairseq_lexical_recipes.fairseq_log import read_records

    curve, valid = [], {}
    for tag, stats in read_records(path):
        if tag == "train_inner":
            curve.append({k: float(stats[k]) for k in ("num_updates", "loss", "p_gate", "gnorm") if k in stats})
        elif tag == "valid":
            valid = {k[len("valid_") :]: float(v) for k, v in stats.items() if k.startswith("valid_")}
    return {"curve": curve, "valid": valid}


def output_growth(bin_dir: str, checkpoint: str) -> dict:
    """max_t |o_t| over the held-out targets (median and max over sentences) and the median growth per step."""
    from fairseq_lexical.analysis.output_growth import growth_per_step, output_norms

    from fairseq_lexical.analysis.checkpoints import load_checkpoints, load_subset

    (model,), _, task = load_checkpoints([checkpoint], bin_dir, ValueError)
    dataset = load_subset(task, "valid", ValueError)
    batches = task.get_batch_iterator(dataset, max_sentences=256).next_epoch_itr(shuffle=False)
    norms = output_norms(model, batches, task.target_dictionary.pad())
    peaks = sorted(max(v) for v in norms.values())
    growth = [g for g in map(growth_per_step, norms.values()) if g is not None]
    return {
        "median_max": statistics.median(peaks),
        "max": peaks[-1],
        "median_growth_per_step": statistics.median(growth),
    }


def run_dir(args, config: str, seed: int) -> str:
    return os.path.join(args.work, "width_proxy", f"{config}_seed{seed}")


def run_one(args, config: str, seed: int) -> dict:
    rec = recipe(args)
    out = run_dir(args, config, seed)
    os.makedirs(out)
    log = os.path.join(out, "train.log")
    cmd = train_command(rec, config, seed, out, args.updates, args.log_interval)
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    with open(log, "w") as f:
        code = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, env=env).returncode
    summary = summarise_log(log)
    result = {
        "config": config,
        "flags": list(CONFIGS[config]),
        "split": args.split,
        "seed": seed,
        "hidden": 512,
        "batch_size": args.batch_size,
        "lr": args.lr,
        "warmup": args.warmup,
        "updates": int(summary["curve"][-1]["num_updates"]) if summary["curve"] else 0,
        "exit_code": code,
        "train": summary["curve"],
        "valid": summary["valid"],
        "command": cmd,
    }
    checkpoint = os.path.join(out, "checkpoint_last.pt")
    if code == 0 and os.path.isfile(checkpoint):
        result["output"] = output_growth(rec.invocation.layout.bin, checkpoint)
    return result


def prepare(args) -> None:
    """The recipe's data, lexicon and data-bin in --work (reused when there)."""
    from fairseq_lexical_recipes.commands import recipe_process

    rec = recipe(args)
    argv = rec.invocation.options.but(prepare_only=True).argv() + rec.invocation.task.argv()
    subprocess.run(recipe_process("scan", argv), check=True)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", required=True, help="the SCAN data directory (brendenlake/SCAN's layout)")
    p.add_argument("--split", choices=("jump", "around_right"), default="jump", help="default jump")
    p.add_argument("--work", required=True, help="the recipe's work directory (prepared here when new)")
    p.add_argument(
        "--configs",
        default="before,fixed",
        help=f"comma-separated configurations: {', '.join(CONFIGS)} (default before,fixed)",
    )
    p.add_argument("--seeds", default="1,2,3", help="comma-separated seeds (default 1,2,3)")
    p.add_argument("--updates", type=int, default=300, help="training updates a run (default 300)")
    p.add_argument("--batch-size", type=int, default=64, help="sentences an update (default 64)")
    p.add_argument("--warmup", type=int, default=400, help="warm-up updates of inverse_sqrt (default 400)")
    p.add_argument("--lr", type=float, default=PAPER_LR, help=f"peak learning rate (default {PAPER_LR:g}, the paper's)")
    p.add_argument("--log-interval", type=int, default=25, help="updates between training records (default 25)")
    p.add_argument("--jobs", type=int, default=1, help="runs at once, one thread each (default 1)")
    p.add_argument("--json", help="append each run's JSON line to this file too")
    args = p.parse_args(argv)
    configs = [c.strip() for c in args.configs.split(",") if c.strip()]
    unknown = [c for c in configs if c not in CONFIGS]
    if unknown or not configs:
        p.error(f"--configs {args.configs!r}: choose from {', '.join(CONFIGS)}")
    try:
        seeds = [int(s) for s in args.seeds.split(",") if s.strip()]
    except ValueError:
        p.error(f"--seeds {args.seeds!r}: comma-separated integers")
    if min(args.updates, args.batch_size, args.log_interval, args.jobs) < 1 or args.warmup < 0 or args.lr <= 0:
        p.error("--updates, --batch-size, --log-interval and --jobs must be >= 1, --warmup >= 0, --lr > 0")
    if not os.path.isdir(args.data):
        p.error(f"--data {args.data}: not a directory")
    args.work = os.path.abspath(args.work)
    pairs = [(c, s) for s in seeds for c in configs]
    # a run's folder that exists holds an earlier run: fairseq-train would resume it rather than train anew
    taken = [run_dir(args, c, s) for c, s in pairs if os.path.exists(run_dir(args, c, s))]
    if taken:
        p.error(f"runs exist already (remove them, or give another --work): {', '.join(taken)}")
    from lexical_offline.textio import OutputOverwritesInputError, refuse_overwriting_inputs

    data_files = [(f"--data ({name})", os.path.join(args.data, name)) for name in sorted(os.listdir(args.data))]
    try:
        refuse_overwriting_inputs({"--json": args.json}, data_files)
    except OutputOverwritesInputError as e:
        p.error(str(e))
    prepare(args)
    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        for result in pool.map(lambda pair: run_one(args, *pair), pairs):
            line = json.dumps(result)
            print(line, flush=True)
            if args.json:
                with open(args.json, "a") as f:
                    f.write(line + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
