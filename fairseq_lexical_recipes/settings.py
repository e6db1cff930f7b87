"""Training settings: the LSTM rows' hyper-parameters (HParams), the Transformer rows' (TransformerSettings) and
Thrush (2020)'s LLA schedule (LlaSettings), with their presets, and the command line's overrides of them."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, List, Optional

from fairseq_lexical_recipes.console import RecipeError

if TYPE_CHECKING:
    from fairseq_lexical_recipes.options import RecipeOptions


def noam_peak_lr(d_model: int, warmup: int, factor: float = 1.0) -> float:
    """Peak of the Noam schedule factor * d^-0.5 * min(step^-0.5, step * warmup^-1.5), reached at step = warmup;
    fairseq's inverse_sqrt with --lr = this peak and --warmup-updates = warmup is the same schedule."""
    return factor * d_model**-0.5 * warmup**-0.5


@dataclass
class HParams:
    hidden: int  # LSTM hidden size = embedding size; on a CPU preset it picks the arch
    lr: float  # peak learning rate of inverse_sqrt (= the Noam peak)
    warmup: int
    clip_norm: float
    batch_size: int
    update_freq: int
    max_update: int
    validate_every: Optional[int]  # None: no validation (Colors)
    patience: Optional[int]  # early stopping on validation loss, in validations (None: off)
    write_dropout: float
    write_dropout_models: str  # "lexical" or "all": which models get --write-dropout
    sentence_avg: bool  # loss summed per sentence, averaged over sentences (the authors' code)
    adam_betas: Optional[str]  # None: fairseq's default (0.9, 0.999)
    beam: int
    checkpoint: str  # "last" or "best"
    max_len_b: int  # fairseq-generate --max-len-b (output length limit)
    gen_batch_size: int = 128
    log_interval: int = 100
    lexicon_top_k: Optional[int] = None
    decoder: str = "authors"  # LSTM rows: "authors" (their released decoder) or "fairseq" (fairseq's LSTM)


# Appendix C.1 (COGS, SCAN, English-Chinese share these) + the authors' scripts (exp/*/*.sh of
# github.com/ekinakyurek/lexical) where the paper is silent: batch 512 = 128 x 4 accumulated, Adam betas
# (0.9, 0.998), validation every 500 updates with early stopping on validation loss (tolerance 10), the loss summed
# over tokens and averaged over sentences, the final model evaluated.
PAPER_COMMON = HParams(
    hidden=512,
    lr=noam_peak_lr(512, 4000),
    warmup=4000,
    clip_norm=5.0,
    batch_size=128,
    update_freq=4,
    max_update=8000,
    validate_every=500,
    patience=10,
    write_dropout=0.0,
    write_dropout_models="lexical",
    sentence_avg=True,
    adam_betas="(0.9, 0.998)",
    beam=5,
    checkpoint="last",
    max_len_b=200,
)
# CPU-sized (not the paper's): 2 x 128 LSTM, batch 64, 2000 updates, Noam schedule for d = 128 with 400 warm-up.
CPU_SMALL_COMMON = replace(
    PAPER_COMMON,
    hidden=128,
    lr=noam_peak_lr(128, 400),
    warmup=400,
    batch_size=64,
    update_freq=1,
    max_update=2000,
    validate_every=250,
    log_interval=50,
)

# SCAN and COGS decode greedily (beam 1) by default, as the authors' main.py tests ("test evaluation (greedy)"; its
# beam call is commented out). fairseq's beam search would also lose here: it ends a sentence once `beam` hypotheses
# have ended, and on these small output vocabularies those are often junk while the best one is still in the beam
# (examples/RESULTS.md, "CPU learning curves": beam 5 loses up to 0.5 of exact match that greedy keeps).
AUTHORS_TEST_BEAM = 1

# --cpu-medium (not the paper's): --cpu-small's model and batch, trained as long as the learning curves of
# examples/RESULTS.md ask ("CPU learning curves"): no early stopping (the held-out loss reaches 0 long before
# generalisation does), validation for the log only. Tasks may set another length (max_update).
CPU_MEDIUM_COMMON = replace(CPU_SMALL_COMMON, max_update=12000, patience=None)

# The CPU presets' arch size (families.SIZES) by the LSTM rows' hidden size: lex_lstm_small / lstm_plain_small,
# lex_lstm_medium / lstm_plain_medium (the paper's arch, lex_lstm, has 512 units); the LLA and Transformer rows have
# one CPU size.
CPU_LSTM_ARCH_SIZES = {128: "small", 256: "medium"}

PRESETS = {"paper": PAPER_COMMON, "cpu-small": CPU_SMALL_COMMON, "cpu-medium": CPU_MEDIUM_COMMON}
PRESET_LABELS = {
    "paper": "the paper's settings (appendix C.1)",
    "cpu-small": "CPU-SMALL settings (not the paper's: smaller model / shorter training)",
    "cpu-medium": "CPU-MEDIUM settings (not the paper's: smaller model / batch, longer training)",
}


def cpu_sized(preset: str) -> bool:
    """True under --cpu-small or --cpu-medium: the _small / _tiny archs instead of the paper's sizes."""
    return preset != "paper"


def arch_size(preset: str, hidden: int) -> str:
    """The size of the archs (families.SIZES): "paper", or the CPU presets' by the LSTM rows' hidden size."""
    return CPU_LSTM_ARCH_SIZES[hidden] if cpu_sized(preset) else "paper"


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
    batch_size: Optional[int] = None  # sentences per batch (None: --max-tokens alone)
    update_freq: int = 1
    max_update: int = 30000
    sentence_avg: bool = False


# --cpu-small (not the paper's, not fairseq's): the _tiny archs, batch 64 sentences, 2000 updates, 400 warm-up,
# lr 1e-3 (a d = 64 model tolerates more than 5e-4).
TRANSFORMER_PAPER = TransformerSettings()
TRANSFORMER_CPU_SMALL = replace(TRANSFORMER_PAPER, lr=1e-3, warmup=400, max_tokens=None, batch_size=64, max_update=2000)
# --cpu-medium: the same trained as long as the LSTM rows
TRANSFORMER_PRESETS = {
    "paper": TRANSFORMER_PAPER,
    "cpu-small": TRANSFORMER_CPU_SMALL,
    "cpu-medium": replace(TRANSFORMER_CPU_SMALL, max_update=CPU_MEDIUM_COMMON.max_update),
}


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
        text = (
            f"Lexicon Unit alone for epochs 1-{self.lexicon_epochs} (batch {self.lexicon_batch_size}), then the "
            f"rest to epoch {self.max_epoch} (batch {self.batch_size}); Adam lr {self.lr:g} constant, no clipping; "
            + (
                "the first epoch with the best validation score is evaluated"
                if self.checkpoint == "best"
                else "the last epoch is evaluated"
            )
        )
        if not tag:
            return text
        return text + (
            " [Thrush 2020's schedule]"
            if self.is_paper()
            else " [REDUCED/CHANGED: not Thrush 2020's schedule (30 / 1000 epochs, batch 1 / 30, best epoch)]"
        )


def lla_settings(options: "RecipeOptions") -> LlaSettings:
    lla = LlaSettings(
        lr=options.lla_lr,
        batch_size=options.lla_batch_size,
        lexicon_batch_size=options.lla_lexicon_batch_size,
        lexicon_epochs=options.lla_lexicon_epochs,
        max_epoch=options.lla_max_epoch,
        checkpoint=options.lla_checkpoint,
    )
    if lla.max_epoch <= lla.lexicon_epochs:
        raise RecipeError(f"--lla-max-epoch ({lla.max_epoch}) must exceed --lla-lexicon-epochs ({lla.lexicon_epochs})")
    return lla


def transformer_settings(options: "RecipeOptions") -> TransformerSettings:
    """TransformerSettings (or the CPU-small ones) with the command line's explicit overrides."""
    return overridden(
        TRANSFORMER_PRESETS[options.preset],
        options.max_tokens,
        max_update=options.max_update,
        lr=options.lr,
        warmup=options.warmup_updates,
        batch_size=options.batch_size,
        update_freq=options.update_freq,
        sentence_avg=options.sentence_avg,
        adam_betas=options.adam_betas,
    )


def overridden(ts: TransformerSettings, max_tokens: Optional[int], **overrides) -> TransformerSettings:
    """``ts`` with the overrides given (None: the preset's; --max-tokens 0: no token limit), the paper recipes' and
    examples/cat_oci's."""
    ts = replace(ts, **{k: v for k, v in overrides.items() if v is not None})
    if max_tokens is not None:
        ts = replace(ts, max_tokens=max_tokens or None)
    if ts.max_tokens is None and ts.batch_size is None:
        raise RecipeError("the Transformer rows need --max-tokens or --batch-size (--max-tokens 0: no limit)")
    return ts


def effective_hparams(task, options: "RecipeOptions") -> HParams:
    """The task's HParams with the command line's explicit overrides (task: a fairseq_lexical_recipes.tasks Task)."""
    hp = task.hparams(options.preset)
    overrides = {
        "max_update": options.max_update,
        "lr": options.lr,
        "warmup": options.warmup_updates,
        "batch_size": options.batch_size,
        "update_freq": options.update_freq,
        "beam": options.beam,
        "max_len_b": options.max_len_b,
        "checkpoint": options.checkpoint,
        "sentence_avg": options.sentence_avg,
        "adam_betas": options.adam_betas,
        "decoder": options.decoder,
    }
    hp = replace(hp, **{k: v for k, v in overrides.items() if v is not None})
    if options.patience is not None:
        hp = replace(hp, patience=options.patience or None)
    if options.lexicon_top_k is not None:
        hp = replace(hp, lexicon_top_k=options.lexicon_top_k or None)
    if options.hidden is not None:
        if not cpu_sized(options.preset):
            raise RecipeError(
                "--hidden picks a CPU-sized LSTM arch (with --cpu-small or --cpu-medium); the paper's "
                "has 512 units (other sizes: --train-options)"
            )
        # the lr follows the size as in the Noam schedule (d^-0.5) unless given
        lr = options.lr if options.lr is not None else hp.lr * (options.hidden / hp.hidden) ** -0.5
        hp = replace(hp, hidden=options.hidden, lr=lr)
    if cpu_sized(options.preset) and hp.hidden not in CPU_LSTM_ARCH_SIZES:
        raise RecipeError(
            f"{task.name}: no CPU-sized LSTM arch has {hp.hidden} units (there are "
            f"{', '.join(map(str, CPU_LSTM_ARCH_SIZES))})"
        )
    if hp.checkpoint == "best" and hp.validate_every is None:
        raise RecipeError(f"--checkpoint best needs a validation set; {task.name} has none")
    return hp


def parse_seeds(options: "RecipeOptions") -> List[int]:
    """--seeds N (1..N) or --seed-list."""
    if options.seed_list:
        try:
            seeds = [int(s) for s in options.seed_list.split(",") if s.strip()]
        except ValueError:
            raise RecipeError(f"--seed-list {options.seed_list!r}: expected comma-separated integers") from None
    else:
        if options.seeds < 1:
            raise RecipeError(f"--seeds must be >= 1, got {options.seeds}")
        seeds = list(range(1, options.seeds + 1))
    if not seeds:
        raise RecipeError("no seed to run")
    return list(dict.fromkeys(seeds))


def max_update_of(task, options: "RecipeOptions", model: str) -> Optional[int]:
    """The training length of a row in updates, as its family sets it: the LSTM rows' (HParams), the Transformer
    rows' (TransformerSettings); None for the lla rows, trained for epochs (LlaSettings)."""
    from fairseq_lexical_recipes.catalogue import MODELS

    return MODELS[model].family.max_update(effective_hparams(task, options), transformer_settings(options))
