"""The mixed-precision table: the same recipe run in fp32, --fp16, --amp and --bf16 (one work directory each),
read back and set side by side.

    python -m fairseq_lexical_recipes.precision fp32=WORK_FP32 fp16=WORK_FP16 amp=WORK_AMP bf16=WORK_BF16 \\
        [--seed 1] [--json table.json]

Each WORK is a recipe work directory (e.g. `bash examples/scan/run.sh --split jump --cpu-small --max-update 500
--beam 5 --train-args --fp16 --work WORK_FP16`); the first precision named is the reference. Per model and
precision, from WORK/<model>/seed<N>/: the last training and validation losses of train.log (and whether every
logged loss is finite), the last loss scale fairseq logged (--fp16, --amp), the updates fairseq skipped on a
gradient overflow (its "overflow detected" lines), exact match (score.json), and the share of test sentences whose
hypothesis (generate.txt) equals the reference precision's.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
from typing import Dict, List, Optional

from lexical_offline.metrics.generate_output import read_generate_output

from .console import RecipeError, exit_status_of
from .fairseq_log import records
from .textio import read_json, write_json

OVERFLOW_MARKERS = ("gradient overflow detected", "AMP: overflow detected")


def _float(value) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        return math.nan


def read_run(run_dir: str) -> Dict[str, object]:
    """What the table shows of one (model, seed) run directory."""
    log = os.path.join(run_dir, "train.log")
    if not os.path.isfile(log):
        raise RecipeError(f"{log}: not found (is {run_dir} a recipe run directory?)")
    with open(log, errors="replace") as f:
        lines = f.readlines()
    skipped = sum(1 for line in lines if any(m in line for m in OVERFLOW_MARKERS))
    train_losses, epoch_losses, valid_losses, scales, updates = [], [], [], [], None
    for tag, stats in records(lines):
        if tag == "train_inner" and "loss" in stats:
            train_losses.append(_float(stats["loss"]))
            if "loss_scale" in stats:
                scales.append(_float(stats["loss_scale"]))
            updates = int(_float(stats.get("num_updates", updates or 0)))
        elif tag == "train" and "train_loss" in stats:  # epoch averages: all a run shorter than --log-interval has
            epoch_losses.append(_float(stats["train_loss"]))
            if "train_loss_scale" in stats:
                scales.append(_float(stats["train_loss_scale"]))
        elif tag == "valid" and "valid_loss" in stats:
            valid_losses.append(_float(stats["valid_loss"]))
    train_losses = train_losses or epoch_losses
    score_path = os.path.join(run_dir, "score.json")
    generate_path = os.path.join(run_dir, "generate.txt")
    return {
        "train_loss": train_losses[-1] if train_losses else None,
        "valid_loss": valid_losses[-1] if valid_losses else None,
        "finite": all(math.isfinite(x) for x in train_losses + valid_losses) and bool(train_losses + valid_losses),
        "loss_scale": scales[-1] if scales else None,
        "min_loss_scale": min(scales) if scales else None,
        "skipped_updates": skipped,
        "updates": updates,
        "exact_match": read_json(score_path).get("exact_match") if os.path.isfile(score_path) else None,
        "hypotheses": read_generate_output(generate_path)[0] if os.path.isfile(generate_path) else None,
    }


def agreement(hyps: Optional[List[str]], reference: Optional[List[str]]) -> Optional[float]:
    """Share of sentences with the same hypothesis (None where either decode is missing or they differ in size)."""
    if hyps is None or reference is None or len(hyps) != len(reference) or not hyps:
        return None
    return sum(a == b for a, b in zip(hyps, reference)) / len(hyps)


def build_table(works: Dict[str, str], seed: int = 1) -> Dict[str, Dict[str, Dict[str, object]]]:
    """model -> precision -> row; the first precision of ``works`` is the reference of the ratios."""
    reference = next(iter(works))
    models = sorted(
        {
            m
            for w in works.values()
            if os.path.isdir(w)
            for m in os.listdir(w)
            if os.path.isdir(os.path.join(w, m, f"seed{seed}"))
        }
    )
    if not models:
        raise RecipeError(f"no <model>/seed{seed} run directory in {', '.join(works.values())}")
    table: Dict[str, Dict[str, Dict[str, object]]] = {}
    for model in models:
        rows = {
            p: read_run(os.path.join(w, model, f"seed{seed}"))
            for p, w in works.items()
            if os.path.isfile(os.path.join(w, model, f"seed{seed}", "train.log"))
        }
        ref = rows.get(reference)
        for precision, row in rows.items():
            if ref and ref["valid_loss"] and row["valid_loss"] is not None:
                row["valid_loss_vs_reference"] = row["valid_loss"] / ref["valid_loss"] - 1
            row["same_hypotheses"] = agreement(row["hypotheses"], ref["hypotheses"] if ref else None)
        table[model] = rows
    return table


def _fmt(value, spec: str, none: str = "-") -> str:
    return none if value is None else format(value, spec)


def format_table(table, reference: str) -> str:
    lines = [
        f"| model | precision | train loss | valid loss | vs {reference} | finite | loss scale (min) | skipped "
        f"updates | exact match | hypotheses = {reference} |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for model, rows in table.items():
        for precision, r in rows.items():
            scale = "-" if r["loss_scale"] is None else f"{r['loss_scale']:g} ({r['min_loss_scale']:g})"
            lines.append(
                f"| {model} | {precision} | {_fmt(r['train_loss'], '.3f')} | {_fmt(r['valid_loss'], '.3f')} | "
                f"{_fmt(r.get('valid_loss_vs_reference'), '+.1%')} | {'yes' if r['finite'] else 'NO'} | {scale} | "
                f"{r['skipped_updates']} | {_fmt(r['exact_match'], '.3f')} | {_fmt(r['same_hypotheses'], '.1%')} |"
            )
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "works",
        nargs="+",
        metavar="PRECISION=WORK",
        help="a label and a recipe work directory; the first is the reference",
    )
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--json", help="also write the table (without the hypotheses) as JSON here")
    args = parser.parse_args(argv)

    def run() -> int:
        works = {}
        for item in args.works:
            label, sep, path = item.partition("=")
            if not sep or not label or not path:
                raise RecipeError(f"{item!r}: expected PRECISION=WORK_DIRECTORY")
            if not os.path.isdir(path):
                raise RecipeError(f"{path}: not a directory ({label})")
            works[label] = path
        table = build_table(works, args.seed)
        print(format_table(table, next(iter(works))))
        if args.json:
            write_json(
                args.json,
                {
                    "works": works,
                    "seed": args.seed,
                    "models": {
                        m: {p: {k: v for k, v in r.items() if k != "hypotheses"} for p, r in rows.items()}
                        for m, rows in table.items()
                    },
                },
            )
        return 0

    return exit_status_of(run)


if __name__ == "__main__":
    sys.exit(main())
