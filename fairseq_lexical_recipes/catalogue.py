"""The models the recipes run (rows of the papers' tables) and the lexicon-learning methods."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Dict, List, Optional, Tuple

from fairseq_lexical_recipes.console import RecipeError


@dataclass(frozen=True)
class ModelSpec:
    label: str  # row label of the tables
    arch: str  # full-size fairseq arch (the CPU-small one adds "_small")
    lexicon: Optional[str]  # None (plain LSTM), "identity", "uniform", or a lexicon method ("simple", ...)
    extra: Tuple[str, ...] = ()  # further fairseq-train options
    small_arch: Optional[str] = None  # the --cpu-small arch when it is not arch + "_small" (Transformer rows)
    small_extra: Tuple[str, ...] = ()  # fairseq-train options of the --cpu-small arch instead of `extra`
    transformer: bool = False  # Transformer family: TransformerSettings instead of the LSTM schedule

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
    "learned": ModelSpec(
        "LSTM + Lex.: Simple, Soft + Learned",
        "lex_lstm",
        "simple",
        ("--lexicon-temperature", "0.1", "--lexicon-trainable"),
    ),
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
IWSLT_SIZES = (
    "--encoder-embed-dim",
    "512",
    "--decoder-embed-dim",
    "512",
    "--encoder-ffn-embed-dim",
    "1024",
    "--decoder-ffn-embed-dim",
    "1024",
    "--encoder-attention-heads",
    "4",
    "--decoder-attention-heads",
    "4",
    "--encoder-layers",
    "6",
    "--decoder-layers",
    "6",
    "--dropout",
    "0.3",
)
MODELS.update(
    {
        "transformer": ModelSpec(
            "Transformer", "lex_transformer", "none", IWSLT_SIZES, small_arch="lex_transformer_tiny", transformer=True
        ),
        "lex_transformer": ModelSpec(
            "Transformer + Lex.: Simple",
            "lex_transformer",
            "simple",
            IWSLT_SIZES,
            small_arch="lex_transformer_tiny",
            transformer=True,
        ),
        # pgn_transformer already has the iwslt sizes (docs/transformer.md) but fairseq's default dropout 0.1
        "pgn": ModelSpec(
            "PGN Transformer (identity lexicon, joined dictionary)",
            "pgn_transformer",
            "identity",
            ("--dropout", "0.3"),
            small_arch="lex_transformer_tiny",
            transformer=True,
        ),
        "dangle": ModelSpec(
            "Dangle (R-Dangle shr, interval 1)",
            "dangle_transformer",
            None,
            ("--kv-mode", "shared", "--reencode-interval", "1"),
            small_arch="rdangle_transformer_tiny",
            transformer=True,
        ),
        "rdangle_shr": ModelSpec(
            "R-Dangle shr, interval 4",
            "rdangle_transformer_iwslt_de_en",
            None,
            ("--kv-mode", "shared", "--reencode-interval", "4"),
            small_arch="rdangle_transformer_tiny",
            transformer=True,
        ),
        "rdangle_sep": ModelSpec(
            "R-Dangle sep, interval 4",
            "rdangle_transformer_iwslt_de_en",
            None,
            ("--kv-mode", "sep", "--reencode-interval", "4"),
            small_arch="rdangle_transformer_tiny",
            transformer=True,
        ),
        # interval 1 with separate values: the R-Dangle_sep of the paper's Table 4 (shared kv at interval 1 is Dangle)
        "rdangle_sep_o1": ModelSpec(
            "R-Dangle sep, interval 1",
            "rdangle_transformer_iwslt_de_en",
            None,
            ("--kv-mode", "sep", "--reencode-interval", "1"),
            small_arch="rdangle_transformer_tiny",
            transformer=True,
        ),
    }
)
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


# method -> (tools/build_lexicon.py options, description printed with the entry count)
LEXICON_METHODS: Dict[str, Tuple[Tuple[str, ...], str]] = {
    "simple": (("--method", "simple"), "Simple rule, section 4.2"),
    "pmi": (("--method", "pmi"), "PMI, eq. 13"),
    "ibm2": (("--method", "ibm2", "--symmetrize", "intersect"), "IBM Model 2, optimised tension, intersect, eq. 12"),
    "ibm1": (
        ("--method", "ibm1", "--symmetrize", "intersect"),
        "IBM Model 1, intersect: what the authors' released 'IBMM2' lexicons are",
    ),
    "bayes": (("--method", "bayes", "--seed", "0"), "Bayesian, Frank et al. 2007, eq. 14"),
}

# The LSTM decoder of the authors' released code (ekinakyurek/lexical, src/decoder.py), which produced the paper's
# numbers: attentional output W [e(y_t-1); o_t-1; h_t; c_t] + b without tanh, N(0, 1) embeddings and, for the
# lexical rows, the gate as a "copy" word of p_write's softmax. On Colors it is the difference between ~0.1 and the
# paper's 0.79 (examples/RESULTS.md). `--decoder fairseq` gives fairseq's LSTM (tanh Luong output, eq. 6's gate).
AUTHORS_DECODER = ("--decoder-output", "combined", "--embedding-init", "normal")
AUTHORS_GATE = ("--gate-form", "copy-token", "--gate-features", "output")
# ... and their output masking on the lexical rows: -99999 on <s>, <pad> and <unk> after the copy mixture. A source
# word without a lexicon entry translates to <unk> in ours (<pad> in theirs), so without the mask every look at such a
# word costs the lexicon branch its mass, and at 512 units p_write wins for good (docs/authors_code.md, "At the
# paper's width"). With the authors' initialisation (lex_lstm's default for their decoder) the paper's rows learn.
AUTHORS_OUTPUTS = ("--exclude-special-outputs",)
# Their training loop, as options: dropout where their code puts it, random batches (docs/authors_code.md). Not a
# recipe default (the width diagnosis found it unneeded for the gate); the width plan and proxy run it as a variant.
AUTHORS_LOOP = ("--dropout-placement", "authors", "--task", "lexical_translation", "--batch-order", "random")


def parse_models(text: str, task) -> List[str]:
    """--models: names, 'paper' (the task's paper_models) and 'all' (every model but the lla and Transformer rows)."""
    names = []
    for item in [t.strip() for t in text.split(",") if t.strip()]:
        if item == "paper":
            names += task.paper_models
        elif item == "all":
            names += [m for m, spec in MODELS.items() if not (spec.lla or spec.transformer)]
        elif item in MODELS:
            names.append(item)
        else:
            raise RecipeError(f"--models: unknown model {item!r} (choose from {', '.join(MODELS)}, paper, all)")
    if not names:
        raise RecipeError("--models: no model given")
    return list(dict.fromkeys(names))
