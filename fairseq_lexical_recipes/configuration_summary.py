"""One reported configuration's summary.json, from the seed directories of its runs (issue 23, point 3).

    python -m fairseq_lexical_recipes.configuration_summary WORK1/simple/seed1 WORK2/simple/seed2 ... \
        --paper 0.92,0.17 [--metric exact_match] [--note TEXT] -o examples/results/scan_jump_simple_cpu_medium.json

Each directory is a recipe run's save directory (WORK/<model>/seed<N>) holding the recipe's config.json, score.json
and run.json; the runs may come from different work directories (one per seed, run side by side), but must share
one configuration: task, model, and the training and decoding commands apart from the seed and paths (checked;
runs made under another preset name with the same commands need --settings NAME). The
summary has the model, the seeds, the per-seed scores and minutes, mean and std over seeds (population, and
sample), the configuration (hyper-parameters and the commands with machine paths replaced by $WORK/$REPO), the
machine, and the paper's number when given. Small enough to commit.
"""

import argparse
import os
import platform
import re
import sys
from typing import List, Optional

from lexical_offline.metrics.aggregate import flatten_scores, mean_std
from lexical_offline.textio import read_json, write_json

from .console import RecipeError, exit_status_of

# options that differ between the seeds of one configuration without changing it (where the checkpoints go, and
# the recipe's kept-checkpoint cadence, which fairseq's per-update seeding leaves out of training)
_FREE_OPTIONS = re.compile(r"--(seed|save-dir|save-interval-updates|keep-interval-updates) \S+")
_SEED_DIR = re.compile(r"/seed\d+/")


def _configuration_key(config: dict) -> tuple:
    """The training and decoding commands without what may differ between the seeds of one configuration."""
    commands = config.get("fingerprint", {})
    return (
        _FREE_OPTIONS.sub("", commands.get("train", "")).strip(),
        _SEED_DIR.sub("/seedN/", commands.get("generate", "")),
    )


def read_run(run_dir: str, metric: str) -> dict:
    paths = {name: os.path.join(run_dir, f"{name}.json") for name in ("config", "score", "run")}
    for name, path in paths.items():
        if not os.path.isfile(path):
            raise RecipeError(
                f"{path}: not found ({run_dir} is not a finished recipe run: it needs config.json, "
                f"score.json and run.json)"
            )
    config = read_json(paths["config"], error=RecipeError)
    score = flatten_scores(read_json(paths["score"], error=RecipeError))
    run = read_json(paths["run"], error=RecipeError)
    if metric not in score:
        raise RecipeError(f"{paths['score']}: no metric {metric!r} (it has {', '.join(sorted(score)) or 'none'})")
    return {"dir": run_dir, "config": config, "score": score, "run": run}


def summarise(
    runs: List[dict], metric: str, paper: Optional[List[float]] = None, note: str = "", settings: Optional[str] = None
) -> dict:
    """The summary of runs that share one configuration: task, model, and their training and decoding commands
    apart from the seed and paths. Runs made under another preset name whose commands are the same (e.g.
    `--cpu-small --max-update 12000 --patience 0 --beam 1`, which is `--cpu-medium`) need `settings`: the name
    the summary gives them; each run's own name is kept in per_seed."""
    first = runs[0]["config"]
    for run in runs[1:]:
        config = run["config"]
        for field in ("task", "model"):
            if config.get(field) != first.get(field):
                raise RecipeError(
                    f"{run['dir']}: {field} {config.get(field)!r} differs from {runs[0]['dir']}'s "
                    f"{first.get(field)!r}: one summary is one configuration"
                )
        if _configuration_key(config) != _configuration_key(first):
            raise RecipeError(
                f"{run['dir']}: its training or decoding command differs from {runs[0]['dir']}'s "
                f"beyond the seed and paths: one summary is one configuration"
            )
    names = sorted({run["config"].get("settings") for run in runs}, key=str)
    if settings is None and len(names) > 1:
        raise RecipeError(
            f"the runs were made under different settings names ({', '.join(map(str, names))}) with "
            f"the same commands: name the configuration with --settings"
        )
    name = settings or first.get("settings")
    seeds = [run["config"]["seed"] for run in runs]
    if len(set(seeds)) != len(seeds):
        raise RecipeError(f"seed given twice among the runs: {seeds}")
    per_seed = {}
    for run in sorted(runs, key=lambda r: r["config"]["seed"]):
        timing = run["run"]
        per_seed[str(run["config"]["seed"])] = {
            metric: run["score"][metric],
            "train_minutes": round(timing.get("train_s", 0.0) / 60, 1),
            "decode_minutes": round(timing.get("generate_s", 0.0) / 60, 1),
            "updates": timing.get("training", {}).get("updates"),
            "finished": timing.get("finished"),
            "recipe_settings": run["config"].get("settings"),
        }
    stats = mean_std([v[metric] for v in per_seed.values()])
    summary = {
        "task": first.get("task"),
        "model": first.get("model"),
        "label": first.get("label"),
        "settings": name,
        "settings_label": next(
            (r["config"].get("settings_label") for r in runs if r["config"].get("settings") == name), None
        ),
        "metric": metric,
        "seeds": sorted(seeds),
        "per_seed": per_seed,
        "mean": stats["mean"],
        "std": stats["std"],
        "std_sample": stats["std_sample"],
        "minutes": {
            "train_max": max(v["train_minutes"] for v in per_seed.values()),
            "train_total": round(sum(v["train_minutes"] for v in per_seed.values()), 1),
            "decode_max": max(v["decode_minutes"] for v in per_seed.values()),
        },
        "configuration": {
            "hparams": first.get("hparams"),
            "patience": first.get("patience"),
            "commands": first.get("fingerprint", {}),
        },
        "machine": {
            "host": runs[0]["run"].get("host"),
            "cpus": os.cpu_count(),
            "platform": platform.platform(),
            "python": platform.python_version(),
            "device": runs[0]["run"].get("training", {}).get("device"),
        },
    }
    if paper:
        summary["paper"] = {"mean": paper[0], "std": paper[1] if len(paper) > 1 else None}
    if note:
        summary["note"] = note
    return summary


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("runs", nargs="+", help="seed directories (WORK/<model>/seed<N>) of one configuration")
    parser.add_argument("--metric", default="exact_match", help="the score to summarise (default exact_match)")
    parser.add_argument("--paper", help="the paper's mean[,std] for this row, e.g. 0.92,0.17")
    parser.add_argument("--note", default="", help="a sentence kept in the summary (e.g. how the runs were made)")
    parser.add_argument(
        "--settings",
        help="the configuration's name when its runs were made under different preset "
        "names with the same commands (e.g. cpu-medium)",
    )
    parser.add_argument("-o", "--output", required=True)
    args = parser.parse_args(argv)

    def run() -> int:
        try:
            paper = [float(x) for x in args.paper.split(",")] if args.paper else None
        except ValueError:
            raise RecipeError(f"--paper {args.paper!r}: expected MEAN or MEAN,STD") from None
        out = os.path.abspath(args.output)
        if any(os.path.abspath(d) == os.path.dirname(out) for d in args.runs):
            raise RecipeError(f"-o {args.output}: inside a run directory it summarises; write it elsewhere")
        summary = summarise([read_run(d, args.metric) for d in args.runs], args.metric, paper, args.note, args.settings)
        write_json(args.output, summary)
        print(
            f"{args.output}: {summary['label']}, seeds {summary['seeds']}: {args.metric} "
            f"{summary['mean']:.4f} +/- {summary['std']:.4f}"
        )
        return 0

    return exit_status_of(run, prog="fairseq_lexical_recipes.configuration_summary")


if __name__ == "__main__":
    sys.exit(main())
