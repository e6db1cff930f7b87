#!/usr/bin/env python
"""A compositional test set for English-Chinese (Zheng & Lapata 2023, section 4, on Akyurek & Andreas' Tatoeba
data), and BLEU of LSTM vs LSTM + Lex. (Simple) vs R-Dangle on it and on the standard random test set.

    bash examples/compositional_split/run.sh [--data DIR] [--work DIR] [options]   # runs this with the venv

Data flow (WORK = --work):
    data/      train (all 19,222 pairs), valid (--valid-size pairs drawn from dev), candidates = the rest of dev +
               all of test, i.e. the Tatoeba pairs not in train; bin/ = fairseq-preprocess (dictionaries from train,
               the candidates as fairseq's `test` split)
    select/    tools/select_compositional.py: pool (OOV filter, compositional degree, the --pool highest) ->
               uncertainty (reverse mutual information of an ensemble of --members small models, members/) ->
               sample (drop the --drop-top most uncertain, draw --sample of the next --window, --sample-seed)
               => compositional_test.tsv (English<TAB>Chinese), the new test set
    systems/   the compared systems (--systems; fairseq_lexical_recipes' --cpu-small commands, --system-updates)
    eval/      each system translates every candidate once (fairseq-generate); the standard test set (the candidates
               from test), the selected set and the pool are cut out of that output (eval/sets/) and scored with
               tools/score.py (BLEU on the tokens, and --tokenize zh); eval/<system>/score.json; eval/by_degree.*
               from tools/plot_by_degree.py
    results.json, results.md   the tables

A step is skipped when its outputs exist and its command and input files are unchanged (WORK/stamps/); --force
redoes everything. Every file is written under the recipes' ownership rules (recipes/ownership.py): a file of a name
the pipeline writes (Split.writes) that it did not write stops it before anything is written. The training and
decoding commands are fairseq_lexical_recipes' (those of examples/eng_cmn/run.sh --cpu-small), built by its Recipe
class.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import os
import platform
import random
import re
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Dict, List, Optional, Sequence

from lexical_offline.textio import TextFileError, read_lines, read_tsv, read_tsv_pairs, write_lines, write_parallel

# fairseq_lexical_recipes: models, --cpu-small settings, commands, run_logged
from fairseq_lexical_recipes import ROOT, commands, ownership, process
from fairseq_lexical_recipes.catalogue import LEXICON_METHODS, MODELS
from fairseq_lexical_recipes.console import RecipeError, hms, say, show
from fairseq_lexical_recipes.invocation import check_bounds
from fairseq_lexical_recipes.process import run_logged
from fairseq_lexical_recipes.rundir import PREPROCESS_WRITES, RUN_WRITES, lock_work_directory
from fairseq_lexical_recipes.options import RecipeOptions
from fairseq_lexical_recipes.recipe import Recipe
from fairseq_lexical_recipes.steps import Step
from fairseq_lexical_recipes.tasks import TASKS
from fairseq_lexical_recipes.textio import read_json, sha1_files, write_json

SELECT = os.path.join(ROOT, "tools", "select_compositional.py")
DATA_FILES = {
    "train": "cmn.txt_train_tokenized.tsv",
    "dev": "cmn.txt_dev_tokenized.tsv",
    "test": "cmn.txt_test_tokenized.tsv",
}
SETS = (("test", "standard test"), ("selected", "selected (compositional)"), ("pool", "pool"))
PY = sys.executable
# what select_compositional.py writes beside its --out-prefix (pool, uncertainty -o, sample)
SELECT_OUTPUTS = ("candidates.tsv", "pool.tsv", "pool.src", "pool.tgt", "pool.json", "uncertainty.tsv")
SELECT_OUTPUTS += ("uncertainty.json", "sample.tsv", "sample.json", "selected.ids", "selected.src", "selected.tgt")


def exactly(*names: str) -> "re.Pattern[str]":
    return re.compile("|".join(re.escape(n) for n in names))


class SplitError(RecipeError):
    pass


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="bash examples/compositional_split/run.sh",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
        description="Select a compositional test set from the English-Chinese pairs not in train (dev + test) with "
        "an ensemble of small models, then compare systems on it and on the standard test set "
        "(examples/compositional_split/README.md).",
    )
    g = p.add_argument_group("data and output")
    g.add_argument(
        "--data",
        default=os.path.join(os.path.dirname(ROOT), "shared", "data", "eng_cmn"),
        help="directory holding " + ", ".join(DATA_FILES.values()),
    )
    g.add_argument(
        "--work",
        default=os.path.join(os.environ.get("TMPDIR", "/tmp"), "fairseq_lexical_compositional_split"),
        help="work directory",
    )
    g.add_argument("--valid-size", type=int, default=300, help="dev pairs held out for validation (not candidates)")
    g.add_argument("--valid-seed", type=int, default=0, help="seed of the validation draw")
    g.add_argument("--limit-train", type=int, default=0, help="use the first N training pairs only (0: all; tests)")
    g.add_argument(
        "--limit-eval", type=int, default=0, help="use the first N pairs of dev and of test only (0: all; tests)"
    )
    g = p.add_argument_group("selection (tools/select_compositional.py; the paper's sizes scaled down)")
    g.add_argument(
        "--min-word-count",
        type=int,
        default=3,
        help="OOV filter: drop candidates with an English word seen fewer times in train (paper 3)",
    )
    g.add_argument("--pool", type=int, default=2000, help="candidates kept by compositional degree (paper 60000)")
    g.add_argument("--members", type=int, default=3, help="ensemble size (paper 10)")
    g.add_argument("--member-model", default="lstm", help="fairseq_lexical_recipes model of the members")
    g.add_argument("--member-updates", type=int, default=600, help="training updates of each member")
    g.add_argument("--uncertainty-beam", type=int, default=5, help="beam of the ensemble's decoding")
    g.add_argument("--drop-top", type=int, default=100, help="most uncertain pool candidates dropped (paper 2000)")
    g.add_argument("--window", type=int, default=1000, help="next most uncertain to sample from (paper 18000)")
    g.add_argument("--sample", type=int, default=500, help="size of the selected test set (paper 3000)")
    g.add_argument("--sample-seed", type=int, default=1, help="seed of the sample")
    g = p.add_argument_group("systems compared")
    g.add_argument(
        "--systems",
        default="lstm,simple,rdangle_sep",
        help="fairseq_lexical_recipes models (lstm: LSTM, simple: LSTM + Lex.: Simple, "
        "rdangle_sep: R-Dangle sep, interval 4)",
    )
    g.add_argument("--system-updates", type=int, default=1500, help="training updates of each system")
    g.add_argument(
        "--system-seed",
        type=int,
        default=100,
        help="training seed of the systems (not a member's: the LSTM row must not be one of the models "
        "that chose the test set)",
    )
    g.add_argument(
        "--decoder",
        choices=("fairseq", "authors"),
        default="fairseq",
        help="LSTM rows' decoder (fairseq_lexical_recipes --decoder): fairseq's LSTM decoder with eq. 6's "
        "gate (what examples/RESULTS.md's run used), or the authors' released decoder",
    )
    g.add_argument("--max-len-b", type=int, default=200, help="longest output of any decoding (tokens)")
    g.add_argument("--plot-a", default="simple", help="plot_by_degree: system A (the difference is A - B)")
    g.add_argument("--plot-b", default="lstm", help="plot_by_degree: system B")
    g = p.add_argument_group("running")
    g.add_argument(
        "--jobs", type=int, default=1, help="training/decoding runs at a time (members; systems); each uses one thread"
    )
    g.add_argument("--force", action="store_true", help="redo every step")
    g.add_argument(
        "--progress-every",
        type=float,
        default=60.0,
        metavar="SECONDS",
        help="how often a training run reports its update count",
    )
    return p


# ----------------------------------------------------------------------------------------------------------------
# Steps: a command run once, skipped when its outputs exist and its stamp (command + input files) is unchanged
# ----------------------------------------------------------------------------------------------------------------


class Runner:
    def __init__(self, work: str, force: bool, jobs: int):
        self.work, self.force, self.jobs = work, force, jobs
        self.stamps = stamps_of(work)
        os.makedirs(self.stamps, exist_ok=True)
        self.seconds: Dict[str, float] = {}

    def run(
        self,
        name: str,
        cmd: Sequence[str],
        inputs: Sequence[str],
        outputs: Sequence[str],
        log: str,
        stdout: Optional[str] = None,
        progress: Optional[str] = None,
    ) -> None:
        """Run cmd (stdout to `stdout` or the log, stderr to the log) unless up to date."""
        step = Step(
            name,
            os.path.join(self.stamps, stamp_name(name)),
            {"command": show(cmd).replace(self.work, "$WORK"), "inputs_sha1": sha1_files(inputs)},
            outputs,
            log,
        )
        secs = None
        if self.force or not step.up_to_date():
            with contextlib.ExitStack() as stack:  # what the step writes in these folders is the pipeline's
                for d in sorted({os.path.dirname(p) for p in (*outputs, log, stdout, step.stamp) if p}):
                    stack.enter_context(ownership.writing(d))
                secs = step.run(
                    lambda: run_logged(cmd, stdout or log, log if stdout else None, what=name, progress=progress), True
                )
        if secs is None:
            self.seconds[name] = step.seconds()  # the time it took when it ran
            say(f"   {name}: up to date")
        else:
            self.seconds[name] = round(secs, 1)
            say(f"   {name}: done ({hms(secs)})")

    def parallel(self, tasks: Sequence[Callable[[], None]]) -> None:
        """Run the tasks, --jobs at a time; the first error is raised once all have ended."""
        if self.jobs <= 1:
            for t in tasks:
                t()
            return
        # the stamps' folder, which every task writes, is recorded once, by this thread
        with ownership.writing(self.stamps), ThreadPoolExecutor(self.jobs) as pool:
            futures = [pool.submit(t) for t in tasks]
        for f in futures:
            f.result()


def stamps_of(work: str) -> str:
    return os.path.join(work, "stamps")


def stamp_name(step: str) -> str:
    return step.replace("/", "_") + ".json"


# ----------------------------------------------------------------------------------------------------------------
# Files
# ----------------------------------------------------------------------------------------------------------------


def locate(data: str) -> Dict[str, str]:
    files = {}
    for role, name in DATA_FILES.items():
        path = os.path.join(data, name)
        if not os.path.isfile(path):
            raise SplitError(
                f"data file not found: {path} (--data must hold {', '.join(DATA_FILES.values())}: "
                "TRANSLATE/ of github.com/ekinakyurek/lexical; see "
                "examples/compositional_split/README.md)"
            )
        files[role] = path
    return files


def prepare(args, files: Dict[str, str], data_dir: str) -> Dict[str, int]:
    """train / valid / candidates (+ candidates.origin: dev:LINE or test:LINE, 1-based lines of the TSV files)."""
    train, dev, test = (read_tsv_pairs(files[k]) for k in ("train", "dev", "test"))  # TextFileError: path:line
    if args.limit_train:
        train = train[: args.limit_train]
    if args.limit_eval:
        dev, test = dev[: args.limit_eval], test[: args.limit_eval]
    if not 0 < args.valid_size < len(dev):
        raise SplitError(f"--valid-size {args.valid_size}: must be 1..{len(dev) - 1} (dev has {len(dev)} pairs)")
    held = set(random.Random(args.valid_seed).sample(range(len(dev)), args.valid_size))
    valid = [p for i, p in enumerate(dev) if i in held]
    cand = [p for i, p in enumerate(dev) if i not in held] + test
    origin = [f"dev:{i + 1}" for i in range(len(dev)) if i not in held] + [f"test:{i + 1}" for i in range(len(test))]
    with ownership.writing(data_dir):
        write_parallel(f"{data_dir}/train", train)
        write_parallel(f"{data_dir}/lexcorpus", train)  # the lexicon is learned from train (the recipes' file layout)
        write_parallel(f"{data_dir}/valid", valid)
        write_parallel(f"{data_dir}/candidates", cand)
        write_lines(f"{data_dir}/candidates.origin", origin)
    say(
        f"== data: {len(train)} train, {len(valid)} validation (dev pairs drawn with seed {args.valid_seed}), "
        f"{len(cand)} candidates ({len(dev) - len(valid)} rest of dev + {len(test)} test)"
    )
    return {
        "train": len(train),
        "valid": len(valid),
        "candidates": len(cand),
        "candidates_from_dev": len(dev) - len(valid),
        "candidates_from_test": len(test),
    }


def recipe_for(args, work: str, models: Sequence[str], updates: int) -> Recipe:
    """fairseq_lexical_recipes' Recipe with --cpu-small settings, its data-bin and lexicons in this example's WORK."""
    options = RecipeOptions(
        data=args.data,
        work=work,
        preset="cpu-small",
        models=",".join(models),
        max_update=updates,
        decoder=args.decoder,
        train_args="--cpu",
        generate_args="--cpu",
        max_len_b=args.max_len_b,
    )
    return Recipe(TASKS["eng_cmn"](), options)


def mean(values: Sequence[float]) -> Optional[float]:
    return sum(values) / len(values) if values else None


def fmt(x, digits=2) -> str:
    return "n/a" if x is None else f"{x:.{digits}f}"


# ----------------------------------------------------------------------------------------------------------------
# The pipeline
# ----------------------------------------------------------------------------------------------------------------


class Split:
    def __init__(self, args):
        self.args = args
        self.work = os.path.abspath(args.work)
        self.data, self.bin, self.sel = f"{self.work}/data", f"{self.work}/bin", f"{self.work}/select/sel"
        self.eval = f"{self.work}/eval"
        self.systems = [s.strip() for s in args.systems.split(",") if s.strip()]
        for m in self.systems + [args.member_model]:
            if m not in MODELS:
                raise SplitError(f"unknown model {m!r} (fairseq_lexical_recipes models: {', '.join(MODELS)})")
        if MODELS[args.member_model].lexicon in LEXICON_METHODS:
            raise SplitError("--member-model: choose a model without a learned lexicon (lstm, transformer, ...)")
        names = ("pool", "drop_top", "window", "sample", "members", "member_updates", "system_updates", "jobs")
        check_bounds([(f"--{name.replace('_', '-')}", getattr(args, name), 1) for name in names])
        self.files = locate(args.data)
        self.members = recipe_for(args, self.work, [args.member_model], args.member_updates)
        self.rec = recipe_for(args, self.work, self.systems, args.system_updates)
        earlier = self.earlier_work()
        if not earlier:  # (an earlier version's WORK is checked once adopted, under the lock)
            self.check_before_writing()  # a refusal leaves WORK as it was
        os.makedirs(self.work, exist_ok=True)
        self._lock = lock_work_directory(self.work)  # held until the process ends
        if earlier:
            for directory, names in self.writes().items():
                ownership.adopt([directory], names)
        self.check_before_writing()  # unchanged since, now that no other driver can write
        for d in (os.path.dirname(self.sel), f"{self.eval}/sets"):
            os.makedirs(d, exist_ok=True)
        self.runner = Runner(self.work, args.force, args.jobs)

    def lexicon_methods(self) -> List[str]:
        return sorted({MODELS[m].lexicon for m in self.systems} & set(LEXICON_METHODS))

    def writes(self) -> Dict[str, "re.Pattern[str]"]:
        """Every directory this invocation writes into, and the names it writes there."""
        a, w = self.args, self.work
        sets, members = [name for name, _ in SETS], range(1, a.members + 1)
        steps = ["preprocess", "pool", "uncertainty", "sample", *(f"members/seed{k}" for k in members)]
        steps += [f"lexicon_{method}" for method in self.lexicon_methods()]
        steps += [f"systems/{m}/{step}" for m in self.systems for step in ("train", "generate")]
        steps += [f"novelty_{name}" for name in sets] + ["plot_candidates", "plot_selected"]
        texts = [
            f"{split}.{side}" for split in ("train", "lexcorpus", "valid", "candidates") for side in ("src", "tgt")
        ]
        out = {
            w: exactly("compositional_test.tsv", "results.json", "results.md", "preprocess.log"),
            stamps_of(w): exactly(*map(stamp_name, steps)),
            self.data: exactly("candidates.origin", *texts),
            self.bin: PREPROCESS_WRITES,
            os.path.dirname(self.sel): exactly(
                *(f"sel.{x}" for x in SELECT_OUTPUTS), "pool.log", "uncertainty.log", "sample.log"
            ),
            self.eval: exactly(
                *(f"by_degree.{n}.{x}" for n in ("candidates", "selected") for x in ("png", "tsv", "json", "log"))
            ),
            f"{self.eval}/sets": exactly(
                "selected.degrees.tsv",
                *(f"{n}.{x}" for n in sets for x in ("ids", "src", "tgt", "novelty.json", "novelty.log")),
            ),
        }
        if self.lexicon_methods():
            out[self.rec.invocation.layout.lexicons] = exactly(
                *(f"{m}.{x}" for m in self.lexicon_methods() for x in ("tsv", "log"))
            )
        for k in members:
            out[f"{w}/members/seed{k}"] = RUN_WRITES
        for m in self.systems:
            out[f"{w}/systems/{m}"] = RUN_WRITES
            hyps = [f"{n}.{x}" for n in ("candidates", *sets) for x in ("gen", "hyp")]
            out[f"{self.eval}/{m}"] = exactly("score.json", *hyps)
        return out

    def check_before_writing(self) -> None:
        """A file of a name this invocation writes that is not the pipeline's stops it, with nothing written."""
        found = [p for d, names in self.writes().items() for p in ownership.foreign_in(d, names)]
        ownership.refuse_foreign(found, "this run of the pipeline")

    def earlier_work(self) -> bool:
        """Whether WORK was made by a version of this pipeline before the ownership records (its stamps, no record
        beside them): its files are then adopted by the names the pipeline writes."""
        stamp = os.path.join(stamps_of(self.work), stamp_name("preprocess"))
        if os.path.exists(f"{self.work}/{ownership.OWNED}") or not os.path.isfile(stamp):
            return False
        try:
            recorded = read_json(stamp)
        except RecipeError:
            return False
        return isinstance(recorded, dict) and "command" in recorded and "inputs_sha1" in recorded

    def preprocess(self) -> None:
        say("== fairseq-preprocess (the candidates are the `test` split: every system translates all of them once)")
        d = self.data
        self.runner.run(
            "preprocess",
            commands.preprocess({"train": f"{d}/train", "valid": f"{d}/valid", "test": f"{d}/candidates"}, self.bin),
            [f"{d}/{s}.{l}" for s in ("train", "valid", "candidates") for l in ("src", "tgt")],
            [f"{self.bin}/dict.src.txt", f"{self.bin}/test.src-tgt.src.bin"],
            f"{self.work}/preprocess.log",
        )

    def pool(self) -> dict:
        # the English side: the source here, and the language of the paper's degree examples
        a, d, sel = self.args, self.data, self.sel
        say(f"== pool: OOV filter (--min-word-count {a.min_word_count}), compositional degree, the {a.pool} highest")
        self.runner.run(
            "pool",
            [
                PY,
                SELECT,
                "pool",
                "--train-source",
                f"{d}/train.src",
                "--source",
                f"{d}/candidates.src",
                "--target",
                f"{d}/candidates.tgt",
                "--min-word-count",
                str(a.min_word_count),
                "--pool",
                str(a.pool),
                "--out-prefix",
                sel,
                "--no-progress",
            ],
            [f"{d}/train.src", f"{d}/candidates.src", f"{d}/candidates.tgt"],
            [f"{sel}.pool.tsv", f"{sel}.candidates.tsv", f"{sel}.pool.json"],
            f"{self.work}/select/pool.log",
        )
        info = read_json(f"{sel}.pool.json")
        lo, hi = info["pool_degree_range"]
        say(
            f"   {info['passed_oov_filter']} of {info['candidates']} candidates pass the OOV filter; pool "
            f"{info['pool']}, degree {fmt(lo, 3)} .. {fmt(hi, 3)}"
        )
        return info

    def ensemble(self) -> List[str]:
        a, rec = self.args, self.members
        say(
            f"== ensemble: {a.members} x {rec.label(a.member_model)}, seeds 1..{a.members}, {a.member_updates} "
            f"updates each, on train"
        )
        outs = [f"{self.work}/members/seed{seed}" for seed in range(1, a.members + 1)]

        def train(seed: int, out: str) -> Callable[[], None]:
            def task():
                os.makedirs(out, exist_ok=True)
                self.runner.run(
                    f"members/seed{seed}",
                    rec.train_command(a.member_model, seed, out),
                    [
                        f"{self.bin}/dict.src.txt",
                        f"{self.bin}/train.src-tgt.src.bin",
                        f"{self.bin}/train.src-tgt.tgt.bin",
                    ],
                    [rec.checkpoint_path(out, a.member_model)],
                    f"{out}/train.log",
                    progress=f"   member seed {seed}: ",
                )

            return task

        self.runner.parallel([train(seed, out) for seed, out in enumerate(outs, 1)])
        return [rec.checkpoint_path(out, a.member_model) for out in outs]

    def select(self, checkpoints: Sequence[str]) -> List[int]:
        a, sel = self.args, self.sel
        say(
            f"== uncertainty: reverse mutual information of the {len(checkpoints)} members on the pool (the ensemble "
            f"decodes, beam {a.uncertainty_beam}; every member is teacher-forced on that output)"
        )
        self.runner.run(
            "uncertainty",
            [
                PY,
                SELECT,
                "uncertainty",
                "--pool",
                f"{sel}.pool.tsv",
                "--data",
                self.bin,
                "--path",
                ":".join(checkpoints),
                "--targets",
                "decode",
                "--beam",
                str(a.uncertainty_beam),
                "--max-len-b",
                str(a.max_len_b),
                "-o",
                f"{sel}.uncertainty.tsv",
                "--no-progress",
            ],
            [f"{sel}.pool.tsv", *checkpoints],
            [f"{sel}.uncertainty.tsv"],
            f"{self.work}/select/uncertainty.log",
        )
        say(
            f"== sample: drop the {a.drop_top} most uncertain, draw {a.sample} of the next {a.window} "
            f"(seed {a.sample_seed})"
        )
        self.runner.run(
            "sample",
            [
                PY,
                SELECT,
                "sample",
                "--scores",
                f"{sel}.uncertainty.tsv",
                "--drop-top",
                str(a.drop_top),
                "--window",
                str(a.window),
                "--sample",
                str(a.sample),
                "--seed",
                str(a.sample_seed),
                "--out-prefix",
                sel,
            ],
            [f"{sel}.uncertainty.tsv"],
            [f"{sel}.sample.tsv", f"{sel}.selected.ids"],
            f"{self.work}/select/sample.log",
        )
        ids = [int(x) for x in read_lines(f"{sel}.selected.ids") if x.strip()]
        src, tgt = read_lines(f"{sel}.selected.src"), read_lines(f"{sel}.selected.tgt")
        with ownership.writing(self.work):
            write_lines(f"{self.work}/compositional_test.tsv", [f"{s}\t{t}" for s, t in zip(src, tgt)])
        say(f"   the new test set: {len(ids)} pairs in {self.work}/compositional_test.tsv")
        return ids

    def train_systems(self) -> Dict[str, str]:
        """Lexicons, then each system trained on train and translating every candidate; its fairseq-generate file."""
        a, rec = self.args, self.rec
        for method in sorted({MODELS[m].lexicon for m in self.systems} & set(LEXICON_METHODS)):
            say(f"== lexicon: {LEXICON_METHODS[method][1]}")
            os.makedirs(rec.invocation.layout.lexicons, exist_ok=True)
            self.runner.run(
                f"lexicon_{method}",
                rec.lexicon_command(method),
                [f"{self.data}/lexcorpus.src", f"{self.data}/lexcorpus.tgt"],
                [rec.lexicon_path(method)],
                f"{rec.invocation.layout.lexicons}/{method}.log",
            )
        say(
            f"== systems: {', '.join(rec.label(m) for m in self.systems)}; {a.system_updates} updates, seed "
            f"{a.system_seed}"
        )
        gens = {m: f"{self.eval}/{m}/candidates.gen" for m in self.systems}

        def system(model: str) -> Callable[[], None]:
            def task():
                out = f"{self.work}/systems/{model}"
                os.makedirs(out, exist_ok=True)
                os.makedirs(os.path.dirname(gens[model]), exist_ok=True)
                lexicon = MODELS[model].lexicon
                inputs = [f"{self.bin}/dict.src.txt", f"{self.bin}/train.src-tgt.src.bin"]
                if lexicon in LEXICON_METHODS:
                    inputs.append(rec.lexicon_path(lexicon))
                self.runner.run(
                    f"systems/{model}/train",
                    rec.train_command(model, a.system_seed, out),
                    inputs,
                    [rec.checkpoint_path(out, model)],
                    f"{out}/train.log",
                    progress=f"   {model}: ",
                )
                self.runner.run(
                    f"systems/{model}/generate",
                    rec.generate_command(out, model),
                    [rec.checkpoint_path(out, model), f"{self.bin}/test.src-tgt.src.bin"],
                    [gens[model]],
                    f"{out}/generate.log",
                    stdout=gens[model],
                )

            return task

        self.runner.parallel([system(m) for m in self.systems])
        return gens

    def subsets(self, selected: Sequence[int]) -> Dict[str, List[int]]:
        """Candidate indices of the standard test set, the selected set and the pool; eval/sets/NAME.{ids,src,tgt}."""
        origin = read_lines(f"{self.data}/candidates.origin")
        src, tgt = read_lines(f"{self.data}/candidates.src"), read_lines(f"{self.data}/candidates.tgt")
        _, pool = read_tsv(f"{self.sel}.pool.tsv", required=("index",))
        sets = {
            "test": [i for i, o in enumerate(origin) if o.startswith("test:")],
            "selected": list(selected),
            "pool": sorted(int(r["index"]) for r in pool),
        }
        with ownership.writing(f"{self.eval}/sets"):
            for name, ids in sets.items():
                write_lines(f"{self.eval}/sets/{name}.ids", [str(i) for i in ids])
                write_lines(f"{self.eval}/sets/{name}.src", [src[i] for i in ids])
                write_lines(f"{self.eval}/sets/{name}.tgt", [tgt[i] for i in ids])
        return sets

    def score(self, gens: Dict[str, str], sets: Dict[str, List[int]]) -> Dict[str, dict]:
        """tools/score.py on each (system, set): the set's hypotheses cut out of the system's output, written as a
        fairseq-generate file (S and H lines, ids renumbered) so that score.py reads it as it reads any output."""
        from lexical_offline.metrics.generate_output import parse_generate_output

        say("== scoring (tools/score.py --bleu: on the tokens, and with --tokenize zh)")
        src = read_lines(f"{self.data}/candidates.src")
        scores = {}
        for model, gen in gens.items():
            hyps = parse_generate_output(gen, expected=len(src)).hypotheses
            d = os.path.dirname(gen)
            with ownership.writing(d):
                write_lines(f"{d}/candidates.hyp", hyps)
                scores[model] = {}
                for name, ids in sets.items():
                    with open(f"{d}/{name}.gen", "w", encoding="utf-8") as f:
                        for k, i in enumerate(ids):
                            f.write(f"S-{k}\t{src[i]}\nH-{k}\t0\t{hyps[i]}\n")
                    write_lines(f"{d}/{name}.hyp", [hyps[i] for i in ids])
                    entry: Dict[str, object] = {"n": len(ids)}
                    for tok, key in (("none", "bleu"), ("zh", "bleu_zh")):
                        cmd = commands.score(
                            f"{d}/{name}.gen", f"{self.eval}/sets/{name}.tgt", ["--bleu", "--tokenize", tok]
                        )
                        proc = subprocess.run(cmd, capture_output=True, text=True)
                        if proc.returncode != 0:
                            raise SplitError(
                                f"score.py failed on {d}/{name}.gen: {proc.stderr.strip()}\ncommand: {show(cmd)}"
                            )
                        result = json.loads(proc.stdout)
                        entry[key], entry[key + "_signature"] = result["bleu"], result["bleu_signature"]
                        entry["exact_match"] = result["exact_match"]
                    scores[model][name] = entry
                write_json(f"{d}/score.json", scores[model])
            say(
                f"   {model}: "
                + "; ".join(f"{n} BLEU {fmt(e['bleu'])} (zh {fmt(e['bleu_zh'])})" for n, e in scores[model].items())
            )
        return scores

    def describe_sets(self, sets: Dict[str, List[int]]) -> Dict[str, dict]:
        """Per set: length, how many pass the OOV filter, mean RMI (pool members only), and Table 2's columns
        (select_compositional.py novelty on the English side: mean degree, unique novel word 2-/3-grams)."""
        src = read_lines(f"{self.data}/candidates.src")
        _, sample = read_tsv(f"{self.sel}.sample.tsv", required=("index",))
        _, candidates = read_tsv(f"{self.sel}.candidates.tsv", required=("index",))
        rmi = {int(r["index"]): float(r["rmi"]) for r in sample if r.get("rmi") not in (None, "", "nan")}
        degree = {int(r["index"]) for r in candidates if r.get("degree") not in ("", None)}
        info = {}
        for name, ids in sets.items():
            nov = f"{self.eval}/sets/{name}.novelty.json"
            self.runner.run(
                f"novelty_{name}",
                [
                    PY,
                    SELECT,
                    "novelty",
                    "--train",
                    f"{self.data}/train.src",
                    "--test",
                    f"{self.eval}/sets/{name}.src",
                    "--json",
                    nov,
                ],
                [f"{self.data}/train.src", f"{self.eval}/sets/{name}.src"],
                [nov],
                f"{self.eval}/sets/{name}.novelty.log",
            )
            n = read_json(nov)
            rmis = [rmi[i] for i in ids if i in rmi]
            info[name] = {
                "n": len(ids),
                "mean_length": mean([len(src[i].split()) for i in ids]),
                "pass_oov_filter": sum(i in degree for i in ids),
                "mean_degree": n.get("degree", {}).get("mean_degree"),
                "novel_2grams": n["words"]["orders"]["2"]["unique_novel"],
                "novel_3grams": n["words"]["orders"]["3"]["unique_novel"],
                "mean_rmi": mean(rmis),
                "with_rmi": len(rmis),
            }
        return info

    def plots(self, selected: Sequence[int]) -> Dict[str, str]:
        """BLEU of A - B by compositional degree (Fig. 1a): over every candidate with a degree (those that pass the
        OOV filter, as the paper's figure), and over the selected set."""
        a = self.args
        if a.plot_a not in self.systems or a.plot_b not in self.systems:
            say(f"   (no plot: --plot-a {a.plot_a} and --plot-b {a.plot_b} must both be in --systems)")
            return {}
        _, sample = read_tsv(f"{self.sel}.sample.tsv", required=("index", "degree"))
        degree = {int(r["index"]): r["degree"] for r in sample}
        with ownership.writing(f"{self.eval}/sets"):
            write_lines(
                f"{self.eval}/sets/selected.degrees.tsv", ["index\tdegree"] + [f"{i}\t{degree[i]}" for i in selected]
            )
        names = {m: MODELS[m].label for m in (a.plot_a, a.plot_b)}
        out = {}
        for name, degrees, ref, buckets in (
            ("candidates", f"{self.sel}.candidates.tsv", f"{self.data}/candidates.tgt", 10),
            ("selected", f"{self.eval}/sets/selected.degrees.tsv", f"{self.eval}/sets/selected.tgt", 5),
        ):
            prefix = f"{self.eval}/by_degree.{name}"
            hyp_a, hyp_b = f"{self.eval}/{a.plot_a}/{name}.hyp", f"{self.eval}/{a.plot_b}/{name}.hyp"
            self.runner.run(
                f"plot_{name}",
                [
                    PY,
                    os.path.join(ROOT, "tools", "plot_by_degree.py"),
                    "--degrees",
                    degrees,
                    "--reference",
                    ref,
                    "--hyp-a",
                    hyp_a,
                    "--hyp-b",
                    hyp_b,
                    "--name-a",
                    names[a.plot_a],
                    "--name-b",
                    names[a.plot_b],
                    "--buckets",
                    str(buckets),
                    "-o",
                    prefix,
                    "--title",
                    f"{name}: {names[a.plot_a]} - {names[a.plot_b]}",
                ],
                [degrees, ref, hyp_a, hyp_b],
                [prefix + ".png", prefix + ".json"],
                prefix + ".log",
            )
            out[name] = prefix + ".png"
        return out


def results_markdown(results: dict) -> str:
    sets, systems = results["sets"], results["settings"]["systems"]
    lines = [
        "BLEU, tools/score.py on the tokens / with `--tokenize zh` [REDUCED CPU configuration]",
        "",
        "| system | arch | " + " | ".join(f"{label} ({sets[k]['n']})" for k, label in SETS) + " |",
        "|---|---|" + "---|" * len(SETS),
    ]
    for m, spec in systems.items():
        s = results["scores"][m]
        lines.append(
            f"| {spec['label']} | `{spec['arch']}` | "
            + " | ".join(f"{fmt(s[k]['bleu'])} / {fmt(s[k]['bleu_zh'])}" for k, _ in SETS)
            + " |"
        )
    lines += [
        "",
        "| set | pairs | pass OOV filter | mean length (English words) | mean degree | mean RMI | "
        "novel 2-grams | novel 3-grams |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for k, label in SETS:
        i = sets[k]
        rmi = fmt(i["mean_rmi"], 4)
        if 0 < i["with_rmi"] < i["n"]:  # only pool candidates were scored by the ensemble
            rmi += f" ({i['with_rmi']} in the pool)"
        lines.append(
            f"| {label} | {i['n']} | {i['pass_oov_filter']} | {fmt(i['mean_length'])} | "
            f"{fmt(i['mean_degree'], 3)} | {rmi} | {i['novel_2grams']} | {i['novel_3grams']} |"
        )
    return "\n".join(lines)


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    start = time.time()
    process.PROGRESS_EVERY = args.progress_every
    split = Split(args)
    say(f"== compositional split: work directory {split.work}")
    say(
        "   [REDUCED CPU configuration: fairseq_lexical_recipes --cpu-small models and settings, selection sizes "
        "scaled down; not the paper's]"
    )
    counts = prepare(args, split.files, split.data)
    split.preprocess()
    pool_info = split.pool()
    checkpoints = split.ensemble()
    selected = split.select(checkpoints)
    gens = split.train_systems()
    sets = split.subsets(selected)
    scores = split.score(gens, sets)
    sets_info = split.describe_sets(sets)
    plots = split.plots(selected)

    wall = time.time() - start
    settings = {
        "configuration": "REDUCED CPU configuration: fairseq_lexical_recipes --cpu-small models and settings, "
        "selection sizes scaled down to the ~4.5k candidates; not the paper's",
        "members": {
            "model": args.member_model,
            "arch": split.members.arch(MODELS[args.member_model]),
            "k": args.members,
            "seeds": list(range(1, args.members + 1)),
            "updates": args.member_updates,
        },
        "systems": {m: {"label": MODELS[m].label, "arch": split.rec.arch(MODELS[m])} for m in split.systems},
        "system_updates": args.system_updates,
        "system_seed": args.system_seed,
        "selection": {
            "side": "source (English)",
            "min_word_count": args.min_word_count,
            "pool": args.pool,
            "uncertainty": f"reverse mutual information, decode, beam {args.uncertainty_beam}",
            "drop_top": args.drop_top,
            "window": args.window,
            "sample": args.sample,
            "sample_seed": args.sample_seed,
        },
        "valid": {"size": args.valid_size, "seed": args.valid_seed, "from": "dev"},
        "limits": {"train": args.limit_train, "eval": args.limit_eval},
        "max_len_b": args.max_len_b,
        "lstm_decoder": args.decoder,
    }
    results = {
        "command": show(sys.argv),
        "date": datetime.date.today().isoformat(),
        "host": {"machine": platform.machine(), "cpus": os.cpu_count(), "python": platform.python_version()},
        "data": counts,
        "pool": {
            k: pool_info[k] for k in ("candidates", "passed_oov_filter", "pool", "pool_degree_range", "status_counts")
        },
        "settings": settings,
        "sets": sets_info,
        "scores": scores,
        "plots": plots,
        "step_seconds": split.runner.seconds,
        "wall_seconds": round(wall, 1),
    }
    table = results_markdown(results)
    with ownership.writing(split.work):
        write_json(f"{split.work}/results.json", results)
        with open(f"{split.work}/results.md", "w", encoding="utf-8") as f:
            f.write(table + "\n")
    say("\n" + table)
    say(f"\n== wrote {split.work}/results.json, results.md, compositional_test.tsv ({hms(wall)} in all)")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except (RecipeError, TextFileError) as e:  # TextFileError: a file of WORK, named with its line
        print(f"run.sh: error: {e}", file=sys.stderr)
        sys.exit(2)
    except KeyboardInterrupt:
        sys.exit(130)
