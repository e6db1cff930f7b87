"""Decode the checkpoints saved along one training run and score them: a learning curve of exact match.

    python -m fairseq_lexical_recipes.learning_curve RUN_DIR --bin BIN_DIR [--updates 2000,4000,8000,16000]
        [--subsets test,valid] [--beams 1,5] [--beam-search keep-best] [--max-len-b 200] [-o RUN_DIR/curve.json]

RUN_DIR is a recipe run's save directory (e.g. WORK/simple/seed1) trained with
`--train-args "--save-interval-updates 2000 --keep-interval-updates -1"`, so that it holds
checkpoint_<epoch>_<updates>.pt files; BIN_DIR is the recipe's binarised data (WORK/bin), whose `test` subset is the
generalisation set and whose `valid` subset is the in-distribution held-out set. Each (checkpoint, subset, beam) is
decoded by fairseq-generate as the recipe decodes (--max-len-a 0) into RUN_DIR/curve/, scored with exact match, and
the curve is written as JSON (updates, epoch, exact match per subset and beam, validation loss logged at that
update). Outputs already decoded are reused. Greedy (beam 1) is there because fairseq's beam search stops a sentence
once `beam` hypotheses have ended, which on SCAN's 6-action output vocabulary can drop the best one
(examples/RESULTS.md, "Learning curves"). Beams above 1 use the keep-best search of --task lexical_translation
(docs/search.md), named `<subset>_keepbest<k>`; `--beam-search fairseq` gives fairseq's, named `<subset>_beam<k>`
as before it existed.
"""

import argparse
import glob
import json
import os
import re
import subprocess
import sys
import time

from lexical_offline.beam_searches import add_beam_search_argument
from lexical_offline.metrics.generate_output import parse_generate_output
from lexical_offline.metrics.scores import exact_match
from lexical_offline.textio import write_json

from .fairseq_log import read_records, updates_of
from .process import search_options, tool


def checkpoints(run_dir: str):
    found = {}
    for path in glob.glob(os.path.join(run_dir, "checkpoint_*_*.pt")):
        m = re.fullmatch(r"checkpoint_(\d+)_(\d+)\.pt", os.path.basename(path))
        if m:
            found[int(m.group(2))] = (int(m.group(1)), path)
    return found


def validation_losses(log_path: str):
    """{num_updates: validation loss} from a fairseq-train log (json or simple format)."""
    if not os.path.isfile(log_path):
        return {}
    return {
        updates_of(tag, stats): float(stats["valid_loss"])
        for tag, stats in read_records(log_path)
        if tag == "valid" and "valid_loss" in stats and updates_of(tag, stats) is not None
    }


def generate_exact_match(generate_path: str) -> float:
    parsed = parse_generate_output(generate_path)
    return exact_match(parsed.hypotheses, parsed.references)


def decoded(curve_dir: str):
    """{updates: {name: path}} of outputs already decoded (<subset>_beam<k>_<updates>.txt, or keepbest<k>)."""
    out = {}
    for path in glob.glob(os.path.join(curve_dir, "*_*_*.txt")):
        m = re.fullmatch(r"(\w+_(?:beam|keepbest)\d+)_(\d+)\.txt", os.path.basename(path))
        if m:
            out.setdefault(int(m.group(2)), {})[m.group(1)] = path
    return out


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run_dir")
    parser.add_argument("--bin", required=True, help="the recipe's binarised data directory (WORK/bin)")
    parser.add_argument("--checkpoints", help="where the checkpoint_<epoch>_<updates>.pt files are (default RUN_DIR)")
    parser.add_argument(
        "--updates",
        default="",
        help="comma-separated update counts (default: every checkpoint and every decoded output)",
    )
    parser.add_argument("--subsets", default="test,valid")
    parser.add_argument("--beams", default="1,5", help="comma-separated beam sizes (default 1,5)")
    add_beam_search_argument(parser)
    parser.add_argument("--max-len-b", type=int, default=200)
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("-o", "--output", help="curve JSON (default RUN_DIR/curve.json)")
    args = parser.parse_args(argv)

    curve_dir = os.path.join(args.run_dir, "curve")
    found, done = checkpoints(args.checkpoints or args.run_dir), decoded(curve_dir)
    if not found and not done:
        parser.error(
            f"{args.checkpoints or args.run_dir}: no checkpoint_<epoch>_<updates>.pt files (train the "
            f"recipe with --keep-checkpoints all --train-args '--save-interval-updates N "
            f"--keep-interval-updates -1')"
        )
    wanted = sorted(set(found) | set(done)) if not args.updates else [int(u) for u in args.updates.split(",")]
    user_dir = os.path.dirname(__import__("fairseq_lexical").__file__)
    losses = validation_losses(os.path.join(args.run_dir, "train.log"))
    os.makedirs(curve_dir, exist_ok=True)
    points, skipped = [], []
    for updates in wanted:
        epoch, path = found.get(updates, (None, None))
        point = {"updates": updates, "epoch": epoch, "valid_loss": losses.get(updates)}
        for subset, beam in [(s, int(b)) for s in args.subsets.split(",") for b in args.beams.split(",")]:
            name = f"{subset}_{'keepbest' if beam > 1 and args.beam_search == 'keep-best' else 'beam'}{beam}"
            out = os.path.join(curve_dir, f"{name}_{updates}.txt")
            if not os.path.isfile(out):
                if path is None:  # neither a checkpoint nor an earlier output: reported, not invented
                    point[f"{name}_exact_match"] = None
                    skipped.append(f"{name} at {updates}")
                    continue
                start = time.time()
                cmd = [
                    tool("fairseq-generate"),
                    args.bin,
                    "--user-dir",
                    user_dir,
                    "--path",
                    path,
                    "--gen-subset",
                    subset,
                    "--beam",
                    str(beam),
                    "--batch-size",
                    str(args.batch_size),
                    "--max-len-a",
                    "0",
                    "--max-len-b",
                    str(args.max_len_b),
                    "--num-workers",
                    "0",
                ]
                cmd += search_options(beam, "--beam-search", args.beam_search)
                with open(out + ".tmp", "w", encoding="utf-8") as f:
                    subprocess.run(cmd, stdout=f, stderr=subprocess.DEVNULL, check=True)
                os.replace(out + ".tmp", out)
                point[f"{name}_decode_s"] = round(time.time() - start, 1)
            point[f"{name}_exact_match"] = generate_exact_match(out)
        print(json.dumps(point), flush=True)
        points.append(point)
    if skipped:
        print(
            f"{len(skipped)} (subset, beam, updates) with neither a checkpoint nor a decoded output, left "
            f"empty: {', '.join(skipped)}",
            file=sys.stderr,
        )
    output = args.output or os.path.join(args.run_dir, "curve.json")
    write_json(output, {"run_dir": os.path.abspath(args.run_dir), "beams": args.beams, "points": points})
    print(f"wrote {output}")


if __name__ == "__main__":
    main()
