#!/usr/bin/env python
"""Your own parallel data in one command: lexicons -> baseline and lexical models -> decoding -> scores -> a report
folder (summary table, lexicon heatmaps, learning curves, the explanation page). See examples/custom/README.md.

    bash examples/custom/run.sh --train DATA/train --test DATA/test [--valid DATA/valid] \\
        [--family lstm|transformer] [--smoke | --cpu | --paper] [--lexicons simple,ibm2] [--work DIR]

Each split is a TSV file (source<TAB>target per line) or a PREFIX of PREFIX.src and PREFIX.tgt (--source-lang,
--target-lang change the suffixes). Everything after the checks runs through the recipes' pipeline
(fairseq_lexical_recipes: fairseq-preprocess, tools/build_lexicon.py, fairseq-train, fairseq-generate,
tools/score.py, resuming and skipping finished runs); this file adds the data checks, the presets and the report.

WORK layout: the recipes' (data/, bin/, lexicons/, <model>/seed<N>/, summary.json) plus report/:
    summary.md                 the table (the suitable metric first), data, settings, links to the rest
    lexicon_<method>.png       heatmap of each lexicon's strongest rows (tools/plot_lexicon.py)
    learning_curves.png        validation (and training) loss against updates, from fairseq's training logs
    explain_<model>.html       the explanation page of each lexical model (tools/explain.py), and its .jsonl
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import time
from dataclasses import replace
from typing import Dict, List, Optional, Sequence, Tuple

from lexical_offline.textio import (
    OutputOverwritesInputError,
    TextFileError,
    read_jsonl,
    read_pairs,
    refuse_overwriting_inputs,
)
from lexical_offline.metrics.aggregate import aggregate_dir, format_mean_std, format_summary

# fairseq_lexical_recipes: the recipes' pipeline, runners and settings
from fairseq_lexical_recipes import ROOT, fairseq_log, ownership, process
from fairseq_lexical_recipes.catalogue import LEXICON_METHODS, MODELS
from fairseq_lexical_recipes.options import RecipeOptions
from fairseq_lexical_recipes.invocation import OptionError
from fairseq_lexical_recipes.console import RecipeError, exit_status_of, hms, say
from fairseq_lexical_recipes.process import run_logged
from fairseq_lexical_recipes.recipe import Plan, Recipe
from fairseq_lexical_recipes.reports import Report
from fairseq_lexical_recipes.runner import Runner
from fairseq_lexical_recipes.tasks import Prepared, Task
from fairseq_lexical_recipes.textio import write_json

PROG = "run.sh"
FAMILIES = ("lstm", "transformer")
DEFAULT_LEXICONS = "simple,ibm2"
# The metric shown first: BLEU when the training targets have at least this many word types (an open, natural-
# language output vocabulary: translation-like data), exact match below it (a closed output vocabulary: commands,
# logical forms, labels; SCAN has 6 output types, COGS 683, Colors 4, English-Chinese 11,354).
OPEN_VOCABULARY_TYPES = 1000
VALID_FRACTION = 0.05  # held out of the training pairs when no --valid is given
METRIC_COLUMNS = {"exact_match": "exact match", "bleu": "BLEU", "chrf": "chrF"}
PRIMARY_NAMES = {"em": "exact_match", "bleu": "bleu", "chrf": "chrf"}
HEATMAP_WORDS = 20


# ---------------------------------------------------------------------------------------------------------------
# data
# ---------------------------------------------------------------------------------------------------------------


def split_files(path: str, src_lang: str, tgt_lang: str) -> Tuple[str, ...]:
    """(tsv,) for an existing file or a name ending in .tsv, else (PREFIX.src_lang, PREFIX.tgt_lang)."""
    if os.path.isfile(path) or path.endswith(".tsv"):
        return (path,)
    return (f"{path}.{src_lang}", f"{path}.{tgt_lang}")


FAIRSEQ_RESERVED = ("<s>", "<pad>", "</s>", "<unk>")
MAX_POSITIONS = 1024  # fairseq's translation task's default --max-source-positions and --max-target-positions


def read_split(role: str, path: str, src_lang: str, tgt_lang: str) -> Tuple[List[Tuple[str, str]], List[str]]:
    """(pairs, files read) of one split; every problem is a RecipeError naming the option and the file."""
    files = split_files(path, src_lang, tgt_lang)
    missing = [f for f in files if not os.path.isfile(f)]
    if missing:
        what = "file" if len(files) == 1 else f"PREFIX.{src_lang} / PREFIX.{tgt_lang} files"
        raise RecipeError(
            f"--{role} {path}: {what} not found: {', '.join(missing)} (give a TSV file or a prefix of "
            f"PREFIX.{src_lang} and PREFIX.{tgt_lang})"
        )
    try:
        pairs = read_pairs(*files)  # one TSV file, or PREFIX.src_lang and PREFIX.tgt_lang
    except TextFileError as e:
        raise RecipeError(f"--{role}: {e}") from None
    for lineno, pair in enumerate(pairs, start=1):
        for side, text in zip(("source", "target"), pair):
            where = files[0] if len(files) == 1 else files[0 if side == "source" else 1]
            n = len(text.split())
            if n + 1 > MAX_POSITIONS:  # fairseq skips such a training pair (a log line) and fails on a test one
                raise RecipeError(
                    f"--{role}: {where}:{lineno}: the {side} has {n} tokens; fairseq's translation "
                    f"task takes {MAX_POSITIONS - 1} at most (with </s>, --max-source-positions / "
                    f"--max-target-positions {MAX_POSITIONS}): split or drop the pair"
                )
            reserved = next((w for w in text.split() if w in FAIRSEQ_RESERVED), None)
            if reserved:  # fairseq reads "</s>" as the sentence's end, "<pad>" as padding...
                raise RecipeError(
                    f"--{role}: {where}:{lineno}: the {side} holds {reserved!r}, one of fairseq's "
                    f"reserved symbols ({' '.join(FAIRSEQ_RESERVED)}); replace it in the data"
                )
    return pairs, [os.path.abspath(f) for f in files]


def target_types(pairs: Sequence[Tuple[str, str]]) -> int:
    return len({w for _, t in pairs for w in t.split()})


def primary_metric(pairs: Sequence[Tuple[str, str]], choice: str) -> Tuple[str, str]:
    """(metric name, why) of the metric shown first; ``choice`` "auto" applies the rule above."""
    if choice != "auto":
        return PRIMARY_NAMES[choice], f"--primary-metric {choice}"
    n = target_types(pairs)
    if n >= OPEN_VOCABULARY_TYPES:
        return "bleu", (
            f"{n:,} target word types in training (>= {OPEN_VOCABULARY_TYPES:,}: translation-like data): BLEU first"
        )
    return "exact_match", (
        f"{n:,} target word types in training (< {OPEN_VOCABULARY_TYPES:,}: a closed output "
        f"vocabulary): exact match first"
    )


def parse_lexicons(text: str) -> List[str]:
    methods = [m.strip() for m in text.split(",") if m.strip()]
    if not methods:
        raise RecipeError("--lexicons: no method given")
    unknown = [m for m in methods if m not in LEXICON_METHODS]
    if unknown:
        raise RecipeError(f"--lexicons: unknown method {unknown[0]!r} (choose from {', '.join(LEXICON_METHODS)})")
    return list(dict.fromkeys(methods))


# ---------------------------------------------------------------------------------------------------------------
# the models: the recipes' LSTM rows, and Transformer rows for every lexicon method
# ---------------------------------------------------------------------------------------------------------------


def transformer_model(method: str) -> str:
    name = f"transformer_{method}"
    if name not in MODELS:  # the recipes define the Simple row only ("lex_transformer"): the same for each method
        label = MODELS[method].label.replace("LSTM", "Transformer")
        MODELS[name] = replace(MODELS["lex_transformer"], label=label, lexicon=method)
    return name


def model_names(family: str, methods: Sequence[str]) -> List[str]:
    if family == "lstm":
        return ["lstm", *methods]
    return ["transformer", *(transformer_model(m) for m in methods)]


# ---------------------------------------------------------------------------------------------------------------
# the task the recipe pipeline runs
# ---------------------------------------------------------------------------------------------------------------


class CustomData(Task):
    name = "custom"
    title = "test set"

    def __init__(
        self, opts, splits: Dict[str, List[Tuple[str, str]]], files: Dict[str, List[str]], primary: Tuple[str, str]
    ):
        self.opts, self.splits, self.files = opts, splits, files
        self.primary, self.primary_why = primary
        self.columns = tuple(
            [(self.primary, METRIC_COLUMNS[self.primary])]
            + [(k, v) for k, v in METRIC_COLUMNS.items() if k != self.primary]
        )
        # The mutual-exclusivity fallback spreads uniform rows over every unclaimed output word: on an open
        # vocabulary that is millions of entries (the English-Chinese recipe leaves it out for the same reason).
        self.lexicon_build_args = ("--no-fallback",) if self.primary == "bleu" else ()

    def hparams(self, preset):
        hp = super().hparams(preset)
        if self.opts.preset == "smoke":
            # checks that every step runs: a few updates, validation twice, beam 2
            hp = replace(
                hp,
                validate_every=10,
                log_interval=5,
                patience=None,
                warmup=10,
                lr=0.005,
                batch_size=16,
                update_freq=1,
                max_update=30,
                beam=2,
                clip_norm=1.0,
            )
        return hp

    def locate(self, data):
        return {role: " + ".join(paths) for role, paths in self.files.items()}

    def prepare(self, files):
        train, valid, notes = self.splits["train"], self.splits.get("valid"), []
        if valid is None:
            n_valid = max(1, int(len(train) * VALID_FRACTION))
            held = set(random.Random(0).sample(range(len(train)), n_valid))
            valid = [p for i, p in enumerate(train) if i in held]
            train = [p for i, p in enumerate(train) if i not in held]
            notes.append(
                f"no --valid: {n_valid} of {len(train) + n_valid} training pairs held out for validation "
                f"({VALID_FRACTION:.0%}, seed 0); the lexicons are learned from the other {len(train)}"
            )
        notes.append(f"metric: {self.primary_why}")
        metrics = ["--metrics", "em,bleu,chrf", "--tokenize", self.opts.bleu_tokenize]
        return Prepared(
            train=train,
            valid=valid,
            test=self.splits["test"],
            lexcorpus=train,
            files=files,
            notes=notes,
            score_args=metrics,
        )

    def result_line(self, score):
        parts = []
        for key, title in self.columns:
            value = score.get(key)
            digits = ".4f" if key == "exact_match" else ".2f"
            parts.append(f"{title} {'n/a' if value is None else format(value, digits)}")
        return "  ".join(parts)


class CustomReport(Report):
    """This example's report (a report/ folder: summary.md, heatmaps, curves, explanation pages) instead of the paper
    tables."""

    def write(self, plan: Plan, seconds: float) -> None:
        start = time.time()
        inv, task = plan.invocation, plan.invocation.task
        summary = aggregate_dir(inv.work, models=inv.models, seeds=inv.seeds)
        labels = dict(plan.labels)
        say("")
        say(f"== {inv.settings_label}; {len(inv.seeds)} seed(s); mean +/- std over seeds")
        say(format_summary(summary, task.columns, labels=labels))
        write_json(
            inv.work + "/summary.json",
            {
                "task": "custom",
                "settings": inv.settings,
                "settings_label": inv.settings_label,
                "primary_metric": task.primary,
                "primary_metric_rule": task.primary_why,
                "columns": [list(c) for c in task.columns],
                "seeds": list(inv.seeds),
                "data": dict(inv.files),
                "std": "population standard deviation (ddof=0); std_sample: ddof=1",
                "models": {m: dict(label=labels[m], **summary[m]) for m in summary},
            },
        )
        report_dir = inv.work + "/report"
        with ownership.writing(report_dir):
            heatmaps = lexicon_heatmaps(plan, report_dir)
            curves = write_learning_curves(inv.work, inv.models, inv.seeds, labels, report_dir + "/learning_curves.png")
            pages = explanation_pages(plan, report_dir)
            seconds += time.time() - start
            write_summary_md(report_dir + "/summary.md", plan, summary, heatmaps, curves, pages, seconds)
        say(
            f"== report: {report_dir}/summary.md (table, lexicon heatmaps, learning curves, explanation pages); "
            f"total wall time {hms(seconds)}"
        )

    def writes(self, recipe: Recipe) -> List[str]:
        """The report folder's files (checked before anything is written: a file of these names that the pipeline
        did not write stops the run)."""
        report_dir = recipe.invocation.work + "/report"
        names = ["summary.md", "learning_curves.png"]
        names += [f"lexicon_{m}.{ext}" for m in recipe.lexicon_methods() for ext in ("png", "log")]
        names += [f"explain_{m}.{ext}" for m in recipe.invocation.models for ext in ("jsonl", "html", "log")]
        return [f"{report_dir}/{n}" for n in names]


# -- report pieces -------------------------------------------------------------------------------------------------
def lexicon_heatmaps(plan: Plan, report_dir: str) -> Dict[str, Tuple[str, int]]:
    """method -> (PNG file name, number of entries): the rows of the words with the strongest entries."""
    from lexical_offline.lexicon import read_lexicon

    out = {}
    for method, path in plan.lexicons.items():
        entries, _ = read_lexicon(path)
        strongest: Dict[str, float] = {}
        for v, _w, score in entries:
            strongest[v] = max(score, strongest.get(v, float("-inf")))
        # plot_lexicon.py takes the words comma-separated: a word with a comma cannot be named
        words = sorted((v for v in strongest if "," not in v), key=lambda v: -strongest[v])[:HEATMAP_WORDS]
        if not words:
            say(f"   lexicon {method}: no entry, no heatmap")
            continue
        png = f"lexicon_{method}.png"
        # temperature 0: the rows exactly as the models load them (the argmax, ties shared)
        cmd = [
            sys.executable,
            os.path.join(ROOT, "tools", "plot_lexicon.py"),
            path,
            "-o",
            f"{report_dir}/{png}",
            "--words",
            ",".join(words),
            "--temperature",
            "0",
            "--title",
            f"{method}: the {len(words)} input words with the strongest entries",
        ]
        run_logged(cmd, f"{report_dir}/lexicon_{method}.log", what=f"plot_lexicon.py ({method})")
        out[method] = (png, len(entries))
    return out


def explanation_pages(plan: Plan, report_dir: str) -> Dict[str, dict]:
    """model -> {html, jsonl, sentences, wrong, tokens, from_lexicon}: tools/explain.py on the first seed's
    checkpoint and test hypotheses of each lexical model."""
    inv = plan.invocation
    pages = {}
    seed = inv.seeds[0]
    for model in inv.models:
        if MODELS[model].lexicon not in LEXICON_METHODS:
            continue
        run = plan.runs[model, seed]
        out, ckpt = run.out, run.checkpoint
        if not os.path.isfile(ckpt):
            say(f"   {model}: no {ckpt}, no explanation page")
            continue
        jsonl, page = f"{report_dir}/explain_{model}.jsonl", f"{report_dir}/explain_{model}.html"
        cmd = [
            sys.executable,
            os.path.join(ROOT, "tools", "explain.py"),
            inv.layout.bin,
            "--path",
            ckpt,
            "--generate-output",
            f"{out}/generate.txt",
            "--reference",
            f"{inv.layout.data}/test.tgt",
            "-o",
            jsonl,
            "--html",
            page,
            "--title",
            f"Why each output word was chosen: {plan.labels[model]}",
        ]
        try:
            secs = run_logged(cmd, f"{report_dir}/explain_{model}.log", what=f"explain.py ({model})")
        except RecipeError as e:  # the runs' results are in; a page that cannot be made must not lose them
            say(f"   {model}: no explanation page: {str(e).splitlines()[0]}")
            continue
        pages[model] = {
            "html": os.path.basename(page),
            "jsonl": os.path.basename(jsonl),
            "seed": seed,
            **explanation_stats(jsonl),
        }
        say(f"== explanation page: {page} ({hms(secs)})")
    return pages


def explanation_stats(jsonl: str) -> dict:
    sentences = wrong = tokens = lexical = unexplained = 0
    try:
        records = read_jsonl(jsonl)
    except TextFileError as e:
        raise RecipeError(str(e)) from None
    for s in records:
        sentences += 1
        wrong += s["correct"] is False
        if s.get("error") is not None:  # explain.py could not explain it (the page says why)
            unexplained += 1
            continue
        words = s["tokens"][:-1]  # not </s>
        tokens += len(words)
        lexical += sum(t["origin"] == "lexicon" for t in words)
    return {
        "sentences": sentences,
        "wrong": wrong,
        "tokens": tokens,
        "from_lexicon": lexical,
        "unexplained": unexplained,
    }


# ---------------------------------------------------------------------------------------------------------------
# learning curves
# ---------------------------------------------------------------------------------------------------------------


def loss_curves(log_path: str) -> Dict[str, List[Tuple[int, float]]]:
    """{"valid": [(updates, loss)], "train": [(updates, loss)]} from a fairseq-train log's progress records
    (fairseq_lexical_recipes.fairseq_log; fairseq's losses are in bits). A resumed run's log holds the earlier records
    too; a repeated
    update count keeps its last."""
    curves: Dict[str, Dict[int, float]] = {"valid": {}, "train": {}}
    for tag, stats in fairseq_log.read_records(log_path):
        loss = stats.get("loss" if tag == "train_inner" else f"{tag}_loss")
        updates = fairseq_log.updates_of(tag, stats)
        if tag in ("valid", "train_inner") and loss is not None and updates is not None:
            curves["valid" if tag == "valid" else "train"][updates] = float(loss)
    return {k: sorted(v.items()) for k, v in curves.items()}


def write_learning_curves(
    work: str, models: Sequence[str], seeds: Sequence[int], labels: Dict[str, str], png: str
) -> Optional[str]:
    """Validation loss (solid) and training loss (dotted) against updates, one colour per model; None when no log
    has a loss line."""
    import logging

    logging.getLogger("matplotlib").setLevel(logging.WARNING)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7.5, 4.2))
    drawn = False
    for k, model in enumerate(models):
        colour = f"C{k % 10}"
        for i, seed in enumerate(seeds):
            log = f"{work}/{model}/seed{seed}/train.log"
            if not os.path.isfile(log):
                continue
            curves = loss_curves(log)
            name = labels.get(model, model) + (f", seed {seed}" if len(seeds) > 1 else "")
            if curves["valid"]:
                x, y = zip(*curves["valid"])
                ax.plot(x, y, "-o", color=colour, markersize=3, label=f"{name}: validation")
                drawn = True
            if curves["train"]:
                x, y = zip(*curves["train"])
                ax.plot(x, y, ":", color=colour, alpha=0.8, label=f"{name}: training" if i == 0 else None)
                drawn = True
    if not drawn:
        plt.close(fig)
        return None
    ax.set_xlabel("updates")
    ax.set_ylabel("loss (bits per token, fairseq's)")
    ax.set_title("learning curves: validation (solid) and training (dotted) loss", fontsize=10)
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(png, dpi=110)
    plt.close(fig)
    return os.path.basename(png)


# ---------------------------------------------------------------------------------------------------------------
# summary.md
# ---------------------------------------------------------------------------------------------------------------


def write_summary_md(path, plan: Plan, summary, heatmaps, curves, pages, seconds) -> None:
    inv, labels = plan.invocation, plan.labels
    task, opts = inv.task, inv.task.opts
    cols = task.columns
    seeds = len(inv.seeds)
    lines = [
        f"# {opts.family.upper()} with and without a lexicon on your data",
        "",
        f"Preset `--{opts.preset}`: {inv.settings_label}. Seeds: {', '.join(map(str, inv.seeds))}"
        + (" (mean +/- std over seeds)" if seeds > 1 else "")
        + f". Wall time {hms(seconds)} (this invocation).",
        "",
        "| model | " + " | ".join(title for _, title in cols) + " |",
        "|---|" + "---|" * len(cols),
    ]
    for model in inv.models:
        entry = summary.get(model)
        cells = []
        for key, _ in cols:
            stats = entry["metrics"].get(key) if entry else None
            if stats is None:
                cells.append("n/a")
            elif seeds > 1:
                cells.append(format_mean_std(stats, digits=2 if key != "exact_match" else 3))
            else:
                cells.append(f"{stats['mean']:.{3 if key == 'exact_match' else 2}f}")
        lines.append(f"| {labels[model]} | " + " | ".join(cells) + " |")
    lines += [
        "",
        f"Exact match is a fraction (0-1), BLEU (sacrebleu, --tokenize {opts.bleu_tokenize}) and chrF are "
        f"0-100. First column: {task.primary_why}.",
        "",
        "## Data",
        "",
    ]
    for role, files in task.files.items():
        lines.append(f"- {role}: {len(task.splits[role])} pairs from {' + '.join(files)}")
    if "valid" not in task.files:
        lines.append(
            f"- valid: none given; {VALID_FRACTION:.0%} of the training pairs were held out (see "
            f"`../config.json`, `../data/`)"
        )
    if heatmaps:
        lines += ["", "## Lexicons", ""]
        for method, (png, n) in heatmaps.items():
            lines += [
                f"{method} ({LEXICON_METHODS[method][1]}): {n} entries in `{plan.lexicons[method]}`",
                "",
                f"![{method}]({png})",
                "",
            ]
    if curves:
        lines += ["## Learning curves", "", f"![learning curves]({curves})", ""]
    if pages:
        lines += [
            "## Why each output word was chosen",
            "",
            "Each page colours every output token of the test hypotheses by the larger branch of "
            "p(y) = p_gate p_write(y) + (1 - p_gate) sum_j alpha_j L[x_j, y] (orange: the lexicon, blue: "
            "written); hover a token for its source word, lexicon entry and numbers. Wrong hypotheses come "
            "first. The .jsonl file has the numbers (tools/explain.py --help).",
            "",
        ]
        for model, p in pages.items():
            share = 100.0 * p["from_lexicon"] / max(1, p["tokens"])
            lines.append(
                f"- [{labels[model]}]({p['html']}) (seed {p['seed']}): {p['wrong']} of {p['sentences']} "
                f"hypotheses wrong; {p['from_lexicon']} of {p['tokens']} output tokens ({share:.1f}%) from "
                f"the lexicon; numbers in `{p['jsonl']}`"
                + (
                    f"; {p['unexplained']} sentence(s) could not be explained (the page says why)"
                    if p.get("unexplained")
                    else ""
                )
            )
    lines += [
        "",
        f"Runs: `{inv.work}/<model>/seed<N>/` (train.log, generate.txt, score.json, config.json with the commands).",
    ]
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")


# ---------------------------------------------------------------------------------------------------------------
# command line
# ---------------------------------------------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="bash examples/custom/run.sh",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description=__doc__.split("\n\n")[0],
        epilog=f"Lexicon methods: {', '.join(f'{k} ({v[1]})' for k, v in LEXICON_METHODS.items())}.\n"
        "Presets: --smoke (30 updates of the CPU-sized models: checks that every step runs, the numbers mean "
        "nothing), --cpu (the recipes' --cpu-small settings: 2 x 128 LSTM or the tiny Transformer, 2000 "
        "updates), --paper (the default: appendix C.1 of Akyurek & Andreas 2021 for the LSTM, fairseq's "
        "transformer_iwslt_de_en recipe for the Transformer). Details: examples/custom/README.md.",
    )
    g = p.add_argument_group("data (each: a TSV file, source<TAB>target, or a PREFIX of PREFIX.src and PREFIX.tgt)")
    g.add_argument("--train", required=True, metavar="PATH", help="training pairs")
    g.add_argument(
        "--valid",
        metavar="PATH",
        help=f"validation pairs (default: {VALID_FRACTION * 100:.0f}%% of the training pairs held out)",
    )
    g.add_argument("--test", required=True, metavar="PATH", help="test pairs (decoded and scored)")
    g.add_argument("--source-lang", default="src", help="suffix of the source files of a PREFIX (default src)")
    g.add_argument("--target-lang", default="tgt", help="suffix of the target files of a PREFIX (default tgt)")
    g.add_argument("--work", help="work directory (default $TMPDIR/fairseq_lexical_custom, TMPDIR=/tmp)")
    g = p.add_argument_group("what to run")
    g.add_argument(
        "--family",
        choices=FAMILIES,
        default="lstm",
        help="lstm (default): plain LSTM and LSTM + lexicon; transformer: Transformer and Transformer + lexicon",
    )
    g.add_argument(
        "--lexicons",
        default=DEFAULT_LEXICONS,
        help=f"comma-separated lexicon methods, one lexical model each (default {DEFAULT_LEXICONS})",
    )
    preset = g.add_mutually_exclusive_group()
    preset.add_argument(
        "--smoke",
        dest="preset",
        action="store_const",
        const="smoke",
        help="a few updates of small models: checks the whole pipeline in about a minute",
    )
    preset.add_argument(
        "--cpu",
        dest="preset",
        action="store_const",
        const="cpu",
        help="CPU-sized models and schedule (the recipes' --cpu-small)",
    )
    preset.add_argument(
        "--paper",
        dest="preset",
        action="store_const",
        const="paper",
        help="the papers' sizes and schedule (default; a GPU is advisable)",
    )
    g.add_argument("--seeds", type=int, default=1, help="run seeds 1..N (default 1)")
    g.add_argument(
        "--primary-metric",
        choices=("auto", "em", "bleu", "chrf"),
        default="auto",
        help=f"the metric shown first (default auto: BLEU when the training targets have at least "
        f"{OPEN_VOCABULARY_TYPES} word types, else exact match)",
    )
    g.add_argument(
        "--bleu-tokenize",
        default="13a",
        help="sacrebleu tokenizer of BLEU (default 13a; 'none': the data's own whitespace tokens)",
    )
    g.add_argument("--force", action="store_true", help="re-run finished runs and rebuild the lexicons")
    g.add_argument("--dry-run", action="store_true", help="check the data and print the commands, run nothing")
    g = p.add_argument_group("overrides (passed to the recipes' pipeline, fairseq_lexical_recipes/README.md)")
    for opt, kind, text in (
        ("--max-update", int, "training updates"),
        ("--lr", float, "peak learning rate"),
        ("--warmup-updates", int, "warm-up updates"),
        ("--batch-size", int, "sentences per batch"),
        ("--beam", int, "beam size of fairseq-generate"),
        ("--decode-jobs", int, "fairseq-generate processes"),
        ("--progress-every", float, "seconds between training progress lines"),
    ):
        g.add_argument(opt, type=kind, help=text)
    g.add_argument("--checkpoint", choices=("last", "best"), help="checkpoint to evaluate (default last)")
    g.add_argument("--train-args", help="further fairseq-train options (one quoted string)")
    g.add_argument("--generate-args", help="further fairseq-generate options (one quoted string)")
    p.set_defaults(preset="paper")
    return p


def recipe_options(opts, models: Sequence[str], data_dir: str) -> RecipeOptions:
    """The recipes' options of this program's: its models and seeds, the preset's settings, the overrides given."""
    options = RecipeOptions(
        data=data_dir, work=opts.work, models=",".join(models), seeds=opts.seeds, force=opts.force, dry_run=opts.dry_run
    )
    if opts.preset in ("cpu", "smoke"):
        options = options.but(preset="cpu-small")
    if opts.preset == "smoke":  # the Transformer rows take their schedule from the options (TransformerSettings)
        options = options.but(
            max_update=30, warmup_updates=10, batch_size=16, max_tokens=0, lr=0.005, beam=2, progress_every=600.0
        )
    given = ("max_update", "lr", "warmup_updates", "batch_size", "beam", "decode_jobs", "progress_every", "checkpoint")
    options = options.but(**{name: getattr(opts, name) for name in given if getattr(opts, name) is not None})
    return options.but(train_args=opts.train_args or "", generate_args=opts.generate_args or "")


def build_run(opts: argparse.Namespace) -> Recipe:
    """The recipe of these options, every check made and nothing written: ``.planned_runs()`` gives its (model,
    seed) runs as data, runner.Runner runs it (with this example's CustomReport). Bad input is a RecipeError naming
    the option and file."""
    methods = parse_lexicons(opts.lexicons)
    splits, files = {}, {}
    for role in ("train", "valid", "test"):
        path = getattr(opts, role)
        if path is not None:
            splits[role], files[role] = read_split(role, path, opts.source_lang, opts.target_lang)
    if len(splits["train"]) < 2:
        raise RecipeError(f"--train {opts.train}: {len(splits['train'])} pair; at least 2 are needed")
    work = os.path.abspath(opts.work or os.path.join(os.environ.get("TMPDIR", "/tmp"), "fairseq_lexical_custom"))
    written = [
        (f"--work {work}", f"{work}/data/{name}.{side}")
        for name in ("train", "valid", "test", "lexcorpus")
        for side in ("src", "tgt")
    ]
    try:
        refuse_overwriting_inputs(written, [(f"--{role}", f) for role, paths in files.items() for f in paths])
    except OutputOverwritesInputError as e:
        raise RecipeError(f"{e} (the pipeline writes its copy of the data to WORK/data/)") from None
    task = CustomData(opts, splits, files, primary_metric(splits["train"], opts.primary_metric))
    models = model_names(opts.family, methods)
    opts.work = work
    options = recipe_options(opts, models, os.path.dirname(files["train"][0]))
    settings = None  # the recipes' name and label of the preset, but for these two
    if opts.preset == "smoke":
        settings = (
            "smoke",
            f"SMOKE preset: {options.max_update} updates of CPU-sized models, beam {options.beam} "
            f"(checks that every step runs; the scores mean nothing)",
        )
    elif opts.preset == "cpu":
        settings = (options.preset, "CPU preset (the recipes' --cpu-small settings, not the papers')")
    try:
        recipe = Recipe(task, options, settings)
    except OptionError as e:  # the errors name this program's options, which are the same
        build_parser().error(str(e))
    process.PROGRESS_EVERY = max(1.0, options.progress_every)
    return recipe


def main(argv: Optional[Sequence[str]] = None) -> int:
    opts = build_parser().parse_args(argv)
    return exit_status_of(lambda: Runner(build_run(opts), CustomReport()).run(), PROG)


if __name__ == "__main__":
    sys.exit(main())
