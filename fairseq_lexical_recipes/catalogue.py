"""The models the recipes run (rows of the papers' tables) and the lexicon-learning methods."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, Optional, Tuple

from fairseq_lexical_recipes.console import RecipeError
from fairseq_lexical_recipes.families import IWSLT_SIZES, LLA, LSTM, TRANSFORMER, ModelFamily


@dataclass(frozen=True)
class ModelSpec:
    label: str  # row label of the tables
    family: ModelFamily  # what the row shares with its family: archs per size, training, checkpoint (families.py)
    arch: str  # full-size fairseq arch (family.arch gives the CPU presets')
    lexicon: Optional[str]  # None (plain LSTM), "identity", "uniform", or a lexicon method ("simple", ...)
    extra: Tuple[str, ...] = ()  # further fairseq-train options (family.row_options: at the CPU sizes)
    # the data-bin of one dictionary for source and target (fairseq-preprocess --joined-dictionary): pgn's identity
    # lexicon can copy every source token only there
    joined_dictionary: bool = False

    @property
    def lexical(self) -> bool:
        return self.lexicon is not None

    @property
    def adversary(self) -> bool:
        """Thrush (2020)'s Lexicon-Adversary unit: the lla rows but lla_noadv."""
        return self.family is LLA and "--no-adversary" not in self.extra


MODELS: Dict[str, ModelSpec] = {
    "lstm": ModelSpec("LSTM", LSTM, "lstm_plain", None),
    "copy": ModelSpec("LSTM + copy", LSTM, "lex_lstm", "identity"),
    "simple": ModelSpec("LSTM + Lex.: Simple", LSTM, "lex_lstm", "simple"),
    "pmi": ModelSpec("LSTM + Lex.: PMI", LSTM, "lex_lstm", "pmi"),
    "ibm2": ModelSpec("LSTM + Lex.: IBMM2 (IBM Model 2)", LSTM, "lex_lstm", "ibm2"),
    "ibm1": ModelSpec("LSTM + Lex.: IBMM2 as released (IBM Model 1)", LSTM, "lex_lstm", "ibm1"),
    "bayes": ModelSpec("LSTM + Lex.: Bayesian", LSTM, "lex_lstm", "bayes"),
    "uniform": ModelSpec("LSTM + Lex.: Uniform (learned)", LSTM, "lex_lstm", "uniform", ("--lexicon-trainable",)),
    "soft": ModelSpec(
        "LSTM + Lex.: Simple, Soft (tau 0.1)", LSTM, "lex_lstm", "simple", ("--lexicon-temperature", "0.1")
    ),
    "learned": ModelSpec(
        "LSTM + Lex.: Simple, Soft + Learned",
        LSTM,
        "lex_lstm",
        "simple",
        ("--lexicon-temperature", "0.1", "--lexicon-trainable"),
    ),
    # Thrush (2020): the Lexicon and Lexicon-Adversary units (docs/lla.md); not rows of Akyurek & Andreas' tables,
    # so neither 'paper' nor 'all' includes them.
    "lla": ModelSpec("LLA-LSTM (Thrush 2020)", LLA, "lla_lstm", None),
    "lla_noadv": ModelSpec("LLA-LSTM, no adversary (Thrush 2020)", LLA, "lla_lstm", None, ("--no-adversary",)),
    # Transformer family (docs/transformer.md, docs/rdangle.md): fairseq's `transformer_iwslt_de_en` sizes
    # (families.IWSLT_SIZES; rdangle_transformer_iwslt_de_en has them), the _tiny archs at the CPU sizes. Not in
    # 'paper' or 'all': name them.
    "transformer": ModelSpec("Transformer", TRANSFORMER, "lex_transformer", "none", IWSLT_SIZES),
    "lex_transformer": ModelSpec("Transformer + Lex.: Simple", TRANSFORMER, "lex_transformer", "simple", IWSLT_SIZES),
    # pgn_transformer already has the iwslt sizes (docs/transformer.md) but fairseq's default dropout 0.1
    "pgn": ModelSpec(
        "PGN Transformer (identity lexicon, joined dictionary)",
        TRANSFORMER,
        "pgn_transformer",
        "identity",
        ("--dropout", "0.3"),
        joined_dictionary=True,
    ),
    "dangle": ModelSpec(
        "Dangle (R-Dangle shr, interval 1)",
        TRANSFORMER,
        "dangle_transformer",
        None,
        ("--kv-mode", "shared", "--reencode-interval", "1"),
    ),
    "rdangle_shr": ModelSpec(
        "R-Dangle shr, interval 4",
        TRANSFORMER,
        "rdangle_transformer_iwslt_de_en",
        None,
        ("--kv-mode", "shared", "--reencode-interval", "4"),
    ),
    "rdangle_sep": ModelSpec(
        "R-Dangle sep, interval 4",
        TRANSFORMER,
        "rdangle_transformer_iwslt_de_en",
        None,
        ("--kv-mode", "sep", "--reencode-interval", "4"),
    ),
    # interval 1 with separate values: the R-Dangle_sep of the paper's Table 4 (shared kv at interval 1 is Dangle)
    "rdangle_sep_o1": ModelSpec(
        "R-Dangle sep, interval 1",
        TRANSFORMER,
        "rdangle_transformer_iwslt_de_en",
        None,
        ("--kv-mode", "sep", "--reencode-interval", "1"),
    ),
}


def rows_of(family: ModelFamily) -> Tuple[str, ...]:
    """The names of ``family``'s rows, in the catalogue's order."""
    return tuple(m for m, spec in MODELS.items() if spec.family is family)


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
            names += [m for m, spec in MODELS.items() if spec.family.in_all]
        elif item in MODELS:
            names.append(item)
        else:
            raise RecipeError(f"--models: unknown model {item!r} (choose from {', '.join(MODELS)}, paper, all)")
    if not names:
        raise RecipeError("--models: no model given")
    return list(dict.fromkeys(names))
