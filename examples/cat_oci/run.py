#!/usr/bin/env python
"""Catalan -> Occitan on the 5,500 Tatoeba pairs of ../shared/data/cat_oci: NMT vs PGN vs PGN + lexicon at 1k /
2.5k / 5k training pairs, after the set-up of Bafna & Yarowsky (2024), section 4 (see examples/cat_oci/README.md).

    bash examples/cat_oci/run.sh [--cpu-small] [--cpu] [--sizes 1000,2500,5000] [--systems nmt,pgn,pgn_lex] ...

split (seeded; dev/test sources never occur in training) -> for each training size: joint SentencePiece BPE model
on that size's training pairs (both sides) -> pieces -> fairseq-preprocess (one joined dictionary = the
SentencePiece vocabulary) -> lexicon over pieces (tools/build_lexicon.py, for pgn_lex) -> for each system and seed:
fairseq-train -> fairseq-generate (SentencePiece-decoded D lines) -> tools/score.py (BLEU 13a, chrF) -> table.

WORK layout: data/{train,valid,test}.{ca,oc} + split.json; n<SIZE>/{spm.model, dict.txt, pieces/, bin/,
lexicon.tsv}; n<SIZE>/<system>/seed<S>/{config.json, train.log, generate.txt, score.json, run.json}; summary.json.
A run whose score.json exists with the same commands is skipped (run again to resume after an interruption). Every
file is written under the recipes' ownership rules (recipes/ownership.py): a file of a name the driver writes that
it did not write stops it before anything is written (Experiment.writes).
"""

from __future__ import annotations

import argparse
import collections
import datetime
import os
import platform
import random
import re
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, replace
from typing import Dict, List, Optional, Tuple

from lexical_offline.textio import read_lines, write_parallel
from lexical_offline.metrics.aggregate import aggregate_dir, format_mean_std

# fairseq_lexical_recipes: the runner helpers and Transformer training settings
from fairseq_lexical_recipes import ROOT, commands, fairseq_log, ownership, process
from fairseq_lexical_recipes.console import RecipeError, exit_status_of, hms, say, show
from fairseq_lexical_recipes.execute import RunSpec, execute_run
from fairseq_lexical_recipes.process import run_logged
from fairseq_lexical_recipes.rundir import (
    PREPROCESS_WRITES,
    RUN_WRITES,
    lock_work_directory,
    refuse_foreign_writes,
    remove_owned,
)
from fairseq_lexical_recipes.settings import TRANSFORMER_CPU_SMALL, TRANSFORMER_PAPER, TransformerSettings
from fairseq_lexical_recipes.steps import Step
from fairseq_lexical_recipes.textio import count_entries, read_corpus, read_json, sha1_files, write_json

DEFAULT_DATA = os.path.join(os.path.dirname(ROOT), "shared", "data", "cat_oci")
FILES = {"ca": "tatoeba.ca", "oc": "tatoeba.oc"}
SPLITS = ("train", "valid", "test")


def exactly(*names: str) -> "re.Pattern[str]":
    return re.compile("|".join(re.escape(n) for n in names))


@dataclass(frozen=True)
class System:
    label: str
    arch: str  # the paper's sizes (section 4: 6 + 6 layers, 4 heads, hidden 512)
    small_arch: str  # --cpu-small
    lexicon: Optional[str]  # None: no head; "identity": copy; "learned": WORK/n<SIZE>/lexicon.tsv


SYSTEMS = {
    # transformer_iwslt_de_en is fairseq's stock Transformer with exactly the paper's sizes (FFN 1024)
    "nmt": System("NMT (Transformer)", "transformer_iwslt_de_en", "transformer_tiny", None),
    "pgn": System("PGN (identity lexicon = copy)", "pgn_transformer", "lex_transformer_tiny", "identity"),
    "pgn_lex": System("PGN + lexicon (learned over pieces)", "pgn_transformer", "lex_transformer_tiny", "learned"),
}

# Table 2 of the paper (spBLEU, WikiMatrix, 5k training sentences, 16k tokenizer, 5,000-sentence test sets): the
# closest pairs it has. It has no Catalan-Occitan experiment, so these are context, not comparable numbers.
PAPER_5K = {"fr-oc": {"nmt": 24.7, "pgn": 24.8}, "es-ca (wm)": {"nmt": 35.4, "pgn": 34.7}}


@dataclass
class Settings:
    ts: "TransformerSettings"
    validate_every: int
    patience: Optional[int]
    dropout: Optional[float]  # None: the arch's default
    beam: int = 5


def settings(args) -> Settings:
    # The paper gives sizes only ("trained until convergence"): fairseq's transformer_iwslt_de_en recipe as the
    # project's other Transformer rows (fairseq_lexical_recipes), early stopping on dev loss, best checkpoint.
    if args.cpu_small:
        s = Settings(replace(TRANSFORMER_CPU_SMALL, max_update=3000), validate_every=250, patience=4, dropout=None)
    else:
        s = Settings(replace(TRANSFORMER_PAPER, max_update=50000), validate_every=500, patience=10, dropout=0.3)
    over = {"max_update": args.max_update, "lr": args.lr, "warmup": args.warmup_updates, "batch_size": args.batch_size}
    s.ts = replace(s.ts, **{k: v for k, v in over.items() if v is not None})
    if args.max_tokens is not None:
        s.ts = replace(s.ts, max_tokens=args.max_tokens or None)
    if s.ts.max_tokens is None and s.ts.batch_size is None:
        raise RecipeError("--max-tokens 0 needs --batch-size")
    if args.validate_every is not None:
        s.validate_every = args.validate_every
    if args.patience is not None:
        s.patience = args.patience or None
    if args.beam is not None:
        s.beam = args.beam
    return s


# ---------------------------------------------------------------------------------------------------------------
# data
# ---------------------------------------------------------------------------------------------------------------


def read_data(data: str, limit: Optional[int]) -> List[Tuple[str, str]]:
    paths = {lang: os.path.join(data, name) for lang, name in FILES.items()}
    missing = [p for p in paths.values() if not os.path.isfile(p)]
    if missing:
        raise RecipeError(f"data file not found: {', '.join(missing)} (--data {data})")
    pairs = read_corpus(paths["ca"], tgt_path=paths["oc"])  # whitespace-normalised, equal line counts checked
    return pairs[:limit] if limit else pairs


def split(pairs, n_dev: int, n_test: int, seed: int):
    """Seeded shuffle; dev and test are drawn from pairs whose Catalan sentence occurs once in the corpus (Tatoeba
    repeats 855 of them, and the machine-translated Occitan repeats with them), so no dev/test source is seen in
    training. The rest, in the shuffled order, is the training pool; the training sizes are its prefixes (nested)."""
    order = list(range(len(pairs)))
    random.Random(seed).shuffle(order)
    count = collections.Counter(s for s, _ in pairs)
    once = [i for i in order if count[pairs[i][0]] == 1]
    if len(once) < n_dev + n_test:
        raise RecipeError(f"only {len(once)} pairs have a unique source; --dev-size + --test-size = {n_dev + n_test}")
    dev, test = once[:n_dev], once[n_dev : n_dev + n_test]
    held = set(dev) | set(test)
    train = [pairs[i] for i in order if i not in held]
    return train, [pairs[i] for i in dev], [pairs[i] for i in test]


class Experiment:
    def __init__(self, args):
        self.args = args
        self.src, self.tgt = args.direction.split("-")
        self.cfg = settings(args)
        self.data_steps: Dict[int, Step] = {}
        self.systems = [s.strip() for s in args.systems.split(",") if s.strip()]
        bad = [s for s in self.systems if s not in SYSTEMS]
        if bad or not self.systems:
            raise RecipeError(f"--systems: unknown {', '.join(bad) or '(none)'} (choose from {', '.join(SYSTEMS)})")
        try:
            self.sizes = sorted({int(x) for x in args.sizes.split(",") if x.strip()})
        except ValueError:
            raise RecipeError(f"--sizes {args.sizes!r}: expected comma-separated integers") from None
        self.seeds = list(range(1, args.seeds + 1))
        if not self.sizes or min(self.sizes) < 1 or not self.seeds:
            raise RecipeError("--sizes and --seeds must be positive")
        tag = "_small" if args.cpu_small else ""
        self.work = os.path.abspath(
            args.work or os.path.join(os.environ.get("TMPDIR", "/tmp"), f"fairseq_lexical_cat_oci{tag}")
        )
        self.label = (
            "CPU-SMALL (not the paper's sizes: fairseq transformer_tiny / lex_transformer_tiny, "
            "2 + 2 layers, 64, 2 heads)"
            if args.cpu_small
            else "the paper's sizes (6 + 6 layers, 512, 4 heads, FFN 1024)"
        )

    def tdir(self, size: int) -> str:
        return f"{self.work}/n{size}"

    # -- what the driver writes --------------------------------------------------------------------------------
    def writes(self) -> Dict[str, "re.Pattern[str]"]:
        """Every directory this invocation writes into, and the names it writes there."""
        langs = (self.src, self.tgt)
        texts = [f"{split}.{lang}" for split in SPLITS for lang in langs]
        out = {self.work: exactly("config.json", "summary.json"), self.work + "/data": exactly("split.json", *texts)}
        lexicon = ("lexicon.tsv", "lexicon.log", "lexicon.json") if "pgn_lex" in self.systems else ()
        for size in self.sizes:
            d = self.tdir(size)
            out[d] = exactly("spm.model", "spm.vocab", "dict.txt", "preprocess.log", "prepared.json", *lexicon)
            out[d + "/pieces"] = exactly(*texts)
            out[d + "/bin"] = PREPROCESS_WRITES
            for system in self.systems:
                for seed in self.seeds:
                    out[f"{d}/{system}/seed{seed}"] = RUN_WRITES
        return out

    def check_before_writing(self) -> None:
        """A file of a name this invocation writes that is not the driver's stops it, with nothing written."""
        found = [p for d, names in self.writes().items() for p in ownership.foreign_in(d, names)]
        ownership.refuse_foreign(found, "this run of the driver")

    def earlier_work(self) -> bool:
        """Whether WORK was made by a version of this driver before the ownership records (its config.json, no
        record beside it): its files are then adopted by the names the driver writes."""
        config = self.work + "/config.json"
        if os.path.exists(f"{self.work}/{ownership.OWNED}") or not os.path.isfile(config):
            return False
        try:
            recorded = read_json(config)
        except RecipeError:
            return False
        return isinstance(recorded, dict) and all(
            k in recorded for k in ("settings_label", "sizes", "systems", "command")
        )

    # -- data and pieces -------------------------------------------------------------------------------------
    def prepare_data(self) -> None:
        a = self.args
        pairs = read_data(a.data, a.limit)
        if self.src == "oc":
            pairs = [(t, s) for s, t in pairs]
        train, dev, test = split(pairs, a.dev_size, a.test_size, a.split_seed)
        if self.sizes[-1] > len(train):
            raise RecipeError(
                f"--sizes {self.sizes[-1]}: only {len(train)} training pairs are left after "
                f"{a.dev_size} dev + {a.test_size} test"
            )
        info = {
            "corpus": {k: os.path.join(os.path.abspath(a.data), v) for k, v in FILES.items()},
            "pairs": len(pairs),
            "limit": a.limit,
            "split_seed": a.split_seed,
            "direction": a.direction,
            "train_pool": len(train),
            "dev": len(dev),
            "test": len(test),
            "sizes": self.sizes,
            "duplicate_pairs_in_training": len(train[: self.sizes[-1]]) - len(set(train[: self.sizes[-1]])),
            "identical_source_target_in_test": sum(s == t for s, t in test),
        }
        with ownership.writing(self.work + "/data"):
            for name, part in (("train", train[: self.sizes[-1]]), ("valid", dev), ("test", test)):
                write_parallel(f"{self.work}/data/{name}", part, self.src, self.tgt)
            write_json(self.work + "/data/split.json", info)
        say(
            f"== data: {len(pairs)} pairs from {a.data} -> {len(dev)} dev + {len(test)} test (seed {a.split_seed}; "
            f"their sources occur once in the corpus) + training pool {len(train)}; sizes {self.sizes} are its "
            f"prefixes ({info['duplicate_pairs_in_training']} repeated pairs kept in the largest)"
        )

    def data_step(self, size: int) -> Step:
        """SentencePiece pieces and the data-bin of one training size, and what they are made from (hashed once:
        prepare_data has written the data before, and every run's fingerprint reads it)."""
        if size in self.data_steps:
            return self.data_steps[size]
        a, d, data = self.args, self.tdir(size), self.work + "/data"
        key = {
            "data_sha1": sha1_files(
                [f"{data}/{s}.{l}" for s in ("train", "valid", "test") for l in (self.src, self.tgt)]
            ),
            "size": size,
            "vocab_size": a.vocab_size,
            "model_type": "bpe",
            "character_coverage": 1.0,
        }
        self.data_steps[size] = Step(f"n{size} data", d + "/prepared.json", key, [f"{d}/bin/dict.{self.src}.txt"])
        return self.data_steps[size]

    def prepare_size(self, size: int) -> None:
        """Joint SentencePiece model, pieces, the fairseq dictionary, data-bin and (for pgn_lex) the lexicon."""
        d, data = self.tdir(size), self.work + "/data"

        def make():
            os.makedirs(d + "/pieces", exist_ok=True)
            self.make_pieces(size, d, data)
            pieces = {split: f"{d}/pieces/{split}" for split in ("train", "valid", "test")}
            cmd = commands.preprocess(pieces, d + "/bin", self.src, self.tgt, joined=True, srcdict=d + "/dict.txt")
            # the earlier data-bin's files go (the pipeline's only), a user's file of their names stops the driver
            refuse_foreign_writes(d + "/bin", PREPROCESS_WRITES, "fairseq-preprocess")
            with ownership.writing(d + "/bin"):
                remove_owned(d + "/bin")
                run_logged(cmd, d + "/preprocess.log", what="fairseq-preprocess")

        secs, step = None, self.data_step(size)
        if self.args.force or not step.up_to_date():
            with ownership.writing(d), ownership.writing(d + "/pieces"):
                secs = step.run(make, self.args.force)
        if secs is None:
            say(f"== n{size}: pieces and data-bin up to date ({d})")
        else:
            say(f"== n{size}: SentencePiece + fairseq-preprocess in {d} ({hms(secs)})")
        if "pgn_lex" in self.systems:
            self.build_lexicon(size, d)

    def make_pieces(self, size: int, d: str, data: str) -> None:
        import sentencepiece as spm  # only needed here (tools/setup_env.sh installs it)

        a = self.args
        train = {l: read_lines(f"{data}/train.{l}")[:size] for l in (self.src, self.tgt)}
        # joint model: both sides of this size's training pairs, nothing from dev/test or larger sizes
        with tempfile.NamedTemporaryFile("w", encoding="utf-8", suffix=".txt", delete=False) as f:
            f.write("\n".join(train[self.src] + train[self.tgt]) + "\n")
        try:
            spm.SentencePieceTrainer.train(
                input=f.name,
                model_prefix=d + "/spm",
                vocab_size=a.vocab_size,
                model_type="bpe",
                character_coverage=1.0,
                normalization_rule_name="identity",  # decoding gives the text back as is
                num_threads=1,
                minloglevel=2,
            )
        except RuntimeError as e:
            raise RecipeError(
                f"SentencePiece training on {size} pairs failed (--vocab-size {a.vocab_size}?): {e}"
            ) from None
        finally:
            os.remove(f.name)
        sp = spm.SentencePieceProcessor(model_file=d + "/spm.model")
        counts: collections.Counter = collections.Counter()
        unk_lines = 0
        for split_name in ("train", "valid", "test"):
            for lang in (self.src, self.tgt):
                lines = train[lang] if split_name == "train" else read_lines(f"{data}/{split_name}.{lang}")
                pieces = sp.encode(lines, out_type=str)
                unk_lines += sum(sp.unk_id() in ids for ids in sp.encode(lines))  # characters outside the model
                if split_name == "train":
                    counts.update(x for p in pieces for x in p)
                with open(f"{d}/pieces/{split_name}.{lang}", "w", encoding="utf-8") as out:
                    out.writelines(" ".join(p) + "\n" for p in pieces)
        # the whole SentencePiece vocabulary is the joined dictionary (fairseq adds its own specials), so source
        # and target share every piece and the identity lexicon can copy any of them
        with open(d + "/dict.txt", "w", encoding="utf-8") as out:
            for i in range(sp.get_piece_size()):
                if not (sp.is_control(i) or sp.is_unknown(i)):
                    out.write(f"{sp.id_to_piece(i)} {counts[sp.id_to_piece(i)]}\n")
        n_tok = sum(counts.values())
        say(
            f"   n{size}: joint SentencePiece BPE, {sp.get_piece_size()} pieces, {n_tok / (2 * size):.1f} pieces per "
            f"training sentence; {unk_lines} dev/test/train lines with characters outside the model"
        )

    def lexicon_command(self, d: str) -> List[str]:
        method = self.args.lexicon_method
        opts = ["--symmetrize", "intersect"] if method in ("ibm1", "ibm2") else []
        opts += ["--seed", "0"] if method == "bayes" else []
        # --no-fallback: a piece with no entry falls back to itself in the model (the joined dictionary), i.e. copy
        options = ["--method", method, *opts, "--no-fallback", "--threads", "1"]
        return commands.build_lexicon(
            options, f"{d}/pieces/train.{self.src}", f"{d}/pieces/train.{self.tgt}", d + "/lexicon.tsv"
        )

    def build_lexicon(self, size: int, d: str) -> None:
        cmd = self.lexicon_command(d)
        key = {
            "pieces_sha1": sha1_files([f"{d}/pieces/train.{self.src}", f"{d}/pieces/train.{self.tgt}"]),
            "command": show(cmd[1:]).replace(self.work, "$WORK"),
        }
        step = Step(f"n{size} lexicon", d + "/lexicon.json", key, [d + "/lexicon.tsv"], d + "/lexicon.log")
        if not self.args.force and step.up_to_date():
            return
        with ownership.writing(d):
            secs = step.run(lambda: run_logged(cmd, d + "/lexicon.log", what="build_lexicon.py"), True)
        entries = count_entries(d + "/lexicon.tsv")
        same = sum(
            1
            for line in open(d + "/lexicon.tsv", encoding="utf-8")
            if not line.startswith("#") and line.split("\t")[0] == line.split("\t")[1]
        )
        say(
            f"   n{size}: lexicon ({self.args.lexicon_method}) over pieces: {entries} entries, {same} of them "
            f"piece -> same piece ({hms(secs)})"
        )

    # -- runs ------------------------------------------------------------------------------------------------
    def commands(self, size: int, system: str, seed: int, out: str) -> Dict[str, List[str]]:
        a, s, d = self.args, self.cfg, self.tdir(size)
        spec, ts = SYSTEMS[system], self.cfg.ts
        model = ["--arch", spec.small_arch if a.cpu_small else spec.arch]
        if spec.lexicon:
            model += ["--lexicon", d + "/lexicon.tsv" if spec.lexicon == "learned" else spec.lexicon]
        if s.dropout is not None:
            model += ["--dropout", f"{s.dropout:g}"]
        cpu = ["--cpu"] if a.cpu else []
        train = commands.fairseq_train(
            d + "/bin",
            model,
            seed,
            out,
            **commands.transformer_training(ts),
            log_interval=50,
            log_format="--log-format simple",
            after=commands.validation(s.validate_every, s.patience) + cpu,
            extra=a.train_args,
        )
        # D lines: the hypothesis decoded with this size's SentencePiece model (detokenised text)
        sentencepiece = ["--bpe", "sentencepiece", "--sentencepiece-model", d + "/spm.model"]
        generate = commands.fairseq_generate(
            d + "/bin",
            out + "/checkpoint_best.pt",
            s.beam,
            64,
            max_len_b=10,
            max_len_a=2,
            after=sentencepiece + cpu,
            extra=a.generate_args,
        )
        score = commands.score(
            out + "/generate.txt",
            f"{self.work}/data/test.{self.tgt}",
            ["--bleu", "--chrf", "--tokenize", "13a"],
            hypotheses="D",
        )
        return {"train": train, "generate": generate, "score": score}

    def spec(self, size: int, system: str, seed: int, index: str) -> RunSpec:
        out = f"{self.tdir(size)}/{system}/seed{seed}"
        cmds = self.commands(size, system, seed, out)
        norm = {
            k: show(v).replace(self.work, "$WORK").replace(ROOT, "$REPO").replace(sys.executable, "python")
            for k, v in cmds.items()
        }
        lex = self.tdir(size) + "/lexicon.tsv"
        fp = {
            "commands": norm,
            "data": dict(self.data_step(size).key),
            "lexicon_sha1": sha1_files([lex]) if SYSTEMS[system].lexicon == "learned" else None,
        }
        config = {
            "size": size,
            "system": system,
            "label": SYSTEMS[system].label,
            "seed": seed,
            "settings": self.label,
            "commands": {k: show(v) for k, v in cmds.items()},
        }
        return RunSpec(
            who=f"{index} n{size} {system} seed {seed}",
            name=f"n{size} {system}",
            out=out,
            commands=cmds,
            fingerprint=fp,
            config=config,
            checkpoint=out + "/checkpoint_best.pt",
            training=f" ({self.cfg.ts.max_update} updates max, dev loss every {self.cfg.validate_every})",
            progress=f"{index}    n{size} {system}: ",
            force=self.args.force,
        )

    def run_one(self, size: int, system: str, seed: int, index: str) -> dict:
        run = self.spec(size, system, seed, index)
        log = run.out + "/train.log"
        outcome = execute_run(run, after_run=lambda _: {"valid_p_gate_last": fairseq_log.last_valid_p_gate(log)})
        score = outcome.score
        if outcome.reused:
            say(f"{run.who}: BLEU {score['bleu']:.2f} chrF {score['chrf']:.2f} (done before: skipped)")
            return score
        p_gate = outcome.added["valid_p_gate_last"]
        gate = f"; dev p_gate {p_gate:.3f} (1 - p_copy)" if p_gate is not None else ""
        say(
            f"{run.who}: BLEU {score['bleu']:.2f} chrF {score['chrf']:.2f} "
            f"(train {hms(outcome.train_s)}, {outcome.training['text']}; decode {hms(outcome.generate_s)}{gate})"
        )
        return score

    def run(self) -> int:
        t0 = time.time()
        a, ts = self.args, self.cfg.ts
        say(f"== cat_oci ({a.direction}): work directory {self.work}")
        say(
            f"== settings: {self.label}; Adam {ts.adam_betas}, lr {ts.lr:g} (inverse sqrt, {ts.warmup} warm-up), "
            + (f"--max-tokens {ts.max_tokens}" if ts.max_tokens else f"batch {ts.batch_size} sentences")
            + f", label smoothing {ts.label_smoothing:g}, {ts.max_update} updates max, dev loss every "
            f"{self.cfg.validate_every} (patience {self.cfg.patience}), checkpoint_best, beam {self.cfg.beam}; "
            f"SentencePiece BPE {a.vocab_size}; lexicon {a.lexicon_method}"
        )
        say(f"== systems: {', '.join(self.systems)}; sizes: {self.sizes}; seeds: {self.seeds}")
        earlier = self.earlier_work()
        if not earlier:  # (an earlier version's WORK is checked once adopted, under the lock)
            self.check_before_writing()  # a refusal leaves WORK as it was
        os.makedirs(self.work, exist_ok=True)
        self._lock = lock_work_directory(self.work)  # held until the process ends
        if earlier:
            for directory, names in self.writes().items():
                ownership.adopt([directory], names)
        self.check_before_writing()  # unchanged since, now that no other driver can write
        self.write_config()
        self.prepare_data()
        total, k = len(self.sizes) * len(self.systems) * len(self.seeds), 0
        for size in self.sizes:
            self.prepare_size(size)
            for seed in self.seeds:
                for system in self.systems:
                    k += 1
                    self.run_one(size, system, seed, f"[{k}/{total}]")
        self.report(time.time() - t0)
        return 0

    def write_config(self) -> None:
        a, ts = self.args, self.cfg.ts
        with ownership.writing(self.work):
            write_json(
                self.work + "/config.json",
                {
                    "settings": "cpu-small" if a.cpu_small else "paper",
                    "settings_label": self.label,
                    "transformer": asdict(ts),
                    "validate_every": self.cfg.validate_every,
                    "patience": self.cfg.patience,
                    "dropout": self.cfg.dropout,
                    "beam": self.cfg.beam,
                    "vocab_size": a.vocab_size,
                    "lexicon_method": a.lexicon_method,
                    "systems": self.systems,
                    "sizes": self.sizes,
                    "seeds": self.seeds,
                    "command": " ".join(sys.argv),
                    "date": datetime.datetime.now().isoformat(),
                    "host": platform.node(),
                },
            )

    def report(self, seconds: float) -> None:
        rows = [["system"] + [f"{n} {m}" for n in self.sizes for m in ("BLEU", "chrF")]]
        summary = {}
        for size in self.sizes:
            summary[size] = aggregate_dir(self.tdir(size), models=self.systems, seeds=self.seeds)
        for system in self.systems:
            cells = []
            for size in self.sizes:
                metrics = summary[size].get(system, {}).get("metrics", {})
                for m in ("bleu", "chrf"):
                    st = metrics.get(m)
                    cells.append(
                        "n/a" if not st else (f"{st['mean']:.2f}" if len(self.seeds) == 1 else format_mean_std(st))
                    )
            rows.append([system] + cells)
        widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
        say("")
        say(
            f"== test BLEU (sacrebleu 13a on SentencePiece-decoded text) and chrF, {self.test_count()} "
            f"sentences, {len(self.seeds)} seed(s); {self.label}"
        )
        for r in rows:
            say("  ".join([r[0].ljust(widths[0])] + [c.rjust(w) for c, w in zip(r[1:], widths[1:])]))
        say(
            "   paper (Table 2, spBLEU at 5k, other data, not comparable): "
            + "; ".join(f"{p}: NMT {v['nmt']}, PGN {v['pgn']}" for p, v in PAPER_5K.items())
            + "; no Catalan-Occitan and no PGN + lexicon row"
        )
        with ownership.writing(self.work):
            write_json(
                self.work + "/summary.json",
                {
                    "settings_label": self.label,
                    "metrics": "BLEU: sacrebleu --tokenize 13a on detokenised text; chrF",
                    "sizes": {
                        str(n): {m: dict(label=SYSTEMS[m].label, **summary[n][m]) for m in summary[n]}
                        for n in self.sizes
                    },
                    "paper_5k_spbleu_other_pairs": PAPER_5K,
                    "wall_s": round(seconds, 1),
                },
            )
        say(f"== summary: {self.work}/summary.json; total wall time {hms(seconds)}")

    def test_count(self) -> int:
        return len(read_lines(f"{self.work}/data/test.{self.tgt}"))


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="bash examples/cat_oci/run.sh",
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    g = p.add_argument_group("data")
    g.add_argument(
        "--data", default=DEFAULT_DATA, help=f"folder with tatoeba.ca and tatoeba.oc (default {DEFAULT_DATA})"
    )
    g.add_argument("--work", help="work directory (default $TMPDIR/fairseq_lexical_cat_oci[_small], TMPDIR=/tmp)")
    g.add_argument(
        "--direction",
        choices=("ca-oc", "oc-ca"),
        default="ca-oc",
        help="ca-oc (default: high- to low-resource, as the paper's fr-oc and es-ca)",
    )
    g.add_argument("--dev-size", type=int, default=250)
    g.add_argument("--test-size", type=int, default=250)
    g.add_argument("--split-seed", type=int, default=1, help="seed of the shuffle behind the split (default 1)")
    g.add_argument("--sizes", default="1000,2500,5000", help="training sizes, nested (default 1000,2500,5000)")
    g.add_argument("--limit", type=int, help="use only the corpus' first N pairs (tests)")
    g.add_argument(
        "--vocab-size",
        type=int,
        default=2000,
        help="joint SentencePiece BPE vocabulary (default 2000; the paper's 16000 exceeds what 1k pairs hold)",
    )
    g = p.add_argument_group("what to run")
    g.add_argument("--systems", default="nmt,pgn,pgn_lex", help="comma-separated: nmt, pgn, pgn_lex (default all)")
    g.add_argument("--seeds", type=int, default=1, help="training seeds 1..N (default 1)")
    g.add_argument(
        "--lexicon-method",
        default="ibm2",
        choices=("simple", "pmi", "ibm1", "ibm2", "bayes"),
        help="tools/build_lexicon.py method for pgn_lex, over the pieces (default ibm2, intersected)",
    )
    g.add_argument("--force", action="store_true", help="redo finished steps")
    g.add_argument("--progress-every", type=float, default=60.0, metavar="SECONDS")
    g = p.add_argument_group("settings (default: the paper's sizes; see the README)")
    g.add_argument(
        "--cpu-small",
        action="store_true",
        help="tiny Transformers (not the paper's), batch 64, lr 1e-3, "
        "400 warm-up, 3000 updates max, dev loss every 250",
    )
    g.add_argument("--cpu", action="store_true", help="pass --cpu to fairseq-train and fairseq-generate")
    g.add_argument("--max-update", type=int)
    g.add_argument("--lr", type=float)
    g.add_argument("--warmup-updates", type=int)
    g.add_argument("--batch-size", type=int, help="sentences per batch")
    g.add_argument("--max-tokens", type=int, help="tokens per batch (paper setting 4096; 0: none)")
    g.add_argument("--validate-every", type=int, help="updates between dev-loss checks (and checkpoints)")
    g.add_argument("--patience", type=int, help="stop after N dev checks without a better loss (0: off)")
    g.add_argument("--beam", type=int)
    g.add_argument("--train-args", default="", help="further fairseq-train options (one quoted string)")
    g.add_argument("--generate-args", default="", help="further fairseq-generate options (one quoted string)")
    return p


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    process.PROGRESS_EVERY = max(1.0, args.progress_every)
    return exit_status_of(lambda: Experiment(args).run())


if __name__ == "__main__":
    sys.exit(main())
