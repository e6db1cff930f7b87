"""examples/cat_oci's recipe as a planner (CatOciRecipe): its options (CatOciOptions) checked in one place into a
frozen CatOci (check_options), the settings and the three systems, and every command: fairseq-preprocess and
build_lexicon.py of a training size, each (size, system, seed) run's train, generate and score as an
execute.RunSpec. A size's runs are planned once that size is prepared (prepare.Preparation: their fingerprints hold
its data-bin's key and its lexicon's SHA-1), as a SizePlan. Planning writes nothing."""

from __future__ import annotations

import os
import re
import sys
from dataclasses import dataclass, fields, replace
from typing import Dict, List, Mapping, Optional, Tuple

from fairseq_lexical_recipes import ROOT, commands
from fairseq_lexical_recipes.console import RecipeError, show
from fairseq_lexical_recipes.execute import RunSpec
from fairseq_lexical_recipes.invocation import check_work
from fairseq_lexical_recipes.rundir import PREPROCESS_WRITES, RUN_WRITES
from fairseq_lexical_recipes.settings import TRANSFORMER_CPU_SMALL, TRANSFORMER_PAPER, TransformerSettings, overridden
from fairseq_lexical_recipes.textio import sha1_files

DEFAULT_DATA = os.path.join(os.path.dirname(ROOT), "shared", "data", "cat_oci")
FILES = {"ca": "tatoeba.ca", "oc": "tatoeba.oc"}
SPLITS = ("train", "valid", "test")
LEXICON_METHODS = ("simple", "pmi", "ibm1", "ibm2", "bayes")


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


@dataclass(frozen=True)
class CatOciOptions:
    """What examples/cat_oci/run.py parses (its defaults are these), typed and frozen."""

    data: str = DEFAULT_DATA
    work: Optional[str] = None  # None: $TMPDIR/fairseq_lexical_cat_oci[_small]
    direction: str = "ca-oc"
    dev_size: int = 250
    test_size: int = 250
    split_seed: int = 1
    sizes: str = "1000,2500,5000"
    limit: Optional[int] = None
    vocab_size: int = 2000
    systems: str = "nmt,pgn,pgn_lex"
    seeds: int = 1
    lexicon_method: str = "ibm2"
    force: bool = False
    progress_every: float = 60.0
    cpu_small: bool = False
    cpu: bool = False
    # overrides of the settings (None: the preset's)
    max_update: Optional[int] = None
    lr: Optional[float] = None
    warmup_updates: Optional[int] = None
    batch_size: Optional[int] = None
    max_tokens: Optional[int] = None  # 0: none
    validate_every: Optional[int] = None
    patience: Optional[int] = None  # 0: off
    beam: Optional[int] = None
    train_args: str = ""
    generate_args: str = ""

    @classmethod
    def from_namespace(cls, args) -> "CatOciOptions":
        return cls(**{f.name: getattr(args, f.name) for f in fields(cls)})


@dataclass(frozen=True)
class Settings:
    ts: TransformerSettings
    validate_every: int
    patience: Optional[int]
    dropout: Optional[float]  # None: the arch's default
    beam: int = 5


def settings(options: CatOciOptions) -> Settings:
    # The paper gives sizes only ("trained until convergence"): fairseq's transformer_iwslt_de_en recipe as the
    # project's other Transformer rows (fairseq_lexical_recipes), early stopping on dev loss, best checkpoint.
    if options.cpu_small:
        s = Settings(replace(TRANSFORMER_CPU_SMALL, max_update=3000), validate_every=250, patience=4, dropout=None)
    else:
        s = Settings(replace(TRANSFORMER_PAPER, max_update=50000), validate_every=500, patience=10, dropout=0.3)
    over = dict(max_update=options.max_update, lr=options.lr, warmup=options.warmup_updates)
    s = replace(s, ts=overridden(s.ts, options.max_tokens, batch_size=options.batch_size, **over))
    if options.validate_every is not None:
        s = replace(s, validate_every=options.validate_every)
    if options.patience is not None:
        s = replace(s, patience=options.patience or None)
    if options.beam is not None:
        s = replace(s, beam=options.beam)
    return s


@dataclass(frozen=True)
class CatOci:
    """One invocation of examples/cat_oci, checked: its options, WORK, the direction's languages, the systems, the
    training sizes (ascending), the seeds and the settings."""

    options: CatOciOptions
    work: str
    src: str
    tgt: str
    systems: Tuple[str, ...]
    sizes: Tuple[int, ...]
    seeds: Tuple[int, ...]
    settings: Settings
    label: str  # the settings in words

    @property
    def run_keys(self) -> List[Tuple[int, str, int]]:
        """Every (size, system, seed) in the order they run: a size's runs once it is prepared, seed by seed."""
        return [(size, system, seed) for size in self.sizes for seed in self.seeds for system in self.systems]


def check_options(options: CatOciOptions) -> CatOci:
    """The CatOci of ``options``, every option checked and nothing written (a RecipeError names the first problem;
    --work as invocation.check_work checks the recipes')."""
    src, tgt = options.direction.split("-")
    cfg = settings(options)
    systems = tuple(s.strip() for s in options.systems.split(",") if s.strip())
    bad = [s for s in systems if s not in SYSTEMS]
    if bad or not systems:
        raise RecipeError(f"--systems: unknown {', '.join(bad) or '(none)'} (choose from {', '.join(SYSTEMS)})")
    try:
        sizes = tuple(sorted({int(x) for x in options.sizes.split(",") if x.strip()}))
    except ValueError:
        raise RecipeError(f"--sizes {options.sizes!r}: expected comma-separated integers") from None
    seeds = tuple(range(1, options.seeds + 1))
    if not sizes or min(sizes) < 1 or not seeds:
        raise RecipeError("--sizes and --seeds must be positive")
    tag = "_small" if options.cpu_small else ""
    work = check_work(options.work or os.path.join(os.environ.get("TMPDIR", "/tmp"), f"fairseq_lexical_cat_oci{tag}"))
    label = (
        "CPU-SMALL (not the paper's sizes: fairseq transformer_tiny / lex_transformer_tiny, 2 + 2 layers, 64, 2 heads)"
        if options.cpu_small
        else "the paper's sizes (6 + 6 layers, 512, 4 heads, FFN 1024)"
    )
    return CatOci(options, work, src, tgt, systems, sizes, seeds, cfg, label)


def exactly(*names: str) -> "re.Pattern[str]":
    return re.compile("|".join(re.escape(n) for n in names))


@dataclass(frozen=True)
class SizePlan:
    """The runs of one training size as data, planned once the size is prepared (runner.run_stages executes them)."""

    size: int
    runs: Mapping[Tuple[str, int], RunSpec]  # (system, seed) -> its run, in the order they run


class CatOciRecipe:
    """One invocation of examples/cat_oci, checked (check_options) and planned: where WORK keeps what, every
    command, each training size's runs (plan)."""

    def __init__(self, options: CatOciOptions):
        self.invocation = check_options(options)

    # -- where WORK keeps what -----------------------------------------------------------------------------------
    def size_dir(self, size: int) -> str:
        """WORK/n<SIZE>: the size's SentencePiece model, pieces, data-bin, lexicon and run directories."""
        return f"{self.invocation.work}/n{size}"

    def run_dir(self, size: int, system: str, seed: int) -> str:
        return f"{self.size_dir(size)}/{system}/seed{seed}"

    def writes(self) -> Dict[str, "re.Pattern[str]"]:
        """Every directory this invocation writes into, and the names it writes there."""
        inv = self.invocation
        texts = [f"{split}.{lang}" for split in SPLITS for lang in (inv.src, inv.tgt)]
        out = {inv.work: exactly("config.json", "summary.json"), inv.work + "/data": exactly("split.json", *texts)}
        lexicon = ("lexicon.tsv", "lexicon.log", "lexicon.json") if "pgn_lex" in inv.systems else ()
        for size in inv.sizes:
            d = self.size_dir(size)
            out[d] = exactly("spm.model", "spm.vocab", "dict.txt", "preprocess.log", "prepared.json", *lexicon)
            out[d + "/pieces"] = exactly(*texts)
            out[d + "/bin"] = PREPROCESS_WRITES
            for system in inv.systems:
                for seed in inv.seeds:
                    out[self.run_dir(size, system, seed)] = RUN_WRITES
        return out

    # -- a size's preparation ------------------------------------------------------------------------------------
    def preprocess_command(self, size: int) -> List[str]:
        """fairseq-preprocess of the size's pieces with one dictionary, the SentencePiece vocabulary (dict.txt)."""
        inv, d = self.invocation, self.size_dir(size)
        pieces = {split: f"{d}/pieces/{split}" for split in SPLITS}
        return commands.preprocess(pieces, d + "/bin", inv.src, inv.tgt, joined=True, srcdict=d + "/dict.txt")

    def lexicon_command(self, size: int) -> List[str]:
        """build_lexicon.py over the size's training pieces (pgn_lex's lexicon)."""
        inv, d = self.invocation, self.size_dir(size)
        method = inv.options.lexicon_method
        opts = ["--symmetrize", "intersect"] if method in ("ibm1", "ibm2") else []
        opts += ["--seed", "0"] if method == "bayes" else []
        # --no-fallback: a piece with no entry falls back to itself in the model (the joined dictionary), i.e. copy
        options = ["--method", method, *opts, "--no-fallback", "--threads", "1"]
        return commands.build_lexicon(
            options, f"{d}/pieces/train.{inv.src}", f"{d}/pieces/train.{inv.tgt}", d + "/lexicon.tsv"
        )

    # -- the runs ------------------------------------------------------------------------------------------------
    def commands(self, size: int, system: str, seed: int, out: str) -> Dict[str, List[str]]:
        inv, d = self.invocation, self.size_dir(size)
        s, spec, options = inv.settings, SYSTEMS[system], inv.options
        model = ["--arch", spec.small_arch if options.cpu_small else spec.arch]
        if spec.lexicon:
            model += ["--lexicon", d + "/lexicon.tsv" if spec.lexicon == "learned" else spec.lexicon]
        if s.dropout is not None:
            model += ["--dropout", f"{s.dropout:g}"]
        cpu = ["--cpu"] if options.cpu else []
        train = commands.fairseq_train(
            d + "/bin",
            model,
            seed,
            out,
            **commands.transformer_training(s.ts),
            log_interval=50,
            log_format="--log-format simple",
            after=commands.validation(s.validate_every, s.patience) + cpu,
            extra=options.train_args,
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
            extra=options.generate_args,
        )
        score = commands.score(
            out + "/generate.txt",
            f"{inv.work}/data/test.{inv.tgt}",
            ["--bleu", "--chrf", "--tokenize", "13a"],
            hypotheses="D",
        )
        return {"train": train, "generate": generate, "score": score}

    def run(self, size: int, system: str, seed: int, data_key: Mapping[str, object], index: str = "") -> RunSpec:
        """The run of (size, system, seed): directory, commands, fingerprint (``data_key``: the size's data-bin's,
        prepare.Preparation.data_step; the lexicon's SHA-1, read from its file), config.json."""
        inv = self.invocation
        out = self.run_dir(size, system, seed)
        cmds = self.commands(size, system, seed, out)
        norm = {
            k: show(v).replace(inv.work, "$WORK").replace(ROOT, "$REPO").replace(sys.executable, "python")
            for k, v in cmds.items()
        }
        lex = self.size_dir(size) + "/lexicon.tsv"
        fp = {
            "commands": norm,
            "data": dict(data_key),
            "lexicon_sha1": sha1_files([lex]) if SYSTEMS[system].lexicon == "learned" else None,
        }
        config = {
            "size": size,
            "system": system,
            "label": SYSTEMS[system].label,
            "seed": seed,
            "settings": inv.label,
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
            training=f" ({inv.settings.ts.max_update} updates max, dev loss every {inv.settings.validate_every})",
            progress=f"{index}    n{size} {system}: ",
            force=inv.options.force,
            index=index,
        )

    def plan(self, size: int, data_key: Mapping[str, object]) -> SizePlan:
        """The runs of training size ``size``, numbered among the invocation's ("[4/9]")."""
        every = self.invocation.run_keys
        numbered = {run: f"[{k}/{len(every)}]" for k, run in enumerate(every, 1)}
        runs = {
            (system, seed): self.run(size, system, seed, data_key, numbered[size, system, seed])
            for (n, system, seed) in every
            if n == size
        }
        return SizePlan(size, runs)
