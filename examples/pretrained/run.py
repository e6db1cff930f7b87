#!/usr/bin/env python
"""Fine-tuning a pretrained stock fairseq Transformer with the lexical head, measured on English -> Chinese
(issue 72, item 4). A STAND-IN for a real pretrained model: a small stock Transformer (transformer_tiny, one CPU
thread) is pretrained here on most of the recipe's training data, then fine-tuned on a 1,000-pair slice holding
words it never saw, as (a) plain fine-tuning, (b) pgn_transformer (copy), (c) lex_transformer with a learned lexicon.

    bash examples/eng_cmn/run.sh --data ../shared/data/eng_cmn --cpu-small --models ibm1 --prepare-only --work BASE
    bash examples/pretrained/run.sh --prepared BASE --work WORK [--seeds 3] [--dry-run]

split (seeded: "new-domain words" = English words of training document frequency --min-df..--max-df drawn until
the pairs holding one reach --finetune-size; the slice = that many of them; the other pairs holding one are left
out; pretraining = every other pair) -> one joined dictionary over pretraining + fine-tuning text ->
fairseq-preprocess of both -> IBM Model 1 lexicon on pretraining + fine-tuning text -> terms (new-domain words whose
lexicon argmax is in >= 80% of the test references holding them) -> stock fairseq-train (pretraining) -> for each
system and seed: fairseq-train --finetune-from-model -> fairseq-generate -> tools/score.py (BLEU, chrF, term use;
and the same on the test sentences holding a new-domain word) -> table and WORK/summary.json.

WORK layout: data/{pretrain,finetune,train,valid,test}.{src,tgt} (train = pretrain + finetune), split.json,
dict/dict.src.txt, bin_pretrain/, bin_finetune/, lexicon.tsv, terms.tsv, pretrained/ (the pretrained model and its
test decoding), finetune/<system>/seed<S>/{config.json, train.log, generate.txt, score.json, run.json},
summary.json. A run whose score.json exists with the same commands is skipped (run again to resume).
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import random
import sys
import time
from collections import Counter
from dataclasses import asdict, dataclass, replace
from typing import Dict, List, Optional, Sequence, Set, Tuple

from lexical_offline.metrics.aggregate import format_mean_std, mean_std
from lexical_offline.metrics.bleu import corpus_bleu, corpus_chrf
from lexical_offline.metrics.generate_output import read_generate_output
from lexical_offline.metrics.terms import read_terms, term_use
from lexical_offline.textio import read_lines

# fairseq_lexical_recipes
from fairseq_lexical_recipes import ROOT, commands, fairseq_log, ownership, process
from fairseq_lexical_recipes.catalogue import LEXICON_METHODS
from fairseq_lexical_recipes.console import RecipeError, exit_status_of, hms, say, show
from fairseq_lexical_recipes.execute import RunSpec, execute_run
from fairseq_lexical_recipes.invocation import check_bounds, check_work
from fairseq_lexical_recipes.process import run_logged
from fairseq_lexical_recipes.rundir import PREPROCESS_WRITES, lock_work_directory, refuse_foreign_writes, remove_owned
from fairseq_lexical_recipes.settings import TRANSFORMER_CPU_SMALL, TransformerSettings
from fairseq_lexical_recipes.steps import Step
from fairseq_lexical_recipes.textio import count_entries, read_json, sha1_files, write_json

SPLITS = ("train", "valid", "test")


@dataclass(frozen=True)
class System:
    label: str
    arch: str
    lexicon: Optional[str]  # None: stock fairseq; "identity": copy; "learned": WORK/lexicon.tsv
    plugin: bool
    gate_bias: Optional[float] = None  # --pretrained-gate-bias (None: the plugin's default 6.9, p_gate 0.999)


SYSTEMS = {
    "plain": System("(a) plain fine-tuning (stock transformer_tiny)", "transformer_tiny", None, False),
    "pgn": System("(b) pgn_transformer (identity lexicon = copy)", "pgn_transformer", "identity", True),
    "lex": System("(c) lex_transformer + IBM Model 1 lexicon (top 8)", "lex_transformer", "learned", True),
    # not in the default --systems: the head's gate started more open (p_gate = sigmoid(2.2) = 0.90 instead of
    # 0.999), so that step 0 is no longer the pretrained model but the gate can move in a short fine-tuning
    "pgn_b2": System(
        "(b') pgn_transformer, gate bias 2.2 (p_gate 0.90 at start)", "pgn_transformer", "identity", True, 2.2
    ),
    "lex_b2": System(
        "(c') lex_transformer + IBM Model 1, gate bias 2.2 (p_gate 0.90 at start)",
        "lex_transformer",
        "learned",
        True,
        2.2,
    ),
}


# ---------------------------------------------------------------------------------------------------------------
# the split
# ---------------------------------------------------------------------------------------------------------------


def document_frequency(sources: Sequence[str]) -> Counter:
    return Counter(w for line in sources for w in set(line.split()))


def draw_split(sources: Sequence[str], size: int, min_df: int, max_df: int, seed: int) -> Dict[str, object]:
    """The new-domain words (in the order drawn) and the three parts of the training pairs (indices into
    ``sources``).

    Candidates: words of letters only whose training document frequency is in [min_df, max_df]; drawn in a seeded
    random order until the pairs holding any drawn word number at least ``size``. The fine-tuning slice is ``size``
    of those pairs (seeded sample, in corpus order); the others holding a drawn word are left out; pretraining is
    every pair holding none."""
    if size < 1 or min_df < 1 or max_df < min_df:
        raise RecipeError(f"--finetune-size {size}, --min-df {min_df}, --max-df {max_df}: need 1 <= min <= max")
    df = document_frequency(sources)
    candidates = sorted(w for w, n in df.items() if w.isalpha() and min_df <= n <= max_df)
    rng = random.Random(seed)
    rng.shuffle(candidates)
    holding: Dict[str, List[int]] = {}
    for i, line in enumerate(sources):
        for w in set(line.split()):
            if min_df <= df[w] <= max_df:
                holding.setdefault(w, []).append(i)
    drawn: List[str] = []
    held: Set[int] = set()
    for w in candidates:
        if len(held) >= size:
            break
        drawn.append(w)
        held.update(holding[w])
    if len(held) < size:
        raise RecipeError(
            f"the {len(candidates)} words of document frequency {min_df}..{max_df} are held by only {len(held)} "
            f"training pairs, fewer than --finetune-size {size}"
        )
    finetune = sorted(rng.sample(sorted(held), size))
    left_out = sorted(held - set(finetune))
    pretrain = [i for i in range(len(sources)) if i not in held]
    return {"words": drawn, "finetune": finetune, "left_out": left_out, "pretrain": pretrain}


def holding_any(sources: Sequence[str], words: Set[str]) -> List[int]:
    return [i for i, line in enumerate(sources) if words & set(line.split())]


# ---------------------------------------------------------------------------------------------------------------
# the experiment
# ---------------------------------------------------------------------------------------------------------------


@dataclass
class Settings:
    pretrain: TransformerSettings
    finetune: TransformerSettings
    pretrain_validate_every: int
    validate_every: int
    patience: Optional[int]
    beam: int = 5
    lexicon_top_k: int = 8


def settings(args) -> Settings:
    # the recipes' --cpu-small Transformer settings: Adam (0.9, 0.98), lr 1e-3, inverse_sqrt, 400 warm-up, batch 64
    pre = replace(TRANSFORMER_CPU_SMALL, max_update=args.pretrain_updates)
    fine = replace(pre, lr=args.finetune_lr, warmup=args.finetune_warmup, max_update=args.finetune_updates)
    return Settings(pre, fine, args.pretrain_validate_every, args.validate_every, args.patience or None, args.beam)


def refuse_same_paths(prepared: str, work: str) -> None:
    """--work must not be --prepared, its data directory (the inputs) or inside that."""
    p, w = os.path.realpath(prepared), os.path.realpath(work)
    data = os.path.join(p, "data")
    if w == p or w == data or w.startswith(data + os.sep):
        raise RecipeError(
            f"--work {work} is (or is inside) the input {p if w == p else data}: choose another directory"
        )


class Experiment:
    def __init__(self, args):
        self.args = args
        self.cfg = settings(args)
        self.systems = [s.strip() for s in args.systems.split(",") if s.strip()]
        bad = [s for s in self.systems if s not in SYSTEMS]
        if bad or not self.systems:
            raise RecipeError(f"--systems: unknown {', '.join(bad) or '(none)'} (choose from {', '.join(SYSTEMS)})")
        check_bounds(
            [
                ("--seeds", args.seeds, 1),
                ("--pretrain-updates", args.pretrain_updates, 1),
                ("--pretrain-validate-every", args.pretrain_validate_every, 1),
                ("--finetune-updates", args.finetune_updates, 1),
                ("--finetune-lr", args.finetune_lr, None),
                ("--finetune-warmup", args.finetune_warmup, 0),
                ("--validate-every", args.validate_every, 1),
                ("--patience", args.patience, 0),
                ("--beam", args.beam, 1),
            ]
        )
        self.seeds = list(range(1, args.seeds + 1))
        self.prepared = os.path.abspath(args.prepared)
        self.work = check_work(args.work)
        refuse_same_paths(self.prepared, self.work)
        self.input_files = {(s, l): f"{self.prepared}/data/{s}.{l}" for s in SPLITS for l in ("src", "tgt")}
        missing = [p for p in self.input_files.values() if not os.path.isfile(p)]
        if missing:
            raise RecipeError(
                f"prepared data not found: {', '.join(missing)} (--prepared {args.prepared}; make it with "
                "`bash examples/eng_cmn/run.sh --data ../shared/data/eng_cmn --cpu-small --models ibm1 "
                f"--prepare-only --work {args.prepared}`)"
            )
        self.data = self.work + "/data"
        self.dict = self.work + "/dict/dict.src.txt"
        self.lexicon = self.work + "/lexicon.tsv"
        self.terms = self.work + "/terms.tsv"

    # -- data ------------------------------------------------------------------------------------------------
    def split(self) -> Tuple[Dict[str, object], Dict[str, List[Tuple[str, str]]]]:
        a = self.args
        text = {k: read_lines(p) for k, p in self.input_files.items()}
        for s in SPLITS:
            if len(text[s, "src"]) != len(text[s, "tgt"]):
                raise RecipeError(
                    f"{self.input_files[s, 'src']} has {len(text[s, 'src'])} lines but "
                    f"{self.input_files[s, 'tgt']} {len(text[s, 'tgt'])}"
                )
        pairs = {s: list(zip(text[s, "src"], text[s, "tgt"])) for s in SPLITS}
        part = draw_split(text["train", "src"], a.finetune_size, a.min_df, a.max_df, a.split_seed)
        words = set(part["words"])
        test_new = holding_any(text["test", "src"], words)
        valid_new = holding_any(text["valid", "src"], words)
        df = document_frequency(text["train", "src"])
        parts = {
            "pretrain": [pairs["train"][i] for i in part["pretrain"]],
            "finetune": [pairs["train"][i] for i in part["finetune"]],
            "valid": pairs["valid"],
            "test": pairs["test"],
        }
        parts["train"] = parts["pretrain"] + parts["finetune"]
        ft_tokens = [w for s, _ in parts["finetune"] for w in s.split()]
        info = {
            "prepared": {f"{s}.{l}": p for (s, l), p in self.input_files.items()},
            "prepared_sha1": sha1_files(list(self.input_files.values())),
            "split_seed": a.split_seed,
            "min_df": a.min_df,
            "max_df": a.max_df,
            "training_pairs": len(pairs["train"]),
            "candidate_words": sum(1 for w, n in df.items() if w.isalpha() and a.min_df <= n <= a.max_df),
            "new_domain_words": len(words),
            "pairs_holding_a_new_word": len(part["finetune"]) + len(part["left_out"]),
            "finetune_pairs": len(part["finetune"]),
            "left_out_pairs": len(part["left_out"]),
            "pretrain_pairs": len(part["pretrain"]),
            "valid_pairs": len(pairs["valid"]),
            "test_pairs": len(pairs["test"]),
            "valid_holding_a_new_word": len(valid_new),
            "test_holding_a_new_word": len(test_new),
            "new_word_tokens_in_finetune": sum(w in words for w in ft_tokens),
            "words": part["words"],
            "test_new_word_ids": test_new,
        }
        return info, parts

    def prepare_data(self) -> Dict[str, object]:
        info, parts = self.split()
        os.makedirs(self.data, exist_ok=True)
        for name, rows in parts.items():
            for k, lang in enumerate(("src", "tgt")):
                with open(f"{self.data}/{name}.{lang}", "w", encoding="utf-8") as f:
                    f.writelines(r[k] + "\n" for r in rows)
        write_json(self.work + "/split.json", info)
        say(
            f"== split (seed {info['split_seed']}): {info['new_domain_words']} new-domain words (of "
            f"{info['candidate_words']} with training document frequency {info['min_df']}..{info['max_df']}) held "
            f"by {info['pairs_holding_a_new_word']} training pairs -> fine-tuning slice {info['finetune_pairs']}, "
            f"left out {info['left_out_pairs']}; pretraining {info['pretrain_pairs']} of {info['training_pairs']}; "
            f"test {info['test_pairs']} ({info['test_holding_a_new_word']} hold a new-domain word)"
        )
        return info

    def data_key(self) -> Dict[str, object]:
        names = [f"{self.data}/{p}.{l}" for p in ("pretrain", "finetune", "valid", "test") for l in ("src", "tgt")]
        return {"data_sha1": sha1_files(names)}

    def dict_command(self) -> List[str]:
        prefixes = {"train": f"{self.data}/train"}
        return commands.preprocess(prefixes, os.path.dirname(self.dict), joined=True, dict_only=True)

    def binarise_command(self, part: str) -> List[str]:
        prefixes = {"train": f"{self.data}/{part}", "valid": f"{self.data}/valid", "test": f"{self.data}/test"}
        return commands.preprocess(prefixes, f"{self.work}/bin_{part}", joined=True, srcdict=self.dict)

    def lexicon_command(self) -> List[str]:
        options = [*LEXICON_METHODS["ibm1"][0], "--no-fallback", "--threads", "1"]
        return commands.build_lexicon(options, f"{self.data}/train.src", f"{self.data}/train.tgt", self.lexicon)

    def terms_command(self) -> List[str]:
        # every word of the test sources (train document frequency not limited): the new-domain ones are kept after
        return [
            sys.executable,
            os.path.join(ROOT, "examples", "eng_cmn", "reference_terms.py"),
            self.data,
            self.lexicon,
            "-o",
            self.work + "/terms_all.tsv",
            "--max-train",
            "100000000",
            "--min-test",
            str(self.args.terms_min_test),
            "--min-share",
            "0.8",
        ]

    def prepare(self, info: Dict[str, object]) -> None:
        key = self.data_key()
        force = self.args.force

        def make_bins():
            with ownership.writing(self.work + "/dict"):
                os.makedirs(self.work + "/dict", exist_ok=True)
                run_logged(self.dict_command(), self.work + "/dict/preprocess.log", what="fairseq-preprocess")
            for part in ("pretrain", "finetune"):
                d = f"{self.work}/bin_{part}"
                refuse_foreign_writes(d, PREPROCESS_WRITES, "fairseq-preprocess")
                with ownership.writing(d):
                    remove_owned(d)
                    run_logged(self.binarise_command(part), d + "/preprocess.log", what="fairseq-preprocess")

        step = Step("data-bins", self.work + "/prepared.json", key, [self.dict], self.work + "/dict/preprocess.log")
        secs = step.run(make_bins, force)
        say(
            "== joined dictionary + data-bins up to date"
            if secs is None
            else f"== joined dictionary ({count_entries(self.dict)} types, over pretraining + fine-tuning text) and "
            f"data-bins bin_pretrain, bin_finetune ({hms(secs)})"
        )
        cmd = self.lexicon_command()
        lkey = {**key, "command": show(cmd[1:]).replace(self.work, "$WORK")}
        step = Step("lexicon", self.work + "/lexicon.json", lkey, [self.lexicon], self.work + "/lexicon.log")
        say("== IBM Model 1 lexicon on pretraining + fine-tuning text ...")
        secs = step.run(lambda: run_logged(cmd, self.work + "/lexicon.log", what="build_lexicon.py"), force)
        if secs is not None:
            say(f"   lexicon: {count_entries(self.lexicon)} entries ({hms(secs)})")
        cmd = self.terms_command()
        tkey = {**lkey, "lexicon_sha1": sha1_files([self.lexicon]), "terms": show(cmd[2:]).replace(self.work, "$WORK")}

        def make_terms():
            run_logged(cmd, self.work + "/terms_all.tsv.log", what="reference_terms.py")
            words = set(info["words"])
            kept = [
                line
                for line in read_lines(self.work + "/terms_all.tsv")
                if line and not line.startswith("#") and line.split("\t")[0] in words
            ]
            if not kept:
                raise RecipeError(
                    f"no new-domain word is a term (see {self.work}/terms_all.tsv): lower --terms-min-test"
                )
            with open(self.terms, "w", encoding="utf-8") as f:
                f.writelines(line + "\n" for line in kept)

        step = Step("terms", self.work + "/terms.json", tkey, [self.terms], self.work + "/terms_all.tsv.log")
        step.run(make_terms, force)
        say(f"== terms: {count_entries(self.terms)} new-domain words ({self.terms})")

    # -- runs ------------------------------------------------------------------------------------------------
    def generate_and_score(self, data_bin: str, checkpoint: str) -> Dict[str, List[str]]:
        s = self.cfg
        generate = commands.fairseq_generate(data_bin, checkpoint, s.beam, 64, max_len_b=10, max_len_a=2)
        score = commands.score(
            os.path.dirname(checkpoint) + "/generate.txt",
            f"{self.data}/test.tgt",
            ["--bleu", "--chrf", "--tokenize", "none", "--terms", self.terms],  # terms: the S lines' sources
        )
        return {"generate": generate, "score": score}

    def pretrain_commands(self) -> Dict[str, List[str]]:
        out, s = self.work + "/pretrained", self.cfg
        train = commands.fairseq_train(
            self.work + "/bin_pretrain",
            ["--arch", "transformer_tiny"],
            self.args.pretrain_seed,
            out,
            **commands.transformer_training(s.pretrain),
            log_interval=100,
            after=commands.validation(s.pretrain_validate_every, None),
            plugin=False,
        )
        return {"train": train, **self.generate_and_score(self.work + "/bin_finetune", out + "/checkpoint_best.pt")}

    def finetune_commands(self, system: str, seed: int) -> Dict[str, List[str]]:
        out, s, spec = f"{self.work}/finetune/{system}/seed{seed}", self.cfg, SYSTEMS[system]
        # stock fairseq 0.12 cannot load a checkpoint under torch >= 2.6 (torch.load's weights_only): for the stock
        # model --user-dir brings only the plugin's loading fix (fairseq's own model and criterion are used)
        model = ([] if spec.plugin else ["--user-dir", commands.USER_DIR]) + ["--arch", spec.arch]
        if spec.lexicon:
            model += ["--lexicon", self.lexicon if spec.lexicon == "learned" else "identity"]
        if spec.lexicon == "learned":
            model += ["--lexicon-top-k", str(s.lexicon_top_k)]
        if spec.gate_bias is not None:
            model += ["--pretrained-gate-bias", f"{spec.gate_bias:g}"]
        model += ["--finetune-from-model", self.work + "/pretrained/checkpoint_best.pt"]
        train = commands.fairseq_train(
            self.work + "/bin_finetune",
            model,
            seed,
            out,
            **commands.transformer_training(s.finetune),
            log_interval=50,
            log_format="--log-format simple",
            after=commands.validation(s.validate_every, s.patience),
            plugin=spec.plugin,
        )
        return {"train": train, **self.generate_and_score(self.work + "/bin_finetune", out + "/checkpoint_best.pt")}

    def normalised(self, cmds: Dict[str, List[str]]) -> Dict[str, str]:
        return {
            k: show(v).replace(self.work, "$WORK").replace(ROOT, "$REPO").replace(sys.executable, "python")
            for k, v in cmds.items()
        }

    def spec(self, name: str, out: str, cmds, extra_fp: Dict[str, object], who: str, training: str) -> RunSpec:
        fp = {"commands": self.normalised(cmds), **self.data_key(), "terms_sha1": sha1_files([self.terms]), **extra_fp}
        return RunSpec(
            who=who,
            name=name,
            out=out,
            commands=cmds,
            fingerprint=fp,
            config={"run": name, "commands": {k: show(v) for k, v in cmds.items()}},
            checkpoint=out + "/checkpoint_best.pt",
            training=training,
            progress=f"   {name}: ",
            force=self.args.force,
        )

    def pretrain_spec(self) -> RunSpec:
        s = self.cfg
        return self.spec(
            "pretrained",
            self.work + "/pretrained",
            self.pretrain_commands(),
            {},
            "[pretraining] stock transformer_tiny",
            f" ({s.pretrain.max_update} updates, dev loss every {s.pretrain_validate_every})",
        )

    def finetune_spec(self, system: str, seed: int, index: str) -> RunSpec:
        s = self.cfg
        pre = self.work + "/pretrained/checkpoint_best.pt"
        fp = {"pretrained_sha1": sha1_files([pre]) if os.path.isfile(pre) else None}
        if SYSTEMS[system].lexicon == "learned":
            fp["lexicon_sha1"] = sha1_files([self.lexicon])
        return self.spec(
            f"{system} seed {seed}",
            f"{self.work}/finetune/{system}/seed{seed}",
            self.finetune_commands(system, seed),
            fp,
            f"{index} {system} seed {seed}",
            f" ({s.finetune.max_update} updates max, dev loss every {s.validate_every}, patience {s.patience})",
        )

    def execute(self, run: RunSpec) -> dict:
        outcome = execute_run(run)
        sc = outcome.score
        if outcome.reused:
            say(f"{run.who}: BLEU {sc['bleu']:.2f} chrF {sc['chrf']:.2f} (done before: skipped)")
        else:
            say(
                f"{run.who}: BLEU {sc['bleu']:.2f} chrF {sc['chrf']:.2f} (train {hms(outcome.train_s)}, "
                f"{outcome.training.get('text', '')}; decode {hms(outcome.generate_s)})"
            )
        return sc

    def dry_run(self) -> int:
        info, _ = self.split()
        info = {k: v for k, v in info.items() if k not in ("words", "test_new_word_ids", "prepared")}
        say("== dry run (nothing written); the split:")
        for k, v in info.items():
            say(f"   {k}: {v}")
        steps = {
            "dictionary": self.dict_command(),
            "binarise pretrain": self.binarise_command("pretrain"),
            "binarise finetune": self.binarise_command("finetune"),
            "lexicon": self.lexicon_command(),
            "terms": self.terms_command(),
        }
        for k, v in self.pretrain_commands().items():
            steps[f"pretrained {k}"] = v
        for system in self.systems:
            for seed in self.seeds:
                for k, v in self.finetune_commands(system, seed).items():
                    steps[f"{system} seed {seed} {k}"] = v
        for k, v in steps.items():
            say(f"-- {k}:\n   {show(v)}")
        return 0

    def run(self) -> int:
        if self.args.dry_run:
            return self.dry_run()
        t0 = time.time()
        say(f"== pretrained stand-in (eng_cmn): prepared data {self.prepared}; work directory {self.work}")
        os.makedirs(self.work, exist_ok=True)
        self._lock = lock_work_directory(self.work)
        write_json(
            self.work + "/config.json",
            {
                "pretrain": asdict(self.cfg.pretrain),
                "finetune": asdict(self.cfg.finetune),
                "pretrain_validate_every": self.cfg.pretrain_validate_every,
                "validate_every": self.cfg.validate_every,
                "patience": self.cfg.patience,
                "beam": self.cfg.beam,
                "lexicon_top_k": self.cfg.lexicon_top_k,
                "systems": self.systems,
                "seeds": self.seeds,
                "command": " ".join(sys.argv),
                "date": datetime.datetime.now().isoformat(),
                "host": platform.node(),
            },
        )
        info = self.prepare_data()
        self.prepare(info)
        self.execute(self.pretrain_spec())
        total, k = len(self.systems) * len(self.seeds), 0
        for seed in self.seeds:
            for system in self.systems:
                k += 1
                self.execute(self.finetune_spec(system, seed, f"[{k}/{total}]"))
        self.report(info, time.time() - t0)
        return 0

    # -- report ----------------------------------------------------------------------------------------------
    def run_result(self, out: str, info: Dict[str, object]) -> Dict[str, object]:
        score = read_json(out + "/score.json")
        run = read_json(out + "/run.json")
        hyps, _ = read_generate_output(out + "/generate.txt")
        refs = read_lines(f"{self.data}/test.tgt")
        srcs = read_lines(f"{self.data}/test.src")
        ids = info["test_new_word_ids"]
        sub_h, sub_r, sub_s = [hyps[i] for i in ids], [refs[i] for i in ids], [srcs[i] for i in ids]
        terms = score.get("terms") or {}
        history = fairseq_log.validation_history(out + "/train.log")
        best = min(history, key=lambda v: v["loss"]) if history else {}
        return {
            "bleu": score["bleu"],
            "chrf": score["chrf"],
            "term_use": terms.get("rate"),
            "term_used": terms.get("used"),
            "term_occurrences": terms.get("occurrences"),
            "new_word_subset": {
                "sentences": len(ids),
                "bleu": corpus_bleu(sub_h, sub_r, "none")["score"],
                "chrf": corpus_chrf(sub_h, sub_r)["score"],
                "term_use": term_use(sub_s, sub_h, read_terms(self.terms))["rate"],
            },
            "train_min": round(run["train_s"] / 60, 2),
            "decode_min": round(run["generate_s"] / 60, 2),
            "updates": run.get("training", {}).get("updates"),
            "early_stop": run.get("training", {}).get("early_stop"),
            "best_update": best.get("updates"),
            "best_valid_loss": best.get("loss"),
            "valid_p_gate_last": fairseq_log.last_valid_p_gate(out + "/train.log"),
        }

    def report(self, info: Dict[str, object], seconds: float) -> None:
        rows: Dict[str, Dict[str, object]] = {}
        rows["pretrained"] = {"seeds": {"-": self.run_result(self.work + "/pretrained", info)}}
        for system in self.systems:
            runs = {s: self.run_result(f"{self.work}/finetune/{system}/seed{s}", info) for s in self.seeds}
            rows[system] = {"seeds": runs}
        for name, row in rows.items():
            runs = list(row["seeds"].values())
            row["label"] = SYSTEMS[name].label if name in SYSTEMS else "pretrained model, no fine-tuning"
            values = {m: [r[m] for r in runs] for m in ("bleu", "chrf", "term_use", "train_min", "decode_min")}
            for m in ("bleu", "chrf", "term_use"):
                values["new_" + m] = [r["new_word_subset"][m] for r in runs]
            row["mean_std"] = {m: mean_std(v) if None not in v else None for m, v in values.items()}
        # term use on the subset equals the full test's (every term is a new-domain word): in the JSON only
        cols = [("bleu", 1), ("chrf", 1), ("term_use", 100), ("new_bleu", 1), ("new_chrf", 1)]
        say("")
        say(
            f"== test ({info['test_pairs']} sentences; new-word subset {info['test_holding_a_new_word']}): BLEU "
            f"(--tokenize none), chrF, term use (%, {count_entries(self.terms)} terms), {len(self.seeds)} seed(s)"
        )
        say("system      " + "  ".join(f"{c:>14}" for c, _ in cols))
        for name, row in rows.items():
            say(f"{name:<11} " + "  ".join(f"{format_mean_std(row['mean_std'][c], k):>14}" for c, k in cols))
        summary = {
            "what": "a STAND-IN for a real pretrained model: stock transformer_tiny pretrained here on eng_cmn, "
            "fine-tuned on a 1,000-pair slice holding new-domain words",
            "split": {k: v for k, v in info.items() if k != "test_new_word_ids"},
            "terms": count_entries(self.terms),
            "settings": read_json(self.work + "/config.json"),
            "metrics": "BLEU: sacrebleu --tokenize none on the tokenised (jieba) text; chrF; term use: tools/score.py "
            "--terms (share of term-word occurrences whose hypothesis holds the term's target)",
            "rows": rows,
            # $WORK, $REPO (the checkout) and python (its interpreter) stand for this machine's paths
            "commands": {
                "data": self.normalised(
                    {
                        "dictionary": self.dict_command(),
                        "binarise_pretrain": self.binarise_command("pretrain"),
                        "binarise_finetune": self.binarise_command("finetune"),
                        "lexicon": self.lexicon_command(),
                        "terms": self.terms_command(),
                    }
                ),
                "pretrained": self.normalised(self.pretrain_commands()),
                **{f"{s} seed 1": self.normalised(self.finetune_commands(s, 1)) for s in self.systems},
            },
            "work": self.work,
            "wall_s": round(seconds, 1),
            "host": platform.node(),
            "finished": datetime.datetime.now().isoformat(),
        }
        write_json(self.work + "/summary.json", summary)
        say(f"== summary: {self.work}/summary.json; wall time of this invocation {hms(seconds)}")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="bash examples/pretrained/run.sh",
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    g = p.add_argument_group("data")
    g.add_argument(
        "--prepared",
        required=True,
        help="work directory of `bash examples/eng_cmn/run.sh --data ../shared/data/eng_cmn --cpu-small --models "
        "ibm1 --prepare-only --work DIR` (its data/{train,valid,test}.{src,tgt} are read)",
    )
    g.add_argument("--work", required=True, help="this experiment's work directory (not --prepared)")
    g.add_argument("--split-seed", type=int, default=1)
    g.add_argument("--finetune-size", type=int, default=1000, help="pairs in the fine-tuning slice (default 1000)")
    g.add_argument("--min-df", type=int, default=3, help="new-domain words: training document frequency >= (3)")
    g.add_argument("--max-df", type=int, default=30, help="... and <= (30)")
    g.add_argument(
        "--terms-min-test", type=int, default=1, help="a term's word is in at least this many test sources (1)"
    )
    g = p.add_argument_group("what to run")
    g.add_argument(
        "--systems",
        default="plain,pgn,lex",
        help="comma-separated: plain, pgn, lex (default), and pgn_b2, lex_b2 (the gate started at 0.90)",
    )
    g.add_argument("--seeds", type=int, default=3, help="fine-tuning seeds 1..N (default 3)")
    g.add_argument("--pretrain-seed", type=int, default=1)
    g.add_argument("--dry-run", action="store_true", help="print the split's counts and every command; write nothing")
    g.add_argument("--force", action="store_true", help="redo finished steps")
    g.add_argument("--progress-every", type=float, default=60.0, metavar="SECONDS")
    g = p.add_argument_group("settings (tiny Transformer, the recipes' --cpu-small optimiser)")
    g.add_argument("--pretrain-updates", type=int, default=3000)
    g.add_argument("--pretrain-validate-every", type=int, default=500)
    g.add_argument("--finetune-updates", type=int, default=800)
    g.add_argument("--finetune-lr", type=float, default=3e-4)
    g.add_argument("--finetune-warmup", type=int, default=100)
    g.add_argument("--validate-every", type=int, default=100, help="fine-tuning: updates between dev-loss checks")
    g.add_argument("--patience", type=int, default=3, help="fine-tuning early stopping (0: off)")
    g.add_argument("--beam", type=int, default=5)
    return p


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    process.PROGRESS_EVERY = max(1.0, args.progress_every)
    return exit_status_of(lambda: Experiment(args).run())


if __name__ == "__main__":
    sys.exit(main())
