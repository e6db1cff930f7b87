"""Command-line options for the lexical head and the code that turns them into a LexicalTranslationHead.

Shared by every model with a lexical head, so `--lexicon` means the same thing everywhere.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field, fields
import logging
import os
from typing import Optional

from lexical_offline.lexicon import (
    LexiconFormatError,
    build_lexicon_table,
    identity_lexicon_table,
    read_lexicon,
    uniform_lexicon_table,
)
from lexical_offline.lexicon.table import NORMALIZATIONS, LexiconTable, validate_temperature
from ..modules import LexicalTranslationHead
from .pretrained import task_control_tokens

logger = logging.getLogger(__name__)

LEXICON_KEYWORDS = ("identity", "uniform", "none")


@dataclass
class LexiconOptions:
    """The lexical head's options, their help and their defaults, in one place for every model family. An
    architecture chooses only its `--lexicon` (``lexicon_arch_defaults``'s argument)."""

    lexicon: Optional[str] = field(
        default=None,
        metadata={
            "metavar": "PATH|identity|uniform|none",
            "help": "lexicon file (source<TAB>target<TAB>score), 'identity' (the copy mechanism), "
            "'uniform', or 'none' (no lexical head: the plain decoder)",
        },
    )
    lexicon_temperature: float = field(
        default=0.0,
        metadata={
            "metavar": "TAU",
            "help": "0 keeps each row's argmax (ties share); > 0 is a softmax of the scores / TAU",
        },
    )
    lexicon_top_k: Optional[int] = field(
        default=None,
        metadata={
            "metavar": "K",
            "help": "keep the K best targets per source token, and at TAU > 0 every target tied with the "
            "K-th (default: all at TAU = 0, 8 at TAU > 0)",
        },
    )
    # "listed" also for checkpoints saved before the option existed (their table is in the checkpoint anyway)
    lexicon_normalization: str = field(
        default="listed",
        metadata={
            "choices": NORMALIZATIONS,
            "help": "listed (default): the softmax at TAU > 0 runs over a row's entries only; full-row: "
            "over the whole output row, words without an entry scoring 0 (eq. 12, the authors' "
            "SoftAlign); beyond the top-k the row's rest is spread evenly",
        },
    )
    lexicon_trainable: bool = field(default=False, metadata={"help": "fine-tune L (default: frozen, a buffer)"})
    gate_bias_init: float = field(
        default=0.0,
        metadata={
            "metavar": "B",
            "help": "initial bias of the gate logit (default 0: p_gate = 0.5); negative values start "
            "training with the lexicon switched on",
        },
    )
    gate_form: str = field(
        default="sigmoid",
        metadata={
            "choices": ("sigmoid", "copy-token"),
            "help": "sigmoid (default, eq. 6: p_gate = sigmoid(w.f + b)) or copy-token (the authors' "
            "released code: the gate is an extra word of p_write's softmax, so it opens towards "
            "the lexicon where the write logits are low)",
        },
    )
    lexicon_dense: bool = field(
        default=False,
        metadata={
            "help": "store L as a dense |Vx| x |Vy| matrix (small vocabularies; implied by a trainable uniform lexicon)"
        },
    )
    generate_unk: bool = field(
        default=False,
        metadata={
            "help": "let fairseq-generate / -interactive output <unk> (default: p(<unk>) is set to 0 and "
            "the rest renormalised at inference, as in the authors' decoder; training and "
            "validation losses are the same either way)"
        },
    )
    reset_lexicon: bool = field(
        default=False,
        metadata={
            "help": "when the checkpoint loaded (resuming, --restore-file) holds another lexicon than "
            "--lexicon's, use --lexicon's (default: stop with an error naming both fingerprints)"
        },
    )
    # Set by the plugin itself once L has been built: a model rebuilt from a checkpoint's arguments then takes
    # L from the checkpoint's state instead of re-reading the file (fairseq-generate needs no lexicon file).
    lexicon_stored_in_checkpoint: bool = field(default=False, metadata={"help": argparse.SUPPRESS})

    @classmethod
    def from_args(cls, args) -> "LexiconOptions":
        """The options in ``args``; a missing or None value (not given, or a checkpoint older than the option)
        takes the default."""
        values = {}
        for f in fields(cls):
            value = getattr(args, f.name, None)
            values[f.name] = f.default if value is None else value
        return cls(**values)


def add_lexicon_args(parser):
    """LexiconOptions as command-line options (no argparse defaults: the architecture functions set them, so an
    architecture's own `--lexicon` is not overridden)."""
    for f in fields(LexiconOptions):
        kwargs = {"help": f.metadata["help"]}
        if f.type in ("bool", bool):
            kwargs["action"] = "store_true"
        else:
            kwargs["type"] = {"float": float, "Optional[int]": int}.get(f.type, str)
            for key in ("metavar", "choices"):
                if key in f.metadata:
                    kwargs[key] = f.metadata[key]
        parser.add_argument("--" + f.name.replace("_", "-"), **kwargs)


def lexicon_arch_defaults(args, lexicon: Optional[str] = None):
    """Every lexicon option that ``args`` lacks (or holds as None) set to its default; `--lexicon` to the
    architecture's ``lexicon``."""
    if getattr(args, "lexicon", None) is None:
        args.lexicon = lexicon
    for name, value in vars(LexiconOptions.from_args(args)).items():
        if name != "lexicon":
            setattr(args, name, value)


def _load_table(opts: LexiconOptions, src_dict, tgt_dict, control) -> LexiconTable:
    """The table ``opts`` ask for; ``control``: the control tokens (task_control_tokens)."""
    spec = opts.lexicon
    src_symbols, tgt_symbols, nspecial = src_dict.symbols, tgt_dict.symbols, tgt_dict.nspecial
    if spec == "identity":
        table = identity_lexicon_table(src_symbols, tgt_symbols, nspecial, tgt_dict.unk(), control_tokens=control)
        if table.report["rows_identity"] == 0:
            logger.warning(
                "--lexicon identity: no source word is also in the target dictionary, so every row maps to <unk> "
                "and nothing can be copied (fairseq-preprocess --joined-dictionary, or a lexicon file)"
            )
        return table
    if spec == "uniform":
        return uniform_lexicon_table(src_symbols, tgt_symbols, nspecial, control_tokens=control)
    entries, provenance = read_lexicon(spec)
    top_k = opts.lexicon_top_k
    if top_k is None and opts.lexicon_temperature > 0:
        top_k = 8
    try:
        table = build_lexicon_table(
            entries,
            src_symbols,
            tgt_symbols,
            nspecial,
            opts.lexicon_temperature,
            top_k,
            unk=tgt_dict.unk(),
            normalization=opts.lexicon_normalization,
            control_tokens=control,
        )
    except ValueError as e:
        raise LexiconFormatError(spec, str(e)) from None
    if provenance:
        logger.info("lexicon %s: %s", spec, " | ".join(provenance))
    skipped = table.report["unknown_source"] + table.report["unknown_target"]
    if skipped:
        logger.warning(
            "lexicon %s: skipped %d of %d entries whose tokens are not in the dictionaries "
            "(%d unknown source, %d unknown target; e.g. %s)",
            spec,
            skipped,
            table.report["entries"],
            table.report["unknown_source"],
            table.report["unknown_target"],
            ", ".join(table.unknown_examples),
        )
    if table.report["special_source"]:
        logger.warning(
            "lexicon %s: skipped %d of %d entries whose source is a special token, which always maps to itself "
            "(e.g. %s)",
            spec,
            table.report["special_source"],
            table.report["entries"],
            ", ".join(table.special_source_examples),
        )
    if table.report["control_token"]:
        logger.warning(
            "lexicon %s: skipped %d of %d entries with a language token or <mask>, which the head never copies or "
            "translates (e.g. %s)",
            spec,
            table.report["control_token"],
            table.report["entries"],
            ", ".join(table.control_examples),
        )
    return table


def build_lexical_head(args, src_dict, tgt_dict, gate_input_dim: int):
    """The LexicalTranslationHead that the options ask for. Marks ``args`` (saved in the checkpoint) as holding the
    lexicon in the model's state.

    Args:
        args: the model's arguments (the lexicon options, `--arch`, `--copy-scatter-softmax`).
        src_dict, tgt_dict: the dictionaries (V_x and V words).
        gate_input_dim: the size of the gate's input features.

    Returns:
        The head, or None for `--lexicon none`. Its ``control_tokens``: the symbols the task adds (language tokens,
        <mask>), which it never copies or translates and --lexicon-override refuses.
    """
    opts = LexiconOptions.from_args(args)
    spec = opts.lexicon
    if spec is None:
        raise ValueError(f"--arch {args.arch} needs --lexicon PATH|identity|uniform|none ('none' is the plain decoder)")
    copy_scatter_softmax = getattr(args, "copy_scatter_softmax", False)  # lex_transformer's option
    if spec == "none":
        if copy_scatter_softmax:
            raise ValueError("--copy-scatter-softmax needs a lexical head (not --lexicon none)")
        return None
    validate_temperature(opts.lexicon_temperature)
    # Rows with a uniform part learn only densely: the uniform lexicon, and full-row rows (the authors' SoftAlign
    # is a dense matrix too).
    full_row = opts.lexicon_normalization == "full-row" and spec not in LEXICON_KEYWORDS
    dense = opts.lexicon_dense or (opts.lexicon_trainable and (spec == "uniform" or full_row))
    if copy_scatter_softmax and (dense or spec == "uniform"):
        raise ValueError("--copy-scatter-softmax needs a sparse lexicon file or --lexicon identity")
    # what the task adds, not what looks like a language token: a corpus's __url__ is a word to copy
    control = frozenset(task_control_tokens(args))
    if opts.lexicon_stored_in_checkpoint:
        # Placeholders of the right kind; the checkpoint's state fills them (and their width k).
        table = uniform_lexicon_table(src_dict.symbols, tgt_dict.symbols, tgt_dict.nspecial, control_tokens=control)
        source = None
    else:
        if spec not in LEXICON_KEYWORDS and not os.path.isfile(spec):
            raise LexiconFormatError(spec, "lexicon file not found (--lexicon)")
        table = _load_table(opts, src_dict, tgt_dict, control)
        logger.info("lexicon %s: %s; %d targets per row at most", spec, table.summary(), table.top_k)
        args.lexicon_stored_in_checkpoint = True
        source = spec  # a checkpoint loaded into this model must hold this lexicon (or --reset-lexicon)
    head = LexicalTranslationHead(
        table,
        gate_input_dim,
        trainable=opts.lexicon_trainable,
        dense=dense,
        gate_bias_init=opts.gate_bias_init,
        copy_scatter_softmax=copy_scatter_softmax,
        gate_form=opts.gate_form.replace("-", "_"),
        unk_index=None if opts.generate_unk else tgt_dict.unk(),
        source=source,
        reset_lexicon=opts.reset_lexicon,
    )
    head.control_tokens = control  # (not state: rebuilt from the arguments with the model)
    return head
