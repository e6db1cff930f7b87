#!/usr/bin/env python
"""The one driver behind examples/{colors,scan,cogs,eng_cmn}/run.sh (Akyurek & Andreas 2021, section 5).

    python examples/lib/recipe.py TASK [options]      # TASK: colors, scan, cogs, eng_cmn (run.sh passes it)

For each task: prepare the data (official layouts) -> learn the lexicons (tools/build_lexicon.py) ->
fairseq-preprocess -> for every seed and model: fairseq-train -> fairseq-generate -> tools/score.py --json ->
mean +/- std over seeds (lexical_offline.metrics.aggregate), printed as a table and written to WORK/summary.json.

Layout of WORK:
    config.json                      the recipe's settings (paper or CPU-small), models, seeds, data files
    data/                            train/valid/test .src/.tgt (whitespace-normalised), lexcorpus.src/.tgt
    bin/                             fairseq-preprocess output (+ prepared.json: what it was made from)
    lexicons/<method>.tsv            learned lexicons (+ .log)
    <model>/seed<N>/                 config.json, train.log, generate.txt, generate.log, score.json, run.json
    summary.json                     mean +/- std over the seeds of this invocation, per model and metric

A (model, seed) whose score.json exists is skipped (unless --force); its config.json must then match the current
settings, else the recipe stops (use --force or another --work). An unfinished run with matching settings resumes
from its checkpoint_last.pt (fairseq's own restore; runs without validation save one every RESUME_SAVE_EVERY
updates), appending to its train.log; one stopped before its first checkpoint starts again, its logs kept as
train.log.1, ...; one with other settings starts again.
"""
from __future__ import annotations

import argparse
import datetime
import hashlib
import json
import math
import os
import platform
import random
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field, replace
from typing import Callable, Dict, List, Optional, Sequence, Tuple

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, ROOT)
from lexical_offline.corpus import CorpusError, write_parallel  # noqa: E402  (neither fairseq nor torch)
from lexical_offline.metrics.aggregate import aggregate_dir, format_mean_std, format_summary  # noqa: E402

PROG = "run.sh"


class RecipeError(Exception):
    """A user-facing error: printed as `run.sh: error: ...`, exit status 2."""


def say(*parts) -> None:
    print(*parts, flush=True)


# ----------------------------------------------------------------------------------------------------------------
# Models and lexicons
# ----------------------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class ModelSpec:
    label: str                   # row label of the tables
    arch: str                    # full-size fairseq arch (the CPU-small one adds "_small")
    lexicon: Optional[str]       # None (plain LSTM), "identity", "uniform", or a lexicon method ("simple", ...)
    extra: Tuple[str, ...] = ()  # further fairseq-train options
    small_arch: Optional[str] = None   # the --cpu-small arch when it is not arch + "_small" (Transformer rows)
    small_extra: Tuple[str, ...] = ()  # fairseq-train options of the --cpu-small arch instead of `extra`
    transformer: bool = False    # Transformer family: TransformerSettings instead of the LSTM schedule

    @property
    def lexical(self) -> bool:
        return self.lexicon is not None

    @property
    def lla(self) -> bool:
        """Thrush (2020)'s LLA-LSTM: its own schedule (LLA_SETTINGS), Thrush's metrics, --damage applies."""
        return self.arch.startswith("lla_lstm")

    @property
    def adversary(self) -> bool:
        return self.lla and "--no-adversary" not in self.extra


MODELS: Dict[str, ModelSpec] = {
    "lstm": ModelSpec("LSTM", "lstm_plain", None),
    "copy": ModelSpec("LSTM + copy", "lex_lstm", "identity"),
    "simple": ModelSpec("LSTM + Lex.: Simple", "lex_lstm", "simple"),
    "pmi": ModelSpec("LSTM + Lex.: PMI", "lex_lstm", "pmi"),
    "ibm2": ModelSpec("LSTM + Lex.: IBMM2 (IBM Model 2)", "lex_lstm", "ibm2"),
    "ibm1": ModelSpec("LSTM + Lex.: IBMM2 as released (IBM Model 1)", "lex_lstm", "ibm1"),
    "bayes": ModelSpec("LSTM + Lex.: Bayesian", "lex_lstm", "bayes"),
    "uniform": ModelSpec("LSTM + Lex.: Uniform (learned)", "lex_lstm", "uniform", ("--lexicon-trainable",)),
    "soft": ModelSpec("LSTM + Lex.: Simple, Soft (tau 0.1)", "lex_lstm", "simple", ("--lexicon-temperature", "0.1")),
    "learned": ModelSpec("LSTM + Lex.: Simple, Soft + Learned", "lex_lstm", "simple",
                         ("--lexicon-temperature", "0.1", "--lexicon-trainable")),
    # Thrush (2020): the Lexicon and Lexicon-Adversary units (docs/lla.md); not rows of Akyurek & Andreas' tables,
    # so neither 'paper' nor 'all' includes them.
    "lla": ModelSpec("LLA-LSTM (Thrush 2020)", "lla_lstm", None),
    "lla_noadv": ModelSpec("LLA-LSTM, no adversary (Thrush 2020)", "lla_lstm", None, ("--no-adversary",)),
}

# Transformer family (docs/transformer.md, docs/rdangle.md). Full size = fairseq's `transformer_iwslt_de_en`
# (6 + 6 layers, 512, FFN 1024, 4 heads, dropout 0.3), the configuration the R-Dangle paper (Zheng & Lapata 2023,
# section 5 and appendix C) uses for its Transformer and Dangle baselines; rdangle_transformer_iwslt_de_en has the
# same sizes. lex_transformer itself has fairseq's `transformer` sizes, so the rows built on it set the iwslt sizes.
# --cpu-small: the _tiny archs (64, FFN 64, 2 heads, 2 + 2 layers). Not in 'paper' or 'all': name them.
IWSLT_SIZES = ("--encoder-embed-dim", "512", "--decoder-embed-dim", "512", "--encoder-ffn-embed-dim", "1024",
               "--decoder-ffn-embed-dim", "1024", "--encoder-attention-heads", "4", "--decoder-attention-heads", "4",
               "--encoder-layers", "6", "--decoder-layers", "6", "--dropout", "0.3")
MODELS.update({
    "transformer": ModelSpec("Transformer", "lex_transformer", "none", IWSLT_SIZES, small_arch="lex_transformer_tiny",
                             transformer=True),
    "lex_transformer": ModelSpec("Transformer + Lex.: Simple", "lex_transformer", "simple", IWSLT_SIZES,
                                 small_arch="lex_transformer_tiny", transformer=True),
    # pgn_transformer already has the iwslt sizes (docs/transformer.md) but fairseq's default dropout 0.1
    "pgn": ModelSpec("PGN Transformer (identity lexicon, joined dictionary)", "pgn_transformer", "identity",
                     ("--dropout", "0.3"), small_arch="lex_transformer_tiny", transformer=True),
    "dangle": ModelSpec("Dangle (R-Dangle shr, interval 1)", "dangle_transformer", None,
                        ("--kv-mode", "shared", "--reencode-interval", "1"), small_arch="rdangle_transformer_tiny",
                        transformer=True),
    "rdangle_shr": ModelSpec("R-Dangle shr, interval 4", "rdangle_transformer_iwslt_de_en", None,
                             ("--kv-mode", "shared", "--reencode-interval", "4"),
                             small_arch="rdangle_transformer_tiny", transformer=True),
    "rdangle_sep": ModelSpec("R-Dangle sep, interval 4", "rdangle_transformer_iwslt_de_en", None,
                             ("--kv-mode", "sep", "--reencode-interval", "4"),
                             small_arch="rdangle_transformer_tiny", transformer=True),
    # interval 1 with separate values: the R-Dangle_sep of the paper's Table 4 (shared kv at interval 1 is Dangle)
    "rdangle_sep_o1": ModelSpec("R-Dangle sep, interval 1", "rdangle_transformer_iwslt_de_en", None,
                                ("--kv-mode", "sep", "--reencode-interval", "1"),
                                small_arch="rdangle_transformer_tiny", transformer=True),
})
# the --cpu-small rows keep their lexicon/interval/kv-mode options but not the full-size ones (IWSLT_SIZES, dropout)
_FULL_SIZE_OPTIONS = set(IWSLT_SIZES[0::2])


def _small_extra(extra: Tuple[str, ...]) -> Tuple[str, ...]:
    """extra without the full-size options (option-value pairs of IWSLT_SIZES and --dropout)."""
    pairs = list(zip(extra[0::2], extra[1::2]))
    return tuple(a for opt, val in pairs if opt not in _FULL_SIZE_OPTIONS for a in (opt, val))


for _name, _spec in list(MODELS.items()):
    if _spec.transformer:
        MODELS[_name] = replace(_spec, small_extra=_small_extra(_spec.extra))
LLA_MODELS = tuple(m for m, spec in MODELS.items() if spec.lla)
TRANSFORMER_MODELS = tuple(m for m, spec in MODELS.items() if spec.transformer)
JOINED_DICT_MODELS = ("pgn",)  # the identity lexicon can copy every source token only with one joined dictionary


@dataclass
class TransformerSettings:
    """Training settings of the Transformer rows. The R-Dangle paper gives sizes and dropout only (appendix C:
    fairseq's `transformer_iwslt_de_en` for the Transformer and Dangle baselines) and no optimiser, batch or length
    of training, and it has no COGS, SCAN or English-Chinese experiments. So these are fairseq's own recipe for
    `transformer_iwslt_de_en` (fairseq examples/translation/README.md: Adam (0.9, 0.98), lr 5e-4, inverse_sqrt with
    4000 warm-up updates, no clipping, weight decay 1e-4, label smoothing 0.1, --max-tokens 4096), with
    max_update our choice (assumption). Validation interval, patience, beam, checkpoint and max_len_b are the task's."""
    lr: float = 5e-4
    warmup: int = 4000
    adam_betas: str = "(0.9, 0.98)"
    clip_norm: float = 0.0
    weight_decay: float = 0.0001
    label_smoothing: float = 0.1
    max_tokens: Optional[int] = 4096
    batch_size: Optional[int] = None     # sentences per batch (None: --max-tokens alone)
    update_freq: int = 1
    max_update: int = 30000
    sentence_avg: bool = False


# --cpu-small (not the paper's, not fairseq's): the _tiny archs, batch 64 sentences, 2000 updates, 400 warm-up,
# lr 1e-3 (a d = 64 model tolerates more than 5e-4).
TRANSFORMER_PAPER = TransformerSettings()
TRANSFORMER_CPU_SMALL = replace(TRANSFORMER_PAPER, lr=1e-3, warmup=400, max_tokens=None, batch_size=64,
                                max_update=2000)


# The Lexicon Unit's validation BCE as lexical_cross_entropy logs it (an auxiliary loss named "lexicon").
LEXICON_UNIT_METRIC = "aux_lexicon"
# The Lexicon Unit's parameters in an lla_lstm checkpoint (tools/damage.py's "lexicon" group).
LEXICON_UNIT_PREFIX = "encoder.lexicon_unit."


@dataclass
class LlaSettings:
    """Thrush (2020), 'The hyperparameters are as follows' (the same for every domain): Lexicon Unit batch 1 for
    the first 30 epochs (sparse Adam, lr 0.1 = Adam lr 0.001 x --lexicon-unit-lr-scale 100, docs/lla.md), then the
    other modules with batch 30 until epoch 1000, Adam lr 0.001 (torch defaults: constant, betas (0.9, 0.999)),
    no clipping. Run as two fairseq-train calls (docs/lla.md): epochs 1..lexicon_epochs with lexicon_batch_size,
    then epochs lexicon_epochs+1..max_epoch with batch_size, resuming checkpoint_last.pt."""
    lr: float = 0.001
    batch_size: int = 30
    lexicon_batch_size: int = 1
    lexicon_epochs: int = 30
    max_epoch: int = 1000
    # "best": Thrush's "the validation score is calculated after each train epoch and the model with the best is
    # tested" (validation exact match; Colors validates on its training set), the first epoch reaching the best,
    # and "to compute the Lexicon Unit to use, we measure its loss (BCE) on the validation set" (LEXICON_UNIT_METRIC);
    # "last": the last epoch's model and the Lexicon Unit of the last of its epochs
    checkpoint: str = "best"

    def is_paper(self) -> bool:
        return self == LlaSettings()

    def describe(self, tag: bool = True) -> str:
        text = (f"Lexicon Unit alone for epochs 1-{self.lexicon_epochs} (batch {self.lexicon_batch_size}), then the "
                f"rest to epoch {self.max_epoch} (batch {self.batch_size}); Adam lr {self.lr:g} constant, no clipping; "
                + ("the first epoch with the best validation score is evaluated" if self.checkpoint == "best"
                   else "the last epoch is evaluated"))
        if not tag:
            return text
        return text + (" [Thrush 2020's schedule]" if self.is_paper() else " [REDUCED/CHANGED: not Thrush 2020's "
                                                                             "schedule (30 / 1000 epochs, batch 1 / 30, "
                                                                             "best epoch)]")

# method -> (tools/build_lexicon.py options, description printed with the entry count)
LEXICON_METHODS: Dict[str, Tuple[Tuple[str, ...], str]] = {
    "simple": (("--method", "simple"), "Simple rule, section 4.2"),
    "pmi": (("--method", "pmi"), "PMI, eq. 13"),
    "ibm2": (("--method", "ibm2", "--symmetrize", "intersect"),
             "IBM Model 2, optimised tension, intersect, eq. 12"),
    "ibm1": (("--method", "ibm1", "--symmetrize", "intersect"),
             "IBM Model 1, intersect: what the authors' released 'IBMM2' lexicons are"),
    "bayes": (("--method", "bayes", "--seed", "0"), "Bayesian, Frank et al. 2007, eq. 14"),
}


# ----------------------------------------------------------------------------------------------------------------
# Hyper-parameters
# ----------------------------------------------------------------------------------------------------------------

def noam_peak_lr(d_model: int, warmup: int, factor: float = 1.0) -> float:
    """Peak of the Noam schedule factor * d^-0.5 * min(step^-0.5, step * warmup^-1.5), reached at step = warmup;
    fairseq's inverse_sqrt with --lr = this peak and --warmup-updates = warmup is the same schedule."""
    return factor * d_model ** -0.5 * warmup ** -0.5


@dataclass
class HParams:
    hidden: int                      # LSTM hidden size = embedding size (informational; the arch sets it)
    lr: float                        # peak learning rate of inverse_sqrt (= the Noam peak)
    warmup: int
    clip_norm: float
    batch_size: int
    update_freq: int
    max_update: int
    validate_every: Optional[int]    # None: no validation (Colors)
    patience: Optional[int]          # early stopping on validation loss, in validations (None: off)
    write_dropout: float
    write_dropout_models: str        # "lexical" or "all": which models get --write-dropout
    sentence_avg: bool               # loss summed per sentence, averaged over sentences (the authors' code)
    adam_betas: Optional[str]        # None: fairseq's default (0.9, 0.999)
    beam: int
    checkpoint: str                  # "last" or "best"
    max_len_b: int                   # fairseq-generate --max-len-b (output length limit)
    gen_batch_size: int = 128
    log_interval: int = 100
    lexicon_top_k: Optional[int] = None
    decoder: str = "authors"         # LSTM rows: "authors" (their released decoder) or "fairseq" (fairseq's LSTM)


# The LSTM decoder of the authors' released code (ekinakyurek/lexical, src/decoder.py), which produced the paper's
# numbers: attentional output W [e(y_t-1); o_t-1; h_t; c_t] + b without tanh, N(0, 1) embeddings and, for the
# lexical rows, the gate as a "copy" word of p_write's softmax. On Colors it is the difference between ~0.1 and the
# paper's 0.79 (examples/RESULTS.md). `--decoder fairseq` gives fairseq's LSTM (tanh Luong output, eq. 6's gate).
AUTHORS_DECODER = ("--decoder-output", "combined", "--embedding-init", "normal")
AUTHORS_GATE = ("--gate-form", "copy-token", "--gate-features", "output")


# Appendix C.1 (COGS, SCAN, English-Chinese share these) + the authors' scripts (exp/*/*.sh of
# github.com/ekinakyurek/lexical) where the paper is silent: batch 512 = 128 x 4 accumulated, Adam betas
# (0.9, 0.998), validation every 500 updates with early stopping on validation loss (tolerance 10), the loss summed
# over tokens and averaged over sentences, the final model evaluated.
PAPER_COMMON = HParams(
    hidden=512, lr=noam_peak_lr(512, 4000), warmup=4000, clip_norm=5.0, batch_size=128, update_freq=4,
    max_update=8000, validate_every=500, patience=10, write_dropout=0.0, write_dropout_models="lexical",
    sentence_avg=True, adam_betas="(0.9, 0.998)", beam=5, checkpoint="last", max_len_b=200,
)
# CPU-sized (not the paper's): 2 x 128 LSTM, batch 64, 2000 updates, Noam schedule for d = 128 with 400 warm-up.
CPU_SMALL_COMMON = replace(
    PAPER_COMMON, hidden=128, lr=noam_peak_lr(128, 400), warmup=400, batch_size=64, update_freq=1,
    max_update=2000, validate_every=250, log_interval=50,
)


# ----------------------------------------------------------------------------------------------------------------
# Tasks
# ----------------------------------------------------------------------------------------------------------------

@dataclass
class Prepared:
    train: List[Tuple[str, str]]
    valid: Optional[List[Tuple[str, str]]]       # None: no validation set (Colors: the training set stands in)
    test: List[Tuple[str, str]]
    lexcorpus: List[Tuple[str, str]]             # what the lexicons are learned from
    files: Dict[str, str]                        # role -> data file read
    notes: List[str] = field(default_factory=list)
    score_args: List[str] = field(default_factory=list)   # task-specific tools/score.py options


class Task:
    name = ""
    title = ""
    default_models = "paper"
    paper_models: Tuple[str, ...] = ()
    paper_seeds = 1
    columns: Tuple[Tuple[str, str], ...] = (("exact_match", "exact match"),)
    paper_table = ""
    lexicon_build_args: Tuple[str, ...] = ()
    args: Optional[argparse.Namespace] = None  # set by main(): the parsed options
    # Thrush (2020), for the lla rows: Table 1 (one run each, in %; no std given), Table 2's damage precision (%),
    # and the example sentence of Table 2 (decoded under every damage condition)
    thrush_paper: Dict[str, Dict[str, float]] = {}
    thrush_damage_paper: Dict[str, float] = {}
    damage_examples: Tuple[str, ...] = ()
    # Thrush's validation metric for the lla rows' model selection: (fairseq's logged name, extra fairseq-train
    # options); exact match, the criterion's greedy one, "unless otherwise stated"
    lla_selection: Tuple[str, Tuple[str, ...]] = ("exact_match", ())

    def add_args(self, parser: argparse.ArgumentParser) -> None:
        pass

    def default_data(self) -> Optional[str]:
        return None

    def default_work(self, args) -> str:
        return os.path.join(os.environ.get("TMPDIR", "/tmp"), f"fairseq_lexical_{self.name}")

    def hparams(self, args) -> HParams:
        return CPU_SMALL_COMMON if args.cpu_small else PAPER_COMMON

    def patience_for(self, model: str, hp: HParams) -> Optional[int]:
        return hp.patience

    def locate(self, data: str) -> Dict[str, str]:
        raise NotImplementedError

    def prepare(self, args, files: Dict[str, str]) -> Prepared:
        raise NotImplementedError

    def paper(self, args) -> Dict[str, Dict[str, Tuple[float, float]]]:
        return {}

    def result_line(self, score: dict) -> str:
        return f"exact match {score['exact_match']:.4f}"

    def extra_report(self, args, summary, labels) -> str:
        return ""


def find_file(data: str, name: str, subdirs: Sequence[str] = ("",)) -> str:
    """DATA/<subdir>/<name> for the first subdir where it exists; else an error naming every place looked at."""
    tried = []
    for sub in subdirs:
        path = os.path.join(data, sub, name) if sub else os.path.join(data, name)
        if os.path.isfile(path):
            return path
        tried.append(path)
    raise RecipeError(f"data file not found: {name} (looked for {' and '.join(tried)})")


def read_corpus(path: str, fmt: str) -> List[Tuple[str, str]]:
    from lexical_offline.lexicon.builder import read_pairs  # numpy/numba: imported only when data is read

    try:
        if fmt == "cogs":
            return read_pairs(path, fmt="tsv-columns", columns=(0, 1))
        return read_pairs(path, fmt=fmt)
    except CorpusError as e:
        raise RecipeError(str(e)) from None


# Exact match, mean +/- std over seeds, as printed in Table 2 (16 seeds for Colors, 10 for SCAN and COGS).
def _p(mean, std):
    return {"exact_match": (mean, std)}


class Colors(Task):
    name = "colors"
    title = "Colors test exact match"
    default_models = "lstm,simple"
    paper_models = ("lstm", "simple", "pmi", "ibm2", "ibm1", "bayes")
    paper_seeds = 16
    paper_table = "Table 2"

    def default_data(self):
        return os.path.join(ROOT, "examples", "colors", "data")

    def hparams(self, args):
        # Appendix C.1 for Colors: batch 5 (1/3 of the 14 examples), clip 0.5, warm-up 32 epochs (= 89 updates),
        # extra dropout 0.5 before p_write; the authors' scripts: 200 epochs (= 560 updates), no validation set.
        # The loss normalisation (per token) and Adam betas (fairseq's) are those of the first version of this
        # recipe, kept as its defaults (--sentence-avg --adam-betas "(0.9, 0.998)" give the authors' code's).
        hp = replace(PAPER_COMMON, lr=0.0047, warmup=89, clip_norm=0.5, batch_size=5, update_freq=1, max_update=560,
                     validate_every=None, patience=None, write_dropout=0.5, write_dropout_models="all",
                     sentence_avg=False, adam_betas=None, gen_batch_size=32)
        if args.cpu_small:
            hp = replace(hp, hidden=128)
        return hp

    def locate(self, data):
        return {"train": find_file(data, "train.tsv"), "test": find_file(data, "test.tsv")}

    def prepare(self, args, files):
        train = read_corpus(files["train"], "tsv")
        return Prepared(train=train, valid=None, test=read_corpus(files["test"], "tsv"), lexcorpus=train,
                        files=files, notes=["no validation set: the training set stands in for fairseq, "
                                            "validation is disabled and the last checkpoint is used (the lla "
                                            "rows validate on it to select their epoch, as Thrush 2020 does)"])

    # Thrush 2020, Table 1 (Colors: Prec., Rec., Acc., Exact; the LSTM row reads 90 / 62.50 / 49.48 / 0) and
    # Table 2 (precision of the LLA-LSTM with its LSTMs or its Lexicon Unit re-initialised; undamaged = Table 1's).
    thrush_paper = {"lla": {"precision": 90.0, "recall": 62.50, "token_accuracy": 50.90, "exact_match": 0.0},
                    "lla_noadv": {"precision": 90.0, "recall": 62.50, "token_accuracy": 49.48, "exact_match": 0.0}}
    thrush_damage_paper = {"none": 90.0, "lstm": 95.0, "lexicon": 90.0}
    damage_examples = ("wif kiki lug",)

    def paper(self, args):
        # Table 2, Colors column; IBMM2's row is shown beside both IBM variants (see the README).
        return {"lstm": _p(0.00, 0.00), "simple": _p(0.79, 0.02), "pmi": _p(0.41, 0.19), "ibm2": _p(0.79, 0.02),
                "ibm1": _p(0.79, 0.02), "bayes": _p(0.51, 0.21)}


SCAN_SPLITS = {
    # split: (folder in brendenlake/SCAN, train file, test file)
    "jump": ("add_prim_split", "tasks_train_addprim_jump.txt", "tasks_test_addprim_jump.txt"),
    "around_right": ("template_split", "tasks_train_template_around_right.txt",
                     "tasks_test_template_around_right.txt"),
}


class Scan(Task):
    name = "scan"
    paper_models = ("lstm", "simple", "pmi", "ibm2", "ibm1", "bayes")
    paper_seeds = 10
    paper_table = "Table 2"

    def add_args(self, parser):
        g = parser.add_argument_group("SCAN")
        g.add_argument("--split", choices=sorted(SCAN_SPLITS), default="jump",
                       help="jump (add_prim_split) or around_right (template_split); default jump")
        g.add_argument("--valid-fraction", type=float, default=0.01,
                       help="share of the training file held out for validation (default 0.01, as the authors' "
                            "code; at least one pair)")
        g.add_argument("--valid-seed", type=int, default=0, help="seed of the held-out draw (default 0)")

    def default_work(self, args):
        return os.path.join(os.environ.get("TMPDIR", "/tmp"), f"fairseq_lexical_scan_{args.split}")

    def hparams(self, args):
        # Appendix C.1: "For SCAN and Colors, we applied additional dropout (p=0.5) in the last layer of p_write";
        # the authors' SCAN scripts apply it to the lexical models only (the plain LSTM has no p_write).
        return replace(super().hparams(args), write_dropout=0.5, write_dropout_models="lexical")

    def patience_for(self, model, hp):
        # The authors' SCAN scripts: tolerance 20 for Simple, PMI and Bayesian, 10 for the LSTM and IBM runs.
        if hp.patience is not None and model in ("simple", "pmi", "bayes") and self.args.patience is None:
            return 20
        return hp.patience

    def locate(self, data):
        folder, train, test = SCAN_SPLITS[self.args.split]
        return {"train": find_file(data, train, (folder, "")), "test": find_file(data, test, (folder, ""))}

    def prepare(self, args, files):
        full = read_corpus(files["train"], "scan")
        n_valid = max(1, int(math.floor(len(full) * args.valid_fraction)))
        if n_valid >= len(full):
            raise RecipeError(f"{files['train']}: {len(full)} pairs are too few to hold out {n_valid} for validation")
        held = set(random.Random(args.valid_seed).sample(range(len(full)), n_valid))
        train = [p for i, p in enumerate(full) if i not in held]
        valid = [p for i, p in enumerate(full) if i in held]
        return Prepared(
            train=train, valid=valid, test=read_corpus(files["test"], "scan"), lexcorpus=full, files=files,
            notes=[f"validation: {n_valid} of {len(full)} training pairs held out (fraction {args.valid_fraction}, "
                   f"seed {args.valid_seed}); the lexicons are learned from the whole training file"])

    def paper(self, args):
        if args.split == "jump":
            return {"lstm": _p(0.00, 0.00), "simple": _p(0.92, 0.17), "pmi": _p(0.95, 0.08),
                    "ibm2": _p(0.79, 0.27), "ibm1": _p(0.79, 0.27), "bayes": _p(0.82, 0.21)}
        return {"lstm": _p(0.09, 0.05), "simple": _p(0.95, 0.01), "pmi": _p(0.02, 0.04), "ibm2": _p(0.00, 0.00),
                "ibm1": _p(0.00, 0.00), "bayes": _p(0.02, 0.04)}


class Cogs(Task):
    name = "cogs"
    title = "COGS generalization (gen) exact match"
    paper_models = ("lstm", "copy", "simple", "pmi", "ibm2", "ibm1", "bayes", "uniform", "soft", "learned")
    paper_seeds = 10
    paper_table = "Tables 2 and 5"

    def add_args(self, parser):
        g = parser.add_argument_group("COGS")
        g.add_argument("--gen", default="gen.tsv",
                       help="generalization set in the data directory (default gen.tsv; gen_2020.tsv is the "
                            "2020 version the paper used)")

    def hparams(self, args):
        # COGS outputs reach 480 tokens (recursion cases of gen): fairseq-generate's default limit is 200.
        return replace(super().hparams(args), max_len_b=512)

    def locate(self, data):
        subdirs = ("", "data")
        return {"train": find_file(data, "train.tsv", subdirs), "valid": find_file(data, "dev.tsv", subdirs),
                "test": find_file(data, self.args.gen, subdirs)}

    def prepare(self, args, files):
        train = read_corpus(files["train"], "cogs")
        return Prepared(
            train=train, valid=read_corpus(files["valid"], "cogs"), test=read_corpus(files["test"], "cogs"),
            lexcorpus=train, files=files, score_args=["--categories", files["test"], "--cogs-table3"],
            notes=["train on train.tsv, validate on dev.tsv, test on " + os.path.basename(files["test"])])

    def paper(self, args):
        # Table 2 (COGS column) and Table 5 (Uniform, Soft, Learned; its LSTM row reads 0.51 +/- 0.06).
        return {"lstm": _p(0.51, 0.05), "copy": _p(0.66, 0.03), "simple": _p(0.82, 0.01), "pmi": _p(0.82, 0.00),
                "ibm2": _p(0.82, 0.00), "ibm1": _p(0.82, 0.00), "bayes": _p(0.70, 0.04),
                "uniform": _p(0.56, 0.07), "soft": _p(0.83, 0.00), "learned": _p(0.83, 0.01)}

    def extra_report(self, args, summary, labels):
        rows = []
        for entry in summary.values():
            for name in entry["metrics"]:
                if name.startswith("cogs_table3.") and name.endswith(".exact_match"):
                    row = name[len("cogs_table3."):-len(".exact_match")]
                    if row not in rows:
                        rows.append(row)
        if not rows:
            return ""
        header = ["Table 3 row"] + list(summary)
        table = [header]
        for row in rows:
            key = f"cogs_table3.{row}.exact_match"
            table.append([row] + [format_mean_std(summary[m]["metrics"].get(key)) for m in summary])
        widths = [max(len(r[k]) for r in table) for k in range(len(header))]
        lines = ["  ".join([r[0].ljust(widths[0])] + [c.rjust(w) for c, w in zip(r[1:], widths[1:])]).rstrip()
                 for r in table]
        return ("== COGS gen exact match per Table 3 row, mean +/- std (the paper's Table 3 has no numbers in our "
                "copy of the text)\n" + "\n".join(lines))


class EngCmn(Task):
    name = "eng_cmn"
    title = "English-Chinese test BLEU"
    paper_models = ("lstm", "pmi", "simple", "ibm2", "ibm1")
    paper_seeds = 5
    paper_table = "Table 4"
    columns = (("bleu", "BLEU"), ("one_shot.bleu", "1-shot BLEU"))
    # The mutual-exclusivity fallback would write millions of uniform entries here (3,618 unmapped English words x
    # 6,694 unclaimed Chinese words for Simple; the builder refuses): without it an unmapped word maps to itself or
    # to <unk> in the model.
    lexicon_build_args = ("--no-fallback",)
    # Thrush 2020, Table 1 (English to Mandarin: BLEU only; LSTM 9.95) and Table 2 (precision under damage).
    thrush_paper = {"lla": {"bleu": 11.71}, "lla_noadv": {"bleu": 11.40}}
    # Thrush selects English-Chinese models on validation BLEU: fairseq's own, greedy, over the files' tokens
    lla_selection = ("bleu", ("--eval-bleu", "--eval-bleu-args", '{"beam": 1, "max_len_a": 0, "max_len_b": 200}',
                              "--eval-tokenized-bleu", "--eval-bleu-remove-bpe", "none"))
    thrush_damage_paper = {"lstm": 87.37, "lexicon": 54.52}
    damage_examples = ("I ate some fish .",)

    def add_args(self, parser):
        g = parser.add_argument_group("English-Chinese")
        g.add_argument("--tokenization", choices=("authors", "thrush"), default="authors",
                       help="authors (default): the files' Moses/jieba tokens as they are (Akyurek & Andreas); "
                            "thrush: Thrush 2020's, English split into words and punctuation (Moses escapes undone), "
                            "Chinese into characters (runs of Latin letters and digits stay one token); applies to "
                            "every model of the run (default work directory ..._eng_cmn_thrush)")

    def default_work(self, args):
        suffix = "_thrush" if args.tokenization == "thrush" else ""
        return os.path.join(os.environ.get("TMPDIR", "/tmp"), f"fairseq_lexical_{self.name}{suffix}")

    def hparams(self, args):
        # PMI's tau = 0 rows tie over thousands of words here ('.' -> 8,849 words seen only with it): keep 8 per row.
        return replace(super().hparams(args), lexicon_top_k=8)

    def locate(self, data):
        return {split: find_file(data, f"cmn.txt_{name}_tokenized.tsv")
                for split, name in (("train", "train"), ("valid", "dev"), ("test", "test"))}

    def prepare(self, args, files):
        read = lambda role: read_corpus(files[role], "tsv")  # noqa: E731
        train, valid, test = read("train"), read("valid"), read("test")
        notes = ["the TSV files are already tokenised (Moses English, jieba Chinese, appendix E.3): BLEU over "
                 "those tokens (--tokenize none); 1-shot = test sentences with an English word seen once in training"]
        if args.tokenization == "thrush":
            train, valid, test = ([thrush_tokenize_pair(s, t) for s, t in part] for part in (train, valid, test))
            notes = ["Thrush 2020's tokenisation (--tokenization thrush): English split into words and punctuation, "
                     "Chinese into characters (Latin letter/digit runs kept whole); BLEU over these tokens "
                     "(--tokenize none, i.e. character BLEU for Chinese); 1-shot over these English words"]
        return Prepared(
            train=train, valid=valid, test=test, lexcorpus=train, files=files,
            score_args=["--bleu", "--tokenize", "none", "--train-source", "TRAIN_SRC", "--test-source", "TEST_SRC"],
            notes=notes)

    def paper(self, args):
        p = {"lstm": (24.18, 0.37, 17.47, 0.64), "pmi": (24.36, 0.09, 18.46, 0.13),
             "simple": (24.35, 0.09, 18.46, 0.19), "ibm2": (25.49, 0.42, 19.62, 0.64),
             "ibm1": (25.49, 0.42, 19.62, 0.64)}
        return {m: {"bleu": (a, b), "one_shot.bleu": (c, d)} for m, (a, b, c, d) in p.items()}

    def result_line(self, score):
        one = score.get("one_shot", {})
        one_bleu = one.get("bleu")
        return (f"BLEU {score['bleu']:.2f}  1-shot BLEU "
                f"{'n/a' if one_bleu is None else format(one_bleu, '.2f')} ({one.get('n', 0)} sentences)")


_MOSES_ESCAPES = (("&apos;", "'"), ("&quot;", '"'), ("&lt;", "<"), ("&gt;", ">"), ("&#91;", "["), ("&#93;", "]"),
                  ("&#124;", "|"), ("&amp;", "&"))


def thrush_tokenize_pair(src: str, tgt: str) -> Tuple[str, str]:
    """Thrush (2020), English-Chinese: "The English was tokenized by splitting on punctuation and words. The
    Chinese was tokenized by splitting on punctuation and characters." From the Moses/jieba-tokenised files: undo
    Moses' escapes, then English = runs of word characters and single punctuation marks ("don 't" -> don ' t);
    Chinese = every non-space character, except that runs of ASCII letters/digits (names, numbers) stay one token."""
    for esc, ch in _MOSES_ESCAPES:
        src, tgt = src.replace(esc, ch), tgt.replace(esc, ch)
    return (" ".join(re.findall(r"\w+|[^\w\s]", src)), " ".join(re.findall(r"[A-Za-z0-9]+|\S", tgt)))


TASKS = {t.name: t for t in (Colors(), Scan(), Cogs(), EngCmn())}


# ----------------------------------------------------------------------------------------------------------------
# Command line
# ----------------------------------------------------------------------------------------------------------------

def build_parser(task: Task) -> argparse.ArgumentParser:
    paper_list = ",".join(task.paper_models)
    parser = argparse.ArgumentParser(
        prog=f"bash examples/{task.name}/run.sh",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description=f"{task.name}: prepare -> lexicons -> fairseq-preprocess -> train -> generate -> score, for each "
                    f"model and seed, then mean +/- std over seeds (see examples/{task.name}/README.md).",
        epilog=(f"Models: {', '.join(f'{k} ({v.label})' for k, v in MODELS.items())}.\n"
                f"'paper' = the rows of the paper's {task.paper_table} for this task: {paper_list}; 'all' = every "
                f"model but lla and lla_noadv (Thrush 2020) and the Transformer rows ({', '.join(TRANSFORMER_MODELS)}): "
                f"name them.\nThe paper's defaults are appendix C.1's settings; --cpu-small is a CPU-sized variant, "
                f"labelled as such in the output, config.json and summary.json."),
    )
    g = parser.add_argument_group("data and output")
    default_data = task.default_data()
    g.add_argument("--data", default=default_data, required=default_data is None,
                   help="data directory, official layout" + (f" (default {default_data})" if default_data else ""))
    g.add_argument("--work", help="work directory (default $TMPDIR/fairseq_lexical_<task>[_<split>], TMPDIR=/tmp)")
    g = parser.add_argument_group("what to run")
    g.add_argument("--models", default=task.default_models,
                   help=f"comma-separated models, or 'paper' / 'all' (default {task.default_models})")
    g.add_argument("--seeds", type=int, default=1, help=f"run seeds 1..N (default 1; the paper: {task.paper_seeds})")
    g.add_argument("--seed-list", help="comma-separated seeds instead of 1..N (e.g. to split seeds across machines)")
    g.add_argument("--force", action="store_true", help="re-run (model, seed) pairs that have a score.json, and "
                                                         "rebuild the lexicons")
    g.add_argument("--dry-run", action="store_true", help="check the data and print the commands, run nothing")
    g.add_argument("--progress-every", type=float, default=PROGRESS_EVERY, metavar="SECONDS",
                   help=f"how often to print a training run's update count and validation loss (default "
                        f"{PROGRESS_EVERY:.0f})")
    g.add_argument("--keep-checkpoints", choices=("used", "all", "none"), default="used",
                   help="after scoring keep the evaluated checkpoint (default), every checkpoint, or none")
    g = parser.add_argument_group("settings (defaults: the paper's, appendix C.1)")
    g.add_argument("--cpu-small", action="store_true",
                   help="CPU-sized settings, not the paper's: 2 x 128 LSTM and, except on Colors, batch 64, "
                        "2000 updates, 400 warm-up updates, validation every 250 updates")
    g.add_argument("--max-update", type=int, help="training updates")
    g.add_argument("--lr", type=float, help="peak learning rate of the inverse-sqrt (Noam) schedule")
    g.add_argument("--warmup-updates", type=int)
    g.add_argument("--batch-size", type=int, help="sentences per batch (times --update-freq per update)")
    g.add_argument("--update-freq", type=int, help="batches accumulated per update")
    g.add_argument("--max-tokens", type=int, help="Transformer rows only: tokens per batch (default 4096, fairseq's "
                                                  "transformer_iwslt_de_en recipe; 0: none, use --batch-size)")
    g.add_argument("--patience", type=int, help="early stopping after N validations without a better validation "
                                                "loss (0: off)")
    g.add_argument("--beam", type=int, help="beam size of fairseq-generate (1: greedy, the authors' test decoding)")
    g.add_argument("--checkpoint", choices=("last", "best"), help="checkpoint to evaluate")
    g.add_argument("--decoder", choices=("authors", "fairseq"),
                   help="LSTM rows: 'authors' (default), the decoder of the authors' released code "
                        "(--decoder-output combined --embedding-init normal, and --gate-form copy-token "
                        "--gate-features output on lexical rows); 'fairseq': fairseq's LSTM decoder with eq. 6's gate")
    avg = g.add_mutually_exclusive_group()
    avg.add_argument("--sentence-avg", dest="sentence_avg", action="store_true", default=None,
                     help="loss summed per sentence, averaged over sentences (the authors' code)")
    avg.add_argument("--token-avg", dest="sentence_avg", action="store_false", help="loss averaged over tokens")
    g.add_argument("--adam-betas", help="e.g. '(0.9, 0.998)'")
    g.add_argument("--lexicon", help="use this lexicon file for the Simple rows (simple, soft, learned) instead of "
                                     "learning one")
    g.add_argument("--lexicon-top-k", type=int, help="keep at most K targets per lexicon row in the model (0: all)")
    g.add_argument("--train-args", default="", help="further fairseq-train options (one quoted string)")
    g = parser.add_argument_group("lla, lla_noadv (Thrush 2020; defaults: the paper's schedule, docs/lla.md)")
    g.add_argument("--lla-max-epoch", type=int, default=LlaSettings.max_epoch,
                   help=f"last training epoch (default {LlaSettings.max_epoch})")
    g.add_argument("--lla-lexicon-epochs", type=int, default=LlaSettings.lexicon_epochs,
                   help=f"epochs 1..N train the Lexicon Unit alone (default {LlaSettings.lexicon_epochs})")
    g.add_argument("--lla-batch-size", type=int, default=LlaSettings.batch_size,
                   help=f"batch size after the Lexicon Unit epochs (default {LlaSettings.batch_size})")
    g.add_argument("--lla-lexicon-batch-size", type=int, default=LlaSettings.lexicon_batch_size,
                   help=f"batch size of the Lexicon Unit epochs (default {LlaSettings.lexicon_batch_size})")
    g.add_argument("--lla-lr", type=float, default=LlaSettings.lr,
                   help=f"Adam's constant learning rate (default {LlaSettings.lr:g}; the Lexicon Unit gets 100 times it)")
    g.add_argument("--lla-checkpoint", choices=("best", "last"), default=LlaSettings.checkpoint,
                   help="best (default, Thrush's model selection): validate every epoch after the Lexicon Unit "
                        "epochs (Colors: on the training set) and evaluate the first epoch with the highest exact "
                        "match (English-Chinese: greedy BLEU), retrained to that epoch from the Lexicon Unit "
                        "checkpoint; last: the last epoch")
    g.add_argument("--damage", nargs="?", const="auto", metavar="CONDITIONS",
                   help="after scoring, run tools/damage.py on each lla model's evaluated checkpoint (Table 2): "
                        "without a value none,lstm,lexicon and adversary (where the model has one); else "
                        "comma-separated conditions (groups joined by '+'). Writes <model>/seed<N>/damage.json and "
                        "a mean +/- std table per condition")
    g.add_argument("--generate-args", default="", help="further fairseq-generate options (one quoted string)")
    g.add_argument("--decode-jobs", type=int, default=1, metavar="N",
                   help="split each fairseq-generate over N processes (its --distributed-world-size N "
                        "--distributed-rank i: the same batches, dealt out), each with cores/N threads unless "
                        "OMP_NUM_THREADS is set; the outputs are concatenated (default 1)")
    task.add_args(parser)
    return parser


def parse_models(text: str, task: Task) -> List[str]:
    names = []
    for item in [t.strip() for t in text.split(",") if t.strip()]:
        if item == "paper":
            names += task.paper_models
        elif item == "all":
            names += [m for m in MODELS if m not in LLA_MODELS and m not in TRANSFORMER_MODELS]
        elif item in MODELS:
            names.append(item)
        else:
            raise RecipeError(f"--models: unknown model {item!r} (choose from {', '.join(MODELS)}, paper, all)")
    if not names:
        raise RecipeError("--models: no model given")
    return list(dict.fromkeys(names))


def parse_seeds(args) -> List[int]:
    if args.seed_list:
        try:
            seeds = [int(s) for s in args.seed_list.split(",") if s.strip()]
        except ValueError:
            raise RecipeError(f"--seed-list {args.seed_list!r}: expected comma-separated integers") from None
    else:
        if args.seeds < 1:
            raise RecipeError(f"--seeds must be >= 1, got {args.seeds}")
        seeds = list(range(1, args.seeds + 1))
    if not seeds:
        raise RecipeError("no seed to run")
    return list(dict.fromkeys(seeds))


def lla_settings(args) -> LlaSettings:
    lla = LlaSettings(lr=args.lla_lr, batch_size=args.lla_batch_size, lexicon_batch_size=args.lla_lexicon_batch_size,
                      lexicon_epochs=args.lla_lexicon_epochs, max_epoch=args.lla_max_epoch,
                      checkpoint=args.lla_checkpoint)
    if min(lla.batch_size, lla.lexicon_batch_size, lla.lexicon_epochs) < 1:
        raise RecipeError("--lla-batch-size, --lla-lexicon-batch-size and --lla-lexicon-epochs must be >= 1")
    if lla.max_epoch <= lla.lexicon_epochs:
        raise RecipeError(f"--lla-max-epoch ({lla.max_epoch}) must exceed --lla-lexicon-epochs ({lla.lexicon_epochs})")
    return lla


def transformer_settings(args) -> TransformerSettings:
    """TransformerSettings (or the CPU-small ones) with the command line's explicit overrides."""
    ts = TRANSFORMER_CPU_SMALL if args.cpu_small else TRANSFORMER_PAPER
    overrides = {"max_update": args.max_update, "lr": args.lr, "warmup": args.warmup_updates,
                 "batch_size": args.batch_size, "update_freq": args.update_freq, "sentence_avg": args.sentence_avg,
                 "adam_betas": args.adam_betas}
    ts = replace(ts, **{k: v for k, v in overrides.items() if v is not None})
    if args.max_tokens is not None:
        ts = replace(ts, max_tokens=args.max_tokens or None)
    if ts.max_tokens is None and ts.batch_size is None:
        raise RecipeError("the Transformer rows need --max-tokens or --batch-size")
    return ts


def effective_hparams(task: Task, args) -> HParams:
    hp = task.hparams(args)
    overrides = {
        "max_update": args.max_update, "lr": args.lr, "warmup": args.warmup_updates, "batch_size": args.batch_size,
        "update_freq": args.update_freq, "beam": args.beam, "checkpoint": args.checkpoint,
        "sentence_avg": args.sentence_avg, "adam_betas": args.adam_betas, "decoder": args.decoder,
    }
    hp = replace(hp, **{k: v for k, v in overrides.items() if v is not None})
    if args.patience is not None:
        hp = replace(hp, patience=args.patience or None)
    if args.lexicon_top_k is not None:
        hp = replace(hp, lexicon_top_k=args.lexicon_top_k or None)
    for name in ("max_update", "batch_size", "update_freq", "beam"):
        if getattr(hp, name) < 1:
            raise RecipeError(f"--{name.replace('_', '-')} must be >= 1, got {getattr(hp, name)}")
    if hp.checkpoint == "best" and hp.validate_every is None:
        raise RecipeError(f"--checkpoint best needs a validation set; {task.name} has none")
    if args.decode_jobs < 1:
        raise RecipeError(f"--decode-jobs must be >= 1, got {args.decode_jobs}")
    return hp


# ----------------------------------------------------------------------------------------------------------------
# Running things
# ----------------------------------------------------------------------------------------------------------------

def tool(name: str) -> str:
    """A console script of this environment (fairseq-train, ...)."""
    return os.path.join(os.path.dirname(sys.executable), name)


def child_env() -> Dict[str, str]:
    env = dict(os.environ, PYTHONWARNINGS="ignore")
    return env


def show(cmd: Sequence[str]) -> str:
    return " ".join(shlex.quote(str(c)) for c in cmd)


PROGRESS_EVERY = 60.0  # seconds between progress lines of a training run (--progress-every)
# Runs without validation (Colors) would save their first checkpoint at the end: an interrupted one could not resume.
# Saving changes nothing in training; the fingerprint leaves these options out, so earlier runs stay reusable.
RESUME_SAVE_EVERY = 100
RESUME_SAVE = ("--disable-validation", "--save-interval", "100000", "--save-interval-updates", str(RESUME_SAVE_EVERY),
               "--keep-interval-updates", "1")


def _training_progress(log_path: str, offset: int, last: Dict[str, str]) -> int:
    """Read the training log from offset; keep the latest update count and validation loss in `last`."""
    with open(log_path, errors="replace") as f:
        f.seek(offset)
        for line in f:
            m = re.findall(r"num_updates[ =](\d+)", line)
            if m:
                last["updates"] = m[-1]
            m = re.search(r"valid on 'valid' subset \| loss ([0-9.]+)", line)
            if m:
                last["valid_loss"] = m.group(1)
        return f.tell()


def validation_metric(log_path: str, metric: str = "exact_match") -> Dict[int, float]:
    """epoch -> a validation metric from a fairseq-train log (exact_match: the criterion logs it in validation;
    bleu: fairseq's --eval-bleu)."""
    curve = {}
    with open(log_path, errors="replace") as f:
        for line in f:
            m = re.search(r"\| valid \| epoch (\d+) \|.*\| " + re.escape(metric) + r" ([\d.]+)", line)
            if m:
                curve[int(m.group(1))] = float(m.group(2))
    return curve


def run_logged(cmd: Sequence[str], stdout_path: str, stderr_path: Optional[str] = None, what: str = "",
               append: bool = False, progress: Optional[str] = None) -> float:
    """Run cmd with stdout (and stderr) to files; on failure show the log's tail and stop. Returns seconds.
    With `progress` (a prefix), print the training log's update count and validation loss now and then."""
    start = time.time()
    with open(stdout_path, "a" if append else "w") as out:
        err = open(stderr_path, "w") if stderr_path else subprocess.STDOUT
        try:
            proc = subprocess.Popen([str(c) for c in cmd], stdout=out, stderr=err, env=child_env())
            offset, last, shown, next_report = 0, {}, None, time.time() + PROGRESS_EVERY
            while proc.poll() is None:
                try:
                    proc.wait(timeout=min(2.0, PROGRESS_EVERY))
                except subprocess.TimeoutExpired:
                    pass
                if progress and time.time() >= next_report:
                    next_report = time.time() + PROGRESS_EVERY
                    offset = _training_progress(stdout_path, offset, last)
                    if last.get("updates") and last.get("updates") != shown:
                        shown = last["updates"]
                        valid = f", validation loss {last['valid_loss']}" if "valid_loss" in last else ""
                        say(f"{progress}update {shown}{valid} ({hms(time.time() - start)})")
        except BaseException:
            if proc.poll() is None:  # interrupted: stop the child we started
                proc.terminate()
                proc.wait()
            raise
        finally:
            if stderr_path:
                err.close()
    if proc.returncode != 0:
        stop_on_failure(cmd, proc.returncode, stderr_path or stdout_path, what or os.path.basename(str(cmd[0])))
    return time.time() - start


def stop_on_failure(cmd: Sequence[str], returncode: int, log: str, what: str):
    """Show the tail of a failed child's log and stop with an error naming it, the log and the command."""
    with open(log, errors="replace") as f:
        sys.stderr.write("".join(f.readlines()[-25:]))
    raise RecipeError(f"{what} failed (exit {returncode}); log: {log}\ncommand: {show(cmd)}")


def run_sharded(cmd: Sequence[str], jobs: int, stdout_path: str, stderr_path: str, what: str = "") -> float:
    """fairseq-generate as `jobs` processes at once: fairseq deals its batches out to the ranks of
    --distributed-world-size, so every sentence is decoded in the batch it has in a single process. The shards'
    outputs are concatenated in rank order (scoring reads hypotheses by sample id). Returns seconds."""
    if jobs <= 1:
        return run_logged(cmd, stdout_path, stderr_path, what=what)
    start = time.time()
    env = child_env()
    if "OMP_NUM_THREADS" not in env:  # jobs processes with a thread per core each would oversubscribe the cores
        env["OMP_NUM_THREADS"] = str(max(1, (os.cpu_count() or 1) // jobs))
    shards = [(f"{stdout_path}.shard{i}", f"{stderr_path}.shard{i}") for i in range(jobs)]
    shard_cmds = [[*map(str, cmd), "--distributed-world-size", str(jobs), "--distributed-rank", str(i)]
                  for i in range(jobs)]
    procs, stopped = [], set()
    try:
        for (out_path, err_path), shard_cmd in zip(shards, shard_cmds):
            with open(out_path, "w") as out, open(err_path, "w") as err:
                procs.append(subprocess.Popen(shard_cmd, stdout=out, stderr=err, env=env))
        while True:
            codes = [p.poll() for p in procs]  # poll every shard: a failed one stops the rest at once
            if all(c is not None for c in codes) or any(c not in (None, 0) for c in codes):
                break
            time.sleep(1.0)
    finally:
        for i, p in enumerate(procs):  # interrupted, or a shard failed: stop the others
            if p.poll() is None:
                p.terminate()
                p.wait()
                stopped.add(i)
    for i, p in enumerate(procs):
        if p.returncode != 0 and i not in stopped:
            stop_on_failure(shard_cmds[i], p.returncode, shards[i][1],
                            f"{what or os.path.basename(str(cmd[0]))}, shard {i} of {jobs},")
    with open(stdout_path, "w") as out, open(stderr_path, "w") as err:
        for i, (out_path, err_path) in enumerate(shards):
            with open(out_path) as f:
                shutil.copyfileobj(f, out)
            err.write(f"== shard {i} of {jobs} (--distributed-rank {i}) ==\n")
            with open(err_path, errors="replace") as f:
                shutil.copyfileobj(f, err)
            os.remove(out_path)
            os.remove(err_path)
    return time.time() - start


def sha1_files(paths: Sequence[str]) -> str:
    h = hashlib.sha1()
    for p in paths:
        with open(p, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
        h.update(b"\0")
    return h.hexdigest()


def write_json(path: str, data) -> None:
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(data, f, indent=2, ensure_ascii=False)
        f.write("\n")
    os.replace(tmp, path)


def read_json(path: str):
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def count_entries(path: str) -> int:
    with open(path, encoding="utf-8", errors="replace") as f:
        return sum(1 for line in f if line.strip() and not line.startswith("#"))


def hms(seconds: float) -> str:
    seconds = int(round(seconds))
    return f"{seconds} s" if seconds < 120 else f"{seconds // 60} min {seconds % 60:02d} s"


class Recipe:
    def __init__(self, task: Task, args):
        self.task, self.args = task, args
        self.work = os.path.abspath(args.work or task.default_work(args))
        self.data_dir = self.work + "/data"
        self.bin = self.work + "/bin"
        self.lexdir = self.work + "/lexicons"
        self.hp = effective_hparams(task, args)
        self.lla = lla_settings(args)
        self.models = parse_models(args.models, task)
        self.transformer_models = [m for m in self.models if MODELS[m].transformer]
        self.ts = transformer_settings(args)
        self.bin_joined = self.work + "/bin_joined"  # --joined-dictionary, for pgn
        self.damage = args.damage
        self.lla_models = [m for m in self.models if MODELS[m].lla]
        if self.damage is not None and not any(MODELS[m].lla for m in self.models):
            raise RecipeError("--damage applies to the lla models (lla, lla_noadv); none is in --models")
        self.seeds = parse_seeds(args)
        self.settings = "cpu-small" if args.cpu_small else "paper"
        self.settings_label = ("CPU-SMALL settings (not the paper's: smaller model / shorter training)"
                               if args.cpu_small else "the paper's settings (appendix C.1)")
        if args.lexicon and not os.path.isfile(args.lexicon):
            raise RecipeError(f"--lexicon {args.lexicon}: file not found")
        if not os.path.isdir(args.data):
            raise RecipeError(f"--data {args.data}: not a directory")
        self.files = task.locate(os.path.abspath(args.data))
        self.data_sha1 = ""

    # -- preparation --------------------------------------------------------------------------------------------
    def prepare(self) -> Prepared:
        prep = self.task.prepare(self.args, self.files)
        os.makedirs(self.data_dir, exist_ok=True)
        write_parallel(self.data_dir + "/train", prep.train)
        write_parallel(self.data_dir + "/test", prep.test)
        write_parallel(self.data_dir + "/valid", prep.valid if prep.valid is not None else prep.train)
        write_parallel(self.data_dir + "/lexcorpus", prep.lexcorpus)
        parts = [f"{self.data_dir}/{s}.{l}" for s in ("train", "valid", "test", "lexcorpus") for l in ("src", "tgt")]
        self.data_sha1 = sha1_files(parts)
        say(f"== data: {len(prep.train)} train, "
            + (f"{len(prep.valid)} validation, " if prep.valid is not None else "")
            + f"{len(prep.test)} test pairs from {', '.join(sorted(set(self.files.values())))}")
        for note in prep.notes:
            say(f"   {note}")
        self.preprocess(self.bin, self.preprocess_command(self.bin), "preprocess.log")
        if any(m in JOINED_DICT_MODELS for m in self.models):
            self.preprocess(self.bin_joined, self.preprocess_command(self.bin_joined), "preprocess_joined.log")
        return prep

    def preprocess_command(self, destdir: str) -> List[str]:
        cmd = [tool("fairseq-preprocess"), "--source-lang", "src", "--target-lang", "tgt",
               "--trainpref", self.data_dir + "/train", "--validpref", self.data_dir + "/valid",
               "--testpref", self.data_dir + "/test", "--destdir", destdir, "--workers", "1"]
        return cmd + (["--joined-dictionary"] if destdir == self.bin_joined else [])

    def preprocess(self, destdir: str, cmd: List[str], log: str) -> None:
        stamp_path = destdir + "/prepared.json"
        stamp = {"data_sha1": self.data_sha1, "command": show(cmd)}
        if os.path.isfile(stamp_path) and read_json(stamp_path) == stamp:
            say(f"== fairseq-preprocess: up to date ({destdir})")
        else:
            if os.path.isdir(destdir):
                shutil.rmtree(destdir)
            secs = run_logged(cmd, self.work + "/" + log, what="fairseq-preprocess")
            write_json(stamp_path, stamp)
            say(f"== fairseq-preprocess: {destdir} ({hms(secs)})")

    def bin_for(self, model: str) -> str:
        """The data-bin of a model: WORK/bin_joined (--joined-dictionary) for pgn, else WORK/bin."""
        return self.bin_joined if model in JOINED_DICT_MODELS else self.bin

    # -- lexicons -----------------------------------------------------------------------------------------------
    def lexicon_path(self, method: str) -> str:
        if method == "simple" and self.args.lexicon:
            return os.path.abspath(self.args.lexicon)
        return f"{self.lexdir}/{method}.tsv"

    def lexicon_command(self, method: str) -> List[str]:
        opts, _ = LEXICON_METHODS[method]
        return [sys.executable, os.path.join(ROOT, "tools", "build_lexicon.py"), *opts, *self.task.lexicon_build_args,
                "--src", self.data_dir + "/lexcorpus.src", "--tgt", self.data_dir + "/lexcorpus.tgt",
                "-o", f"{self.lexdir}/{method}.tsv", "--no-progress"]

    def build_lexicons(self) -> None:
        methods = [MODELS[m].lexicon for m in self.models if MODELS[m].lexicon in LEXICON_METHODS]
        os.makedirs(self.lexdir, exist_ok=True)
        stamp_path = self.lexdir + "/built.json"
        stamps = read_json(stamp_path) if os.path.isfile(stamp_path) else {}
        for method in dict.fromkeys(methods):
            path = self.lexicon_path(method)
            desc = LEXICON_METHODS[method][1]
            if method == "simple" and self.args.lexicon:
                say(f"== lexicon (given with --lexicon): {count_entries(path)} entries in {path}")
                continue
            cmd = self.lexicon_command(method)
            key = {"data_sha1": self.data_sha1, "command": show(cmd[1:])}
            if os.path.isfile(path) and stamps.get(method) == key and not self.args.force:
                say(f"== lexicon ({desc}): {count_entries(path)} entries in {path} (up to date)")
                continue
            secs = run_logged(cmd, f"{self.lexdir}/{method}.log", what=f"build_lexicon.py --method {method}")
            stamps[method] = key
            write_json(stamp_path, stamps)
            say(f"== lexicon ({desc}): {count_entries(path)} entries in {path} ({hms(secs)})")

    # -- one (model, seed) ---------------------------------------------------------------------------------------
    def arch(self, spec: ModelSpec) -> str:
        if self.args.cpu_small:
            return spec.small_arch or spec.arch + "_small"
        return spec.arch

    def label(self, model: str) -> str:
        spec = MODELS[model]
        return f"{spec.label} (--arch {self.arch(spec)})"

    def model_args(self, model: str) -> List[str]:
        spec = MODELS[model]
        out = ["--arch", self.arch(spec)]
        if spec.lexicon in LEXICON_METHODS:
            out += ["--lexicon", self.lexicon_path(spec.lexicon)]
            if self.hp.lexicon_top_k and "--lexicon-temperature" not in spec.extra:
                out += ["--lexicon-top-k", str(self.hp.lexicon_top_k)]
        elif spec.lexicon is not None:
            out += ["--lexicon", spec.lexicon]
        out += list(spec.small_extra if self.args.cpu_small and spec.transformer else spec.extra)
        if spec.transformer:  # no extra p_write dropout: the R-Dangle paper's models have none
            pass
        elif spec.lla:
            out += ["--lexicon-unit-epochs", str(self.lla.lexicon_epochs)]
        elif self.hp.write_dropout and (self.hp.write_dropout_models == "all" or spec.lexical):
            out += ["--write-dropout", str(self.hp.write_dropout)]
        if self.hp.decoder == "authors" and not (spec.transformer or spec.lla):
            out += list(AUTHORS_DECODER) + (list(AUTHORS_GATE) if spec.lexical else [])
        return out

    def lla_train_commands(self, model: str, seed: int, out: str) -> Tuple[List[str], List[str]]:
        """Thrush's schedule as two fairseq-train calls (docs/lla.md): the Lexicon Unit alone with its own batch
        size for epochs 1..N, then (resuming checkpoint_last.pt) the other modules to the last epoch. Without a
        validation set a checkpoint is written only at the end of each call (--save-interval = its last epoch;
        fairseq does not save when --max-epoch ends training); with one, every epoch is validated and saved."""
        hp, lla = self.hp, self.lla
        base = [tool("fairseq-train"), self.bin, "--user-dir", os.path.join(ROOT, "fairseq_lexical"),
                *self.model_args(model), "--criterion", "lexical_cross_entropy", "--optimizer", "adam",
                "--lr", f"{lla.lr:g}", "--lr-scheduler", "fixed", "--clip-norm", "0",
                "--required-batch-size-multiple", "1", "--seed", str(seed), "--save-dir", out,
                "--no-epoch-checkpoints", "--log-format", "simple", "--log-interval", str(hp.log_interval),
                "--num-workers", "0"]
        phases = []
        for batch, last in ((lla.lexicon_batch_size, lla.lexicon_epochs), (lla.batch_size, lla.max_epoch)):
            cmd = base + ["--batch-size", str(batch), "--max-epoch", str(last)]
            lexicon_phase = last == lla.lexicon_epochs
            if lla.checkpoint == "best" and lexicon_phase:
                # the Lexicon Unit with the lowest validation BCE is kept (checkpoint_best.pt; select_lexicon_unit)
                cmd += ["--validate-interval", "1", "--save-interval", "1", "--best-checkpoint-metric",
                        LEXICON_UNIT_METRIC]
            elif lla.checkpoint == "best":
                # every epoch validated (the criterion's greedy exact match); the one to keep is picked afterwards
                # from the log (select_lla_epoch), so only the last epoch is saved here
                metric, options = self.task.lla_selection
                cmd += ["--validate-interval", "1", "--save-interval", str(last), "--best-checkpoint-metric",
                        metric, "--maximize-best-checkpoint-metric", *options]
            elif hp.validate_every is None or lexicon_phase:
                cmd += ["--disable-validation", "--save-interval", str(last)]
            else:
                cmd += ["--validate-interval", "1", "--save-interval", "1"]
            if self.args.patience and hp.validate_every is not None and not lexicon_phase:
                cmd += ["--patience", str(self.args.patience)]  # the paper: no early stopping
            phases.append(cmd + shlex.split(self.args.train_args))
        return phases[0], phases[1]

    def select_lexicon_unit(self, out: str) -> dict:
        """Thrush's Lexicon Unit: the one with the lowest validation BCE over the Lexicon Unit epochs (fairseq's
        checkpoint_best.pt of the first call; among equal logged values, fairseq keeps the later epoch). Its
        parameters replace those in checkpoint_last.pt, which the second call resumes (the other modules are
        untrained then, and the epoch count stays the paper's: the second call starts at epoch N + 1)."""
        import torch

        metric, last_epoch = LEXICON_UNIT_METRIC, self.lla.lexicon_epochs
        best_path, last_path = f"{out}/checkpoint_best.pt", f"{out}/checkpoint_last.pt"
        if os.path.isfile(f"{out}/lexicon_unit_selection.json") and not os.path.isfile(best_path):
            return read_json(f"{out}/lexicon_unit_selection.json")  # done before an interruption
        curve = {e: v for e, v in validation_metric(f"{out}/train.log", metric).items() if e <= last_epoch}
        if not curve:
            raise RecipeError(f"{out}/train.log has no validation {metric} lines (Lexicon Unit selection)")
        best = torch.load(best_path, map_location="cpu", weights_only=False)
        epoch = best["extra_state"]["train_iterator"]["epoch"] - 1  # saved at an epoch's end: the next one
        if curve.get(epoch) != min(curve.values()):
            raise RecipeError(f"{best_path} is epoch {epoch}, whose validation {metric} is not the lowest logged "
                              f"({min(curve.values())}; see {out}/train.log)")
        state = torch.load(last_path, map_location="cpu", weights_only=False)
        unit = {k: v for k, v in best["model"].items() if k.startswith(LEXICON_UNIT_PREFIX)}
        if not unit or set(unit) != {k for k in state["model"] if k.startswith(LEXICON_UNIT_PREFIX)}:
            raise RecipeError(f"{best_path} and {last_path} do not hold the same {LEXICON_UNIT_PREFIX}* parameters")
        state["model"].update(unit)
        # the second call selects on another metric: the Lexicon Unit's best BCE must not seed its comparison
        state["extra_state"].pop("best", None)
        torch.save(state, last_path + ".tmp")
        os.replace(last_path + ".tmp", last_path)
        os.remove(best_path)
        selection = {"metric": metric, "epoch": epoch, metric: curve[epoch], "last_epoch": last_epoch,
                     "curve": curve}
        write_json(f"{out}/lexicon_unit_selection.json", selection)
        return selection

    def select_lla_epoch(self, model: str, seed: int, out: str, command: List[str], index: str) -> dict:
        """Thrush's model selection: the first epoch with the best validation score (Task.lla_selection; the log
        of the second call), then the second call again from the Lexicon Unit checkpoint, stopped at that epoch
        (fairseq seeds every update, so it retraces the same epochs: checked against the logged score)."""
        metric = self.task.lla_selection[0]
        curve = {e: v for e, v in validation_metric(f"{out}/train.log", metric).items()
                 if e > self.lla.lexicon_epochs}  # (the Lexicon Unit epochs are validated too)
        if not curve:
            raise RecipeError(f"{out}/train.log has no validation {metric} lines (lla checkpoint selection)")
        best = max(curve.values())
        epoch = min(e for e, v in curve.items() if v == best)
        selection = {"metric": metric, "epoch": epoch, metric: best, "last_epoch": max(curve), "curve": curve}
        if epoch < max(curve):
            say(f"{index}    {model} seed {seed}: best validation {metric} {best:g} first at epoch {epoch}; "
                f"retraining to it from the Lexicon Unit checkpoint")
            cmd = list(command)
            cmd[cmd.index("--max-epoch") + 1] = str(epoch)
            cmd[cmd.index("--save-interval") + 1] = str(epoch)
            cmd += ["--restore-file", f"{out}/checkpoint_lexicon_unit.pt"]
            os.remove(f"{out}/checkpoint_last.pt")
            run_logged(cmd, f"{out}/train_selected.log", what=f"fairseq-train to epoch {epoch} ({model}, seed {seed})")
            again = validation_metric(f"{out}/train_selected.log", metric).get(epoch)
            if again != best:
                raise RecipeError(f"retraining {model} seed {seed} to epoch {epoch} gave validation {metric} "
                                  f"{again}, not the {best} of the first run (see {out}/train_selected.log)")
        if os.path.isfile(f"{out}/lexicon_unit_selection.json"):
            selection["lexicon_unit"] = read_json(f"{out}/lexicon_unit_selection.json")
        write_json(f"{out}/selection.json", selection)
        return selection

    def transformer_train_command(self, model: str, seed: int, out: str) -> List[str]:
        """fairseq's transformer_iwslt_de_en recipe (TransformerSettings); validation, patience and the evaluated
        checkpoint as the task's LSTM rows."""
        hp, ts = self.hp, self.ts
        cmd = [tool("fairseq-train"), self.bin_for(model), "--user-dir", os.path.join(ROOT, "fairseq_lexical"),
               *self.model_args(model), "--criterion", "lexical_cross_entropy",
               "--label-smoothing", f"{ts.label_smoothing:g}"]
        if ts.sentence_avg:
            cmd.append("--sentence-avg")
        cmd += ["--optimizer", "adam", "--adam-betas", ts.adam_betas, "--weight-decay", f"{ts.weight_decay:g}",
                "--lr", f"{ts.lr:.6g}", "--lr-scheduler", "inverse_sqrt", "--warmup-updates", str(ts.warmup),
                "--clip-norm", f"{ts.clip_norm:g}"]
        if ts.max_tokens:
            cmd += ["--max-tokens", str(ts.max_tokens)]
        if ts.batch_size:
            cmd += ["--batch-size", str(ts.batch_size)]
        cmd += ["--update-freq", str(ts.update_freq), "--required-batch-size-multiple", "1",
                "--max-update", str(ts.max_update), "--seed", str(seed), "--save-dir", out,
                "--no-epoch-checkpoints", "--log-format", "simple", "--log-interval", str(hp.log_interval),
                "--num-workers", "0"]
        cmd += self.validation_args(model)
        return cmd + shlex.split(self.args.train_args)

    def validation_args(self, model: str) -> List[str]:
        hp = self.hp
        if hp.validate_every is None:
            return list(RESUME_SAVE)
        cmd = ["--validate-interval", "100000", "--validate-interval-updates", str(hp.validate_every),
               "--save-interval", "100000", "--save-interval-updates", str(hp.validate_every),
               "--keep-interval-updates", "1"]
        patience = self.task.patience_for(model, hp)
        if patience:
            cmd += ["--patience", str(patience)]
        return cmd

    def train_command(self, model: str, seed: int, out: str) -> List[str]:
        if MODELS[model].transformer:
            return self.transformer_train_command(model, seed, out)
        hp = self.hp
        cmd = [tool("fairseq-train"), self.bin, "--user-dir", os.path.join(ROOT, "fairseq_lexical"),
               *self.model_args(model), "--criterion", "lexical_cross_entropy"]
        if hp.sentence_avg:
            cmd.append("--sentence-avg")
        cmd += ["--optimizer", "adam"]
        if hp.adam_betas:
            cmd += ["--adam-betas", hp.adam_betas]
        cmd += ["--lr", f"{hp.lr:.6g}", "--lr-scheduler", "inverse_sqrt", "--warmup-updates", str(hp.warmup),
                "--clip-norm", str(hp.clip_norm), "--batch-size", str(hp.batch_size),
                "--update-freq", str(hp.update_freq), "--required-batch-size-multiple", "1",
                "--max-update", str(hp.max_update), "--seed", str(seed), "--save-dir", out,
                "--no-epoch-checkpoints", "--log-format", "simple", "--log-interval", str(hp.log_interval),
                "--num-workers", "0"]
        if hp.validate_every is None:
            cmd += list(RESUME_SAVE)
        else:
            cmd += ["--validate-interval", "100000", "--validate-interval-updates", str(hp.validate_every),
                    "--save-interval", "100000", "--save-interval-updates", str(hp.validate_every),
                    "--keep-interval-updates", "1"]
            patience = self.task.patience_for(model, hp)
            if patience:
                cmd += ["--patience", str(patience)]
        return cmd + shlex.split(self.args.train_args)

    def checkpoint_path(self, out: str) -> str:
        return f"{out}/checkpoint_{self.hp.checkpoint}.pt"

    def generate_command(self, out: str, model: Optional[str] = None) -> List[str]:
        hp = self.hp
        return [tool("fairseq-generate"), self.bin_for(model) if model else self.bin,
                "--user-dir", os.path.join(ROOT, "fairseq_lexical"),
                "--path", self.checkpoint_path(out), "--gen-subset", "test", "--beam", str(hp.beam),
                "--batch-size", str(hp.gen_batch_size), "--max-len-a", "0", "--max-len-b", str(hp.max_len_b),
                "--num-workers", "0", *shlex.split(self.args.generate_args)]

    def score_command(self, out: str, prep_score_args: Sequence[str]) -> List[str]:
        args = [a.replace("TRAIN_SRC", self.data_dir + "/train.src").replace("TEST_SRC", self.data_dir + "/test.src")
                for a in prep_score_args]
        return [sys.executable, os.path.join(ROOT, "tools", "score.py"), f"{out}/generate.txt",
                "--reference", self.data_dir + "/test.tgt", *args, "--json"]

    def fingerprint(self, model: str, seed: int, commands: Dict[str, List[str]]) -> Dict[str, object]:
        """What a finished run must agree on to be reused: the commands (work directory abstracted), the data and
        the lexicon's content."""
        def norm(cmd):
            return (show(cmd).replace(self.work, "$WORK").replace(sys.executable, "python").replace(ROOT, "$REPO")
                    .replace(show(RESUME_SAVE), show(RESUME_SAVE[:3])))  # saving more often changes no result
        spec = MODELS[model]
        lex_sha1 = None
        if spec.lexicon in LEXICON_METHODS and os.path.isfile(self.lexicon_path(spec.lexicon)):
            lex_sha1 = sha1_files([self.lexicon_path(spec.lexicon)])
        return {"data_sha1": self.data_sha1, "lexicon_sha1": lex_sha1,
                **{k: norm(v) for k, v in commands.items()}}

    def commands(self, model: str, seed: int, out: str, prep: Prepared) -> Dict[str, List[str]]:
        if MODELS[model].lla:  # two training calls; Thrush's precision, recall and token accuracy as well
            lexicon, rest = self.lla_train_commands(model, seed, out)
            return {"train_lexicon": lexicon, "train": rest, "generate": self.generate_command(out),
                    "score": self.score_command(out, [*prep.score_args, "--thrush"])}
        return {"train": self.train_command(model, seed, out), "generate": self.generate_command(out, model),
                "score": self.score_command(out, prep.score_args)}

    # -- damage (Thrush 2020, Table 2) ---------------------------------------------------------------------------
    def damage_conditions(self, model: str) -> List[str]:
        spec = MODELS[model]
        conds = [c.strip() for c in self.damage.split(",") if c.strip()] if self.damage != "auto" else \
            ["none", "lstm", "lexicon", "adversary"]
        # the adversary group exists only in the model with an adversary
        return [c for c in conds if spec.adversary or "adversary" not in c.split("+")]

    def damage_command(self, model: str, seed: int, out: str) -> List[str]:
        hp = self.hp
        return [sys.executable, os.path.join(ROOT, "tools", "damage.py"), self.bin, "--path",
                self.checkpoint_path(out), "--damage", ",".join(self.damage_conditions(model)), "--seed", str(seed),
                "--gen-subset", "test", "--beam", str(hp.beam), "--max-len-a", "0", "--max-len-b", str(hp.max_len_b),
                "--batch-size", str(hp.gen_batch_size),
                *[a for e in self.damage_examples() for a in ("--example", e)], "--json"]

    def damage_examples(self) -> List[str]:
        """The task's Table 2 sentence(s) whose words are all in the source dictionary (damage.py refuses others)."""
        path = self.bin + "/dict.src.txt"
        if not os.path.isfile(path):
            return list(self.task.damage_examples)
        with open(path, encoding="utf-8") as f:
            vocab = {line.split()[0] for line in f if line.strip()}
        return [e for e in self.task.damage_examples if all(w in vocab for w in e.split())]

    def run_damage(self, model: str, seed: int, out: str, index: str) -> None:
        """tools/damage.py on the evaluated checkpoint: OUT/damage.json (its JSON, the command and the time)."""
        cmd = self.damage_command(model, seed, out)
        path = f"{out}/damage.json"
        if os.path.isfile(path) and not self.args.force and read_json(path).get("command") == show(cmd):
            return
        if not os.path.isfile(self.checkpoint_path(out)):
            say(f"{index} {model} seed {seed}: no {self.checkpoint_path(out)} to damage (removed by "
                f"--keep-checkpoints none?); skipped")
            return
        secs = run_logged(cmd, path + ".tmp", f"{out}/damage.log", what=f"damage.py ({model}, seed {seed})")
        result = read_json(path + ".tmp")
        os.remove(path + ".tmp")
        for r in result["results"]:
            r.get("damage", {}).pop("parameters", None)  # the per-parameter list stays in damage.log's run only
        write_json(path, {"command": show(cmd), "seconds": round(secs, 1), **result})
        say(f"{index} seed {seed}  {model}  damage: " + "; ".join(
            f"{r['condition']} exact {r['scores']['exact_match']:.2f} prec {100 * r['scores']['precision']:.1f}"
            for r in result["results"]) + f"  ({hms(secs)})")

    def stale(self, model: str, seed: int, prep: Prepared) -> Optional[str]:
        """Why the finished run of (model, seed) does not match the current settings, or None."""
        out = f"{self.work}/{model}/seed{seed}"
        if self.args.force or not os.path.isfile(f"{out}/score.json"):
            return None
        fp = self.fingerprint(model, seed, self.commands(model, seed, out, prep))
        config_path = f"{out}/config.json"
        old = (read_json(config_path).get("fingerprint") or {}) if os.path.isfile(config_path) else {}
        diff = [k.replace("_sha1", "") for k in fp if old.get(k) != fp[k]]
        return f"{out}: {', '.join(diff)} differ" if diff else None

    def check_finished_runs(self, prep: Prepared) -> None:
        problems = [p for seed in self.seeds for model in self.models if (p := self.stale(model, seed, prep))]
        if problems:
            raise RecipeError("finished runs with other settings (the train/generate/score commands, data or "
                              "lexicon differ):\n  " + "\n  ".join(problems)
                              + "\nuse --force to re-run them, or another --work")

    def run_one(self, model: str, seed: int, prep: Prepared, index: str) -> Optional[dict]:
        out = f"{self.work}/{model}/seed{seed}"
        commands = self.commands(model, seed, out, prep)
        if self.args.dry_run:
            say(f"{index} {model} seed {seed}:")
            for k, cmd in commands.items():
                say(f"   {k}: {show(cmd)}")
            if self.damage is not None and MODELS[model].lla:
                say(f"   damage: {show(self.damage_command(model, seed, out))}")
            return None
        fp = self.fingerprint(model, seed, commands)
        config_path, score_path = f"{out}/config.json", f"{out}/score.json"
        if os.path.isfile(score_path) and not self.args.force:
            why = self.stale(model, seed, prep)
            if why:
                raise RecipeError(f"finished run with other settings: {why}; use --force or another --work")
            score = read_json(score_path)
            say(f"{index} seed {seed}  {model}  {self.task.result_line(score)}  (done before: skipped)")
            if self.damage is not None and MODELS[model].lla:
                self.run_damage(model, seed, out, index)
            return score
        trained = None  # an earlier invocation's finished training, reused when only decoding/scoring is missing
        resuming = False
        if os.path.isdir(out):
            old = read_json(config_path).get("fingerprint") if os.path.isfile(config_path) else None
            same = old == fp and not self.args.force
            if same and os.path.isfile(f"{out}/train.done") and os.path.isfile(self.checkpoint_path(out)):
                trained = read_json(f"{out}/train.done")
                say(f"{index} {model} seed {seed}: training finished before, decoding {self.checkpoint_path(out)}")
            elif same and os.path.isfile(f"{out}/checkpoint_last.pt"):
                resuming = True
                say(f"{index} {model} seed {seed}: resuming training from {out}/checkpoint_last.pt")
            elif same:  # stopped before its first checkpoint: start again, keeping the attempt's logs (x.log.N)
                kept = []
                for name in sorted(os.listdir(out)):
                    path = os.path.join(out, name)
                    if re.fullmatch(r".+\.log\.\d+", name):
                        continue
                    if name.endswith(".log"):
                        n = 1
                        while os.path.exists(f"{path}.{n}"):
                            n += 1
                        os.replace(path, f"{path}.{n}")
                        kept.append(f"{name}.{n}")
                    elif os.path.isdir(path):
                        shutil.rmtree(path)
                    else:
                        os.remove(path)
                say(f"{index} {model} seed {seed}: no checkpoint of the unfinished run to resume; starting again "
                    f"(its logs kept: {', '.join(kept) or 'none'})")
            else:
                shutil.rmtree(out)
        os.makedirs(out, exist_ok=True)
        config = {
            "task": self.task.name, "model": model, "label": self.label(model), "seed": seed,
            "settings": self.settings, "settings_label": self.settings_label, "hparams": asdict(self.hp),
            **({"transformer": asdict(self.ts)} if MODELS[model].transformer else {}),
            "patience": self.task.patience_for(model, self.hp) if self.hp.validate_every else None,
            "lexicon": self.lexicon_path(MODELS[model].lexicon) if MODELS[model].lexicon in LEXICON_METHODS
            else MODELS[model].lexicon,
            "checkpoint": self.checkpoint_path(out), "fingerprint": fp,
            "commands": {k: show(v) for k, v in commands.items()},
        }
        write_json(config_path, config)
        start = time.time()
        if trained is None:
            t_train = 0.0
            if "train_lexicon" in commands:
                say(f"{index} {model} seed {seed}: training, {self.lla.describe()} ...")
                t_train = run_logged(commands["train_lexicon"], f"{out}/train.log", append=resuming,
                                     what=f"fairseq-train, Lexicon Unit epochs ({model}, seed {seed})",
                                     progress=f"{index}    {model} seed {seed}: ")
                resuming = True  # the second call appends to the log and resumes checkpoint_last.pt
                if not os.path.isfile(f"{out}/checkpoint_lexicon_unit.pt"):  # (a resumed run copied it already)
                    if self.lla.checkpoint == "best":
                        unit = self.select_lexicon_unit(out)
                        say(f"{index}    {model} seed {seed}: Lexicon Unit of epoch {unit['epoch']} (lowest "
                            f"validation BCE, {unit[LEXICON_UNIT_METRIC]:g})")
                    shutil.copyfile(f"{out}/checkpoint_last.pt", f"{out}/checkpoint_lexicon_unit.pt")
            else:
                say(f"{index} {model} seed {seed}: training ({self.hp.max_update} updates max) ...")
            t_train += run_logged(commands["train"], f"{out}/train.log", what=f"fairseq-train ({model}, seed {seed})",
                                  append=resuming, progress=f"{index}    {model} seed {seed}: ")
            selection = None
            if "train_lexicon" in commands and self.lla.checkpoint == "best":
                t0 = time.time()
                selection = self.select_lla_epoch(model, seed, out, commands["train"], index)
                t_train += time.time() - t0
            stopped = self.training_summary(f"{out}/train.log")
            if selection:
                # the update count above is the first run's (to the last epoch); the evaluated model is the
                # retraining's, which stopped earlier
                where = f"epoch {selection['epoch']}"
                if selection["epoch"] < selection["last_epoch"]:
                    stopped["selected_updates"] = self.training_summary(f"{out}/train_selected.log")["updates"]
                    where += f" (update {stopped['selected_updates']})"
                stopped["text"] += f"; {where} of {selection['last_epoch']} evaluated"
                stopped["selected_epoch"] = selection["epoch"]
            if not os.path.isfile(self.checkpoint_path(out)):
                raise RecipeError(f"{self.checkpoint_path(out)} was not written (see {out}/train.log)")
            write_json(f"{out}/train.done", {"train_s": round(t_train, 1), "training": stopped})
        else:
            t_train, stopped = trained["train_s"], trained["training"]
        t_gen = run_sharded(commands["generate"], self.args.decode_jobs, f"{out}/generate.txt",
                            f"{out}/generate.log", what=f"fairseq-generate ({model}, seed {seed})")
        t_score = run_logged(commands["score"], score_path + ".tmp", f"{out}/score.log",
                             what=f"score.py ({model}, seed {seed})")
        os.replace(score_path + ".tmp", score_path)
        score = read_json(score_path)
        total = time.time() - start + (t_train if trained is not None else 0.0)
        write_json(f"{out}/run.json", {
            "train_s": round(t_train, 1), "generate_s": round(t_gen, 1), "score_s": round(t_score, 1),
            "total_s": round(total, 1), "training": stopped, "finished": datetime.datetime.now().isoformat(),
            "host": platform.node(), "settings": self.settings})
        if self.damage is not None and MODELS[model].lla:  # after run.json: a failure here keeps the run finished
            t0 = time.time()
            self.run_damage(model, seed, out, index)
            run = read_json(f"{out}/run.json")
            write_json(f"{out}/run.json", {**run, "damage_s": round(time.time() - t0, 1)})
        self.clean_checkpoints(out)
        say(f"{index} seed {seed}  {model}  {self.task.result_line(score)}  "
            f"(train {hms(t_train)}{', ' + stopped['text'] if stopped['text'] else ''}; "
            f"decode {hms(t_gen)}; total {hms(total)})")
        return score

    @staticmethod
    def training_summary(log_path: str) -> Dict[str, object]:
        updates, early, device = None, False, "cpu"
        with open(log_path, errors="replace") as f:
            for line in f:
                m = re.findall(r"num_updates[ =](\d+)", line)
                if m:
                    updates = int(m[-1])
                if "early stop" in line:
                    early = True
                m = re.search(r"capabilities = .*name = (.+)$", line)
                if m:
                    device = m.group(1).strip()
        text = f"{updates} updates" if updates is not None else ""
        if early:
            text += " (early stop on validation loss)"
        return {"updates": updates, "early_stop": early, "device": device, "text": text}

    def clean_checkpoints(self, out: str) -> None:
        keep = self.args.keep_checkpoints
        if keep == "all":
            return
        used = os.path.basename(self.checkpoint_path(out))
        for name in os.listdir(out):
            if name.endswith(".pt") and (keep == "none" or name != used):
                os.remove(os.path.join(out, name))

    # -- everything -----------------------------------------------------------------------------------------------
    def config(self) -> Dict[str, object]:
        args = self.args
        return {
            "task": self.task.name, "split": getattr(args, "split", None), "settings": self.settings,
            "settings_label": self.settings_label, "hparams": asdict(self.hp),
            "models": {m: self.label(m) for m in self.models}, "seeds": self.seeds,
            "lla": ({**asdict(self.lla), "paper_schedule": self.lla.is_paper(), "damage": self.damage}
                    if self.lla_models else None),
            "transformer": asdict(self.ts) if self.transformer_models else None,
            "data": self.files, "work": self.work, "command": " ".join(shlex.quote(a) for a in sys.argv),
            "date": datetime.datetime.now().isoformat(), "host": platform.node(),
            "python": sys.version.split()[0],
        }

    def run(self) -> int:
        t0 = time.time()
        hp = self.hp
        say(f"== {self.task.name}{' ' + self.args.split if self.task.name == 'scan' else ''}: work directory "
            f"{self.work}")
        say(f"== settings: {self.settings_label}")
        # the Akyurek & Andreas line only where such rows run: the Transformer and LLA rows have settings of their own
        lstm_models = [m for m in self.models if m not in self.transformer_models and m not in self.lla_models]
        evaluation = ((f"validation every {hp.validate_every} updates, " if hp.validate_every else "no validation, ")
                      + f"checkpoint_{hp.checkpoint}.pt, beam {hp.beam}")
        if lstm_models:
            say(f"== {', '.join(lstm_models)}: {hp.hidden}-unit 2-layer LSTM, batch {hp.batch_size} x "
                f"{hp.update_freq}, lr {hp.lr:.3g} (inverse sqrt, {hp.warmup} warm-up), clip {hp.clip_norm}, "
                f"{hp.max_update} updates, {evaluation}; "
                + ("the authors' released decoder" if hp.decoder == "authors" else
                   "fairseq's LSTM decoder, eq. 6 gate"))
        if self.transformer_models:
            ts = self.ts
            batch = " + ".join(x for x in (f"--max-tokens {ts.max_tokens}" if ts.max_tokens else "",
                                           f"--batch-size {ts.batch_size}" if ts.batch_size else "") if x)
            tag = (" [CPU-SMALL: _tiny archs, not the paper's sizes]" if self.args.cpu_small else
                   " [sizes: transformer_iwslt_de_en as the R-Dangle paper; optimiser: fairseq's iwslt recipe, "
                   "max_update our choice (the paper gives none)]")
            say(f"== {', '.join(self.transformer_models)}: Adam {ts.adam_betas}, lr {ts.lr:g} (inverse sqrt, "
                f"{ts.warmup} warm-up), weight decay {ts.weight_decay:g}, label smoothing {ts.label_smoothing:g}, "
                f"clip {ts.clip_norm:g}, {batch} x {ts.update_freq}, {ts.max_update} updates, {evaluation}{tag}")
        if self.lla_models:
            say(f"== {', '.join(self.lla_models)} (Thrush 2020, --arch {self.arch(MODELS['lla'])}): "
                f"{self.lla.describe()} (as checkpoint_last.pt); beam {hp.beam}; "
                f"scored with exact match and Thrush's precision/recall/token accuracy"
                + ("; --damage " + self.damage if self.damage is not None else ""))
        say(f"== models: {', '.join(self.models)}; seeds: {', '.join(map(str, self.seeds))}")
        if self.args.dry_run:
            say("== dry run: data files found (" + ", ".join(f"{k}: {v}" for k, v in self.files.items())
                + "); the commands would be:")
            say(f"   fairseq-preprocess: {show(self.preprocess_command(self.bin))}")
            if any(m in JOINED_DICT_MODELS for m in self.models):
                say(f"   fairseq-preprocess (joined dictionary, for {', '.join(JOINED_DICT_MODELS)}): "
                    f"{show(self.preprocess_command(self.bin_joined))}")
            say(f"   lexicons: " + "; ".join(show(self.lexicon_command(m)) for m in dict.fromkeys(
                MODELS[x].lexicon for x in self.models if MODELS[x].lexicon in LEXICON_METHODS)))
            prep_args = self.task.prepare(self.args, self.files).score_args
            total = len(self.seeds) * len(self.models)
            k = 0
            for seed in self.seeds:
                for model in self.models:
                    k += 1
                    self.run_one(model, seed, Prepared([], None, [], [], {}, score_args=prep_args), f"[{k}/{total}]")
            return 0
        os.makedirs(self.work, exist_ok=True)
        write_json(self.work + "/config.json", self.config())
        prep = self.prepare()
        self.build_lexicons()
        self.check_finished_runs(prep)
        total = len(self.seeds) * len(self.models)
        k = 0
        for seed in self.seeds:
            for model in self.models:
                k += 1
                self.run_one(model, seed, prep, f"[{k}/{total}]")
        self.report(time.time() - t0)
        return 0

    def report(self, seconds: float) -> None:
        summary = aggregate_dir(self.work, models=self.models, seeds=self.seeds)
        labels = {m: self.label(m) for m in self.models}
        paper = self.task.paper(self.args)
        title = self.task.title or f"SCAN {self.args.split} test exact match"
        say("")
        tag = " [CPU-SMALL: not the paper's settings]" if self.args.cpu_small else ""
        say(f"== {title}, mean +/- std over {len(self.seeds)} seed(s){tag} "
            f"(paper: {self.task.paper_table}, {self.task.paper_seeds} seeds)")
        columns = tuple(self.task.columns)
        if self.lla_models:
            columns += (("precision", "precision"), ("recall", "recall"), ("token_accuracy", "token acc."))
        say(format_summary(summary, columns, labels=labels, paper=paper))
        lla_report, damage_summary = self.lla_report(summary, labels)
        if lla_report:
            say("")
            say(lla_report)
        extra = self.task.extra_report(self.args, summary, labels)
        if extra:
            say("")
            say(extra)
        path = self.work + "/summary.json"
        write_json(path, {
            "task": self.task.name, "split": getattr(self.args, "split", None), "title": title,
            "settings": self.settings, "settings_label": self.settings_label, "hparams": asdict(self.hp),
            "seeds": self.seeds, "columns": [list(c) for c in self.task.columns],
            "std": "population standard deviation (ddof=0); std_sample: ddof=1",
            "paper": {m: {k: list(v) for k, v in d.items()} for m, d in paper.items() if m in self.models},
            "models": {m: dict(label=labels[m], **summary[m]) for m in summary},
            **({"lla": {**asdict(self.lla), "paper_schedule": self.lla.is_paper(),
                        "thrush_paper": {m: self.task.thrush_paper.get(m) for m in self.lla_models},
                        "thrush_damage_paper": self.task.thrush_damage_paper,
                        "damage": damage_summary}} if self.lla_models else {}),
        })
        say(f"== summary: {path}; settings: {self.work}/config.json; total wall time {hms(seconds)}")


def _table(rows: List[List[str]]) -> str:
    widths = [max(len(r[k]) for r in rows) for k in range(len(rows[0]))]
    return "\n".join("  ".join([r[0].ljust(widths[0])] + [c.rjust(w) for c, w in zip(r[1:], widths[1:])]).rstrip()
                     for r in rows)


def _lla_report(self, summary, labels) -> Tuple[str, Dict[str, object]]:
    """Thrush (2020)'s view of the lla rows, in %: Table 1 (ours per seed and mean +/- std beside the paper's single
    run) and, with --damage, Table 2 (mean +/- std over seeds per damage condition)."""
    if not self.lla_models:
        return "", {}
    from lexical_offline.metrics.aggregate import mean_std

    metrics = [("exact_match", "exact"), ("precision", "prec."), ("recall", "rec."), ("token_accuracy", "acc.")]
    if "bleu" in self.task.columns[0][0]:
        metrics = [("bleu", "BLEU")] + metrics
    pct = lambda name: 1.0 if name == "bleu" else 100.0  # noqa: E731
    tag = "" if self.lla.is_paper() else " [REDUCED/CHANGED, not Thrush's schedule: " + self.lla.describe(False) + "]"
    out = [f"== Thrush 2020 Table 1 view (%, mean +/- std over seeds; the paper: one run, no std){tag}"]
    rows = [["model", "seed"] + [t for _, t in metrics] + ["train s"]]
    for m in self.lla_models:
        for seed in self.seeds:
            path = f"{self.work}/{m}/seed{seed}/score.json"
            if not os.path.isfile(path):
                continue
            sc = read_json(path)
            run = f"{self.work}/{m}/seed{seed}/run.json"
            secs = read_json(run).get("train_s") if os.path.isfile(run) else None
            rows.append([m, str(seed)] + [f"{pct(k) * sc[k]:.2f}" if k in sc else "n/a" for k, _ in metrics]
                        + ["-" if secs is None else f"{secs:.0f}"])
        if m in summary:
            rows.append([m, "mean"] + [format_mean_std(summary[m]["metrics"].get(k), scale=pct(k))
                                       for k, _ in metrics] + [""])
        ref = self.task.thrush_paper.get(m)
        if ref:
            rows.append([m, "paper"] + [f"{ref[k]:.2f}" if k in ref else "-" for k, _ in metrics] + [""])
    out.append(_table(rows))
    damage_summary: Dict[str, object] = {}
    if self.damage is None:
        return "\n".join(out), damage_summary
    rows = [["model", "damaged", "seeds"] + [t for _, t in metrics if _ != "bleu"] + ["paper prec."]]
    for m in self.lla_models:
        per_cond: Dict[str, Dict[str, List[float]]] = {}
        seeds_of: Dict[str, List[int]] = {}
        for seed in self.seeds:
            path = f"{self.work}/{m}/seed{seed}/damage.json"
            if not os.path.isfile(path):
                continue
            for r in read_json(path)["results"]:
                cond = per_cond.setdefault(r["condition"], {})
                seeds_of.setdefault(r["condition"], []).append(seed)
                for k, _ in metrics:
                    if k in r.get("scores", {}):
                        cond.setdefault(k, []).append(r["scores"][k])
        damage_summary[m] = {}
        for cond, vals in per_cond.items():
            stats = {k: mean_std(v) for k, v in vals.items()}
            damage_summary[m][cond] = {"seeds": seeds_of[cond], "metrics": stats}
            ref = self.task.thrush_damage_paper.get(cond) if m == "lla" else None
            rows.append([m, cond, str(len(seeds_of[cond]))]
                        + [format_mean_std(stats.get(k), scale=100.0) for k, _ in metrics if k != "bleu"]
                        + ["-" if ref is None else f"{ref:.2f}"])
    out += ["", "== Thrush 2020 Table 2 view: tools/damage.py (re-initialised under the training seed), %, "
                "mean +/- std over seeds (the paper: LLA-LSTM, one run, precision only)" + tag, _table(rows)]
    return "\n".join(out), damage_summary


Recipe.lla_report = _lla_report


def main(argv: Optional[Sequence[str]] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] not in TASKS:
        print(f"usage: recipe.py {{{','.join(TASKS)}}} [options] (normally called by examples/<task>/run.sh)",
              file=sys.stderr)
        return 2
    task = TASKS[argv[0]]
    parser = build_parser(task)
    args = parser.parse_args(argv[1:])
    task.args = args  # the task's own options (--split, --gen) and whether --patience was given
    global PROGRESS_EVERY
    PROGRESS_EVERY = max(1.0, args.progress_every)
    return exit_status_of(lambda: Recipe(task, args).run())


def exit_status_of(start: Callable[[], int], prog: str = PROG) -> int:
    """Run ``start`` (it builds and runs a recipe) and turn its errors into run.sh's messages and exit statuses:
    2 for a RecipeError, 130 for Ctrl-C, 143 for kill (SIGTERM is handled like Ctrl-C); finished runs are kept."""
    signal.signal(signal.SIGTERM, _terminate)
    try:
        return start()
    except RecipeError as e:
        print(f"{prog}: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as e:
        print(f"{prog}: {'terminated' if isinstance(e, Terminated) else 'interrupted'} (finished runs are kept; "
              f"run again to go on)", file=sys.stderr)
        return 143 if isinstance(e, Terminated) else 130


class Terminated(KeyboardInterrupt):
    """SIGTERM (`kill`), raised like Ctrl-C so that the runners stop the fairseq processes they started."""


def _terminate(signum, frame):
    raise Terminated()


if __name__ == "__main__":
    sys.exit(main())
